/**
 * The factory of the Redis store: options, their validation, and the frozen configuration.
 *
 * @module
 */
import { randomUUID } from 'node:crypto';
import type { Clock } from '../../core/clock.js';
import { invalidOption, requireBoolean, requireClock, requireDurationMs, requireFunction, requireGenerateId, requireOptions } from '../../core/validate.js';
import type { IdempotencyStore } from '../../core/store.js';
import { isNodeRedisCluster, isRedisConnection, type RedisConnection } from './connection.js';
import { RedisStore } from './redis-store.js';
import { transportOf } from './transport.js';

/** Options of {@link createRedisStore}. */
export interface RedisStoreOptions {
  /**
   * The connection the store runs its scripts and reads on: an ioredis `Redis`, an ioredis `Cluster` (each
   * record is one hash tag, so each script runs on the master owning its slot, and `reap` and
   * `listAbandoned` walk every master), or a node-redis client to one Redis (`createClient()` of the
   * `redis` package, version 6; connect it yourself). A node-redis Cluster (`createCluster()`) is refused:
   * on Redis Cluster use ioredis. Caller-owned: `close()` leaves it open. Give an ioredis connection
   * `enableOfflineQueue: false` (or a small `maxRetriesPerRequest`), a node-redis client
   * `disableOfflineQueue: true`, so that, with Redis down, operations reject at once and the engine answers
   * `StoreUnavailableError` instead of queueing requests. The store works the same with ioredis's
   * `enableAutoPipelining: true`, but it measured slower (docs/redis.md).
   */
  readonly client: RedisConnection;
  /**
   * Namespace of every key the store writes: records live at `${prefix}:{…}`. Must be non-empty and hold no
   * `{` or `}` (the braces delimit the Redis Cluster hash tag). @defaultValue 'retrysafe'
   */
  readonly prefix?: string;
  /**
   * Replaces Redis's clock with this one (milliseconds since the epoch, passed to every script). For
   * tests on a fake clock, or a single process: with it, leases and retention depend on this process's
   * clock again, and a process whose clock runs ahead takes over live leases of others.
   * @defaultValue none: "now" is Redis's `TIME`, read inside each script, so processes sharing the store
   * need no clock sync
   */
  readonly clock?: Clock;
  /** Fencing-token generator. @defaultValue `crypto.randomUUID` */
  readonly generateId?: () => string;
  /**
   * A connection dedicated to `waitFor`'s pub/sub subscriptions, of either driver, caller-owned (`close()`
   * unsubscribes but leaves it open). @defaultValue a duplicate of `client`, opened on the first `waitFor` that has to wait
   * and closed by `close()`
   */
  readonly subscriber?: RedisConnection;
  /**
   * How many replicas must hold a claim before the work runs (and a completion or recovery point before it
   * counts as saved): after each of those writes the store sends `WAIT waitReplicas waitReplicasTimeoutMs`
   * to the record's master. Replication is asynchronous, so without it a master that fails right after
   * acknowledging a claim can lose it to the replica promoted in its place, and a retry then runs the work a
   * second time (docs/scaling.md). With it, a claim the replicas do not acknowledge in time is handed back
   * and `claim` rejects, so the engine answers `StoreUnavailableError` (HTTP 503) without running the work;
   * an unacknowledged completion makes `complete` reject (the engine still answers the response, and the
   * key stays claimed until its lease ends). Set it to the number of replicas each master has.
   * @defaultValue 0 (no `WAIT`: one round trip per operation)
   */
  readonly waitReplicas?: number;
  /**
   * How long each `WAIT` blocks for the replicas, in milliseconds (a positive integer; Redis reads 0 as
   * "forever", so it is refused). @defaultValue 1000
   */
  readonly waitReplicasTimeoutMs?: number;
  /**
   * Longest wait, in milliseconds, for `client`'s connection while it is still being set up (just created,
   * or reconnecting and between connect and ready) before an operation runs: with `enableOfflineQueue:
   * false`, a command sent before the connection is ready fails, so the first requests after start would
   * get 503. Operations that arrive while one wait is in progress share it (one set of listeners on
   * `client`), so the bound counts from the first of them. A connection that is down (`reconnecting`) or
   * closed is not waited for: operations fail fast. 0 never waits. @defaultValue 5_000
   */
  readonly readyTimeoutMs?: number;
  /**
   * Runs on a Redis whose `maxmemory-policy` may evict keys. By default the store reads the policy of the
   * server (on Cluster, of every master) before its first operation and again after each reconnect, and
   * refuses anything but `noeviction`: every record key has a TTL, so `volatile-*` policies evict records
   * as `allkeys-*` ones do, and an evicted completed record runs its operation again on the next retry.
   * Refused, every operation (and `ping`) rejects with `RedisEvictionPolicyError`, which the engine answers
   * as 503. With `true` the store runs anyway and reports it once through `onWarning`. See docs/redis.md,
   * "Memory and eviction". @defaultValue false
   */
  readonly allowEvictingPolicy?: boolean;
  /**
   * Receives the store's one warning: the text saying the server's policy may evict records, when
   * `allowEvictingPolicy` let the store run on it (once per store). @defaultValue `process.emitWarning`
   */
  readonly onWarning?: (message: string) => void;
}

const DEFAULT_READY_TIMEOUT_MS = 5_000;

/**
 * @throws TypeError naming `option` unless `value` is an ioredis `Redis` or `Cluster` or a node-redis client
 *   to one Redis (a node-redis Cluster is refused by name)
 */
function requireConnection(option: string, value: unknown): asserts value is RedisConnection {
  if (isNodeRedisCluster(value)) throw invalidOption(option, 'an ioredis Cluster for Redis Cluster (the store does not run on a node-redis Cluster)', value);
  if (!isRedisConnection(value)) throw invalidOption(option, 'an ioredis Redis or Cluster connection, or a node-redis client (createClient)', value);
}

function emitWarning(message: string): void {
  process.emitWarning(message, { code: 'RETRYSAFE_REDIS_EVICTING_POLICY' });
}

/**
 * Creates an {@link IdempotencyStore} on Redis. Each operation is one Lua script run with EVALSHA (one
 * round trip; reloaded by EVAL when Redis answers NOSCRIPT, e.g. after a restart); `complete` and `release`
 * (and `checkpoint`, which records an atomic phase's recovery point) are fenced by the lease token; a
 * takeover claim hands the recovery point on; `listAbandoned` and `listRecords` walk the prefix with SCAN; each record key
 * carries a real TTL (retention plus `REDIS_TTL_GRACE_MS`) so Redis drops old records by itself;
 * `waitFor` listens on the record's pub/sub channel.
 *
 * `client` is an ioredis `Redis` or `Cluster`, or a node-redis client (`createClient()`); on Redis Cluster
 * give it an ioredis `Cluster`. `waitReplicas` closes the window in which a failover loses an acknowledged
 * claim (see the option).
 *
 * Redis cannot commit together with your business database: if the process dies between the business write
 * and `complete`, the record stays `in_progress` until its lease expires, and the next retry runs the
 * operation again. See docs/redis.md.
 *
 * The store refuses a server whose `maxmemory-policy` is not `noeviction` (option `allowEvictingPolicy`):
 * its first operation reads the policy, and every operation rejects with `RedisEvictionPolicyError` while
 * it is refused.
 *
 * @throws TypeError naming the option when an option is invalid, e.g. `client` is a node-redis Cluster
 * @example
 * ```ts
 * import { Redis } from 'ioredis';
 * import { createReceiver } from 'retrysafe';
 * import { createRedisStore } from 'retrysafe/redis';
 *
 * const client = new Redis('redis://127.0.0.1:6379', { enableOfflineQueue: false });
 * const receiver = createReceiver({ store: createRedisStore({ client, prefix: 'payments' }) });
 * ```
 * @example node-redis
 * ```ts
 * import { createClient } from 'redis';
 * import { createRedisStore } from 'retrysafe/redis';
 *
 * const client = await createClient({ url: 'redis://127.0.0.1:6379', disableOfflineQueue: true }).on('error', console.error).connect();
 * const store = createRedisStore({ client, prefix: 'payments' });
 * ```
 */
export function createRedisStore(
  options: RedisStoreOptions,
): IdempotencyStore & Pick<Required<IdempotencyStore>, 'kind' | 'waitFor' | 'checkpoint' | 'listAbandoned' | 'ping' | 'countExpiredLeases' | 'listRecords'> {
  requireOptions('createRedisStore', options);
  requireConnection('client', options.client);
  const prefix = options.prefix ?? 'retrysafe';
  if (typeof prefix !== 'string' || prefix === '' || /[{}]/.test(prefix)) throw invalidOption('prefix', 'a non-empty string without "{" or "}"', prefix);
  const clock = options.clock === undefined ? undefined : requireClock(options.clock);
  const generateId = requireGenerateId(options.generateId ?? randomUUID);
  if (options.subscriber !== undefined) requireConnection('subscriber', options.subscriber);
  const waitReplicas = options.waitReplicas ?? 0;
  if (!Number.isSafeInteger(waitReplicas) || waitReplicas < 0) throw invalidOption('waitReplicas', 'a non-negative integer', waitReplicas);
  const waitReplicasTimeoutMs = requireDurationMs('waitReplicasTimeoutMs', options.waitReplicasTimeoutMs ?? 1_000);
  const allowEvictingPolicy = requireBoolean('allowEvictingPolicy', options.allowEvictingPolicy ?? false);
  const onWarning = requireFunction<(message: string) => void>('onWarning', options.onWarning ?? emitWarning);
  const readyTimeoutMs = options.readyTimeoutMs === 0 ? 0 : requireDurationMs('readyTimeoutMs', options.readyTimeoutMs ?? DEFAULT_READY_TIMEOUT_MS);
  return new RedisStore(
    Object.freeze({
      client: transportOf(options.client),
      prefix,
      clock,
      generateId,
      subscriber: options.subscriber === undefined ? undefined : transportOf(options.subscriber),
      readyTimeoutMs,
      waitReplicas,
      waitReplicasTimeoutMs,
      allowEvictingPolicy,
      onWarning,
    }),
  );
}
