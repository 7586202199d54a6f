/**
 * The eviction check: the Redis store refuses a server whose `maxmemory-policy` may evict keys, because
 * every record key carries a TTL (retention plus a grace), so the `volatile-*` policies evict records as
 * readily as the `allkeys-*` ones do, and an evicted completed record runs its operation again on the next
 * retry. Only `noeviction` keeps every record: at the memory limit Redis refuses new claims instead, and
 * the engine answers them 503 without running the work (docs/redis.md, "Memory and eviction").
 *
 * @module
 */
import { ModuleError } from '../../core/errors.js';
import type { RedisNode, RedisTransport } from './transport.js';

/** The one `maxmemory-policy` that never drops a record. */
const SAFE_EVICTION_POLICY = 'noeviction';

/**
 * A Redis the store runs on has a `maxmemory-policy` other than `noeviction` (or its policy could be read
 * neither with `CONFIG GET` nor from `INFO memory`), and the store was not created with
 * `allowEvictingPolicy: true`. Every store operation rejects with it until the server's policy is
 * `noeviction` (it is read again on the next operation), so the engine answers `StoreUnavailableError`
 * (HTTP 503) with this as its `cause`, and `ping()` (the health check) rejects with it.
 */
export class RedisEvictionPolicyError extends ModuleError<'store-eviction-policy'> {
  override readonly name = 'RedisEvictionPolicyError';
  constructor(
    /** The policy the server reported, or `undefined` when it could not be read. */
    readonly policy: string | undefined,
    /** The server, as `host:port`. */
    readonly server: string,
    options?: { cause?: unknown },
  ) {
    super(
      'store-eviction-policy',
      policy === undefined
        ? `retrysafe: the maxmemory-policy of the Redis at ${server} could not be read (CONFIG GET and INFO memory both failed); the Redis store requires noeviction, or the option allowEvictingPolicy: true`
        : `retrysafe: the Redis at ${server} has maxmemory-policy ${policy}, which evicts idempotency records (each has a TTL) so their operations run again; set maxmemory-policy noeviction, or pass allowEvictingPolicy: true`,
      options,
    );
  }
}

/** A server that does not run the store's policy: its address and what it reported. */
interface EvictingServer {
  readonly server: string;
  readonly policy: string | undefined;
  readonly cause?: unknown;
}

/** What the store learns of its servers when it connects. */
interface ServerInspection {
  /** The servers whose policy is not `noeviction`, or could not be read; empty when every one is safe. */
  readonly evicting: readonly EvictingServer[];
  /** Every server reports Redis 7.0 or later, so scripts may carry flags (`allowingOom` in `script.ts`). */
  readonly scriptFlags: boolean;
}

/**
 * Reads the `maxmemory-policy` and the version of `transport`'s servers (the one Redis, or every master
 * of a Cluster).
 *
 * @throws the driver's error when a server cannot be reached at all (nothing was learnt: the caller checks
 *   again on its next operation)
 */
export async function inspectServers(transport: RedisTransport): Promise<ServerInspection> {
  const refusal = (error: unknown): boolean => transport.isRefusal(error);
  const servers = await Promise.all(
    transport.masters().map(async (node) => ({ server: node.address, major: await majorVersion(node, refusal), ...(await readPolicy(node, refusal)) })),
  );
  return {
    evicting: servers.filter((s) => s.policy !== SAFE_EVICTION_POLICY).map(({ server, policy, cause }) => ({ server, policy, cause })),
    scriptFlags: servers.length > 0 && servers.every((s) => s.major >= 7),
  };
}

/** The major version `INFO server` reports (0 when it cannot be read). */
async function majorVersion(node: RedisNode, isRefusal: (error: unknown) => boolean): Promise<number> {
  const info = await node.info('server').catch((error: unknown) => {
    if (!isRefusal(error)) throw error;
    return '';
  });
  return Number(/^redis_version:(\d+)/m.exec(info)?.[1] ?? 0);
}

/**
 * `CONFIG GET maxmemory-policy`, or, where `CONFIG` is refused (renamed or disabled on managed services,
 * or denied by an ACL), the `maxmemory_policy` line of `INFO memory`.
 */
async function readPolicy(node: RedisNode, isRefusal: (error: unknown) => boolean): Promise<{ readonly policy: string | undefined; readonly cause?: unknown }> {
  let refused: unknown;
  try {
    const policy = await node.configGet('maxmemory-policy');
    if (policy !== undefined) return { policy };
  } catch (error) {
    if (!isRefusal(error)) throw error;
    refused = error;
  }
  try {
    const match = /^maxmemory_policy:(\S+)/m.exec(await node.info('memory'));
    return match?.[1] === undefined ? { policy: undefined, cause: refused } : { policy: match[1] };
  } catch (error) {
    if (!isRefusal(error)) throw error;
    return { policy: undefined, cause: error };
  }
}
