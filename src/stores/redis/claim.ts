/**
 * The Redis claim: one run of the claim script (`scripts/claim.lua.ts`), one round trip. It inserts the
 * record, or takes it over when its retention expired (any fingerprint) or its lease expired (same
 * fingerprint, still in progress, the recovery point kept), or else returns the standing record unchanged.
 * On Redis 7 and later the plain claim (`plainClaimOn`) comes first, and the script runs only for the
 * records that plain command cannot decide.
 *
 * @module
 */
import type { RedisConnection } from './connection.js';
import { claimOf } from '../../core/record.js';
import type { ClaimInput, ClaimResult } from '../../core/store.js';
import { decodeRecord, encodeHead } from './layout.js';
import { coalesceWrites } from './coalesce.js';
import { LuaScript } from './script.js';
import { CLAIM_LUA } from './scripts/claim.lua.js';
import { recordTtlMs } from './ttl.js';

const CLAIM = new LuaScript(CLAIM_LUA);

/**
 * Claims `input` under the record key `key` with the fencing token `leaseToken`, at `now` (ms), or at the
 * server's `TIME` when `now` is `''`.
 */
export async function claimOn(client: RedisConnection, key: string, input: ClaimInput, now: number | '', leaseToken: string): Promise<ClaimResult> {
  return claimResultOf(input, leaseToken, (await CLAIM.run(client, [key], claimArguments(input, now, leaseToken))) as ClaimReply);
}

/** The buffer variant of `SET` ioredis defines at run time; its typings name no `NX GET` form. */
interface BufferSet {
  setBuffer(key: string, value: Buffer, ...options: (string | number)[]): Promise<Buffer | null>;
}

// Hot path: docs/hot-path.md#redis-plain-claim
/**
 * The plain claim: `SET key head NX GET PX ttl` (Redis 7 and later), one command and no script. It writes
 * the record in progress `now` (ms, Redis's time: `server-clock.ts`, or the injected clock) when the key is
 * absent (row C1: a won claim, no takeover), and otherwise changes nothing and answers the standing
 * record, which decides the claim when it is a replay or a refusal for certain at `now`: retained, and
 * completed or under a lease that ends after `now`. Every other record — a lease or a retention that may
 * be over (a takeover, rows C2 and C4), the caller's own token (row C3), a retrysafe 0.1.0 record hash
 * (`WRONGTYPE`) — answers `undefined`, and the caller runs the claim script, which decides on Redis's
 * own clock.
 *
 * @throws the driver's error when Redis fails (an `OOM` refusal included: the script can still answer a
 *   replay there, so the caller tries it)
 */
export async function plainClaimOn(client: RedisConnection, key: string, input: ClaimInput, now: number, leaseToken: string): Promise<ClaimResult | undefined> {
  const leaseExpiresAt = now + input.leaseMs;
  const head = encodeHead({
    scope: input.scope,
    key: input.key,
    fingerprint: input.fingerprint,
    state: 'in_progress',
    leaseToken,
    leaseExpiresAt,
    createdAt: now,
    expiresAt: now + input.retentionMs,
  });
  coalesceWrites(client);
  const ttl = recordTtlMs(Math.max(input.leaseMs, input.retentionMs));
  const standing = await (client as unknown as BufferSet).setBuffer(key, head, 'NX', 'GET', 'PX', ttl).catch(unlessWrongType);
  if (standing === null) return { acquired: true, claim: claimOf(input, leaseToken, leaseExpiresAt, false) };
  if (standing === undefined) return undefined;
  const record = decodeRecord(standing);
  const decided = record.expiresAt > now && (record.state === 'completed' || record.leaseExpiresAt > now) && record.leaseToken !== leaseToken;
  return decided ? { acquired: false, record } : undefined;
}

/** `undefined` for a `WRONGTYPE` refusal (a key that holds a 0.1.0 record hash); any other error is thrown again. */
function unlessWrongType(error: unknown): undefined {
  if (error instanceof Error && error.message.startsWith('WRONGTYPE')) return undefined;
  throw error;
}

/** The claim script's reply (see `scripts/claim.lua.ts`). */
export type ClaimReply = [number, number | Buffer, number?, Buffer?];

/** The claim script's ARGV for `input` at `now` under `leaseToken`. */
export function claimArguments(input: ClaimInput, now: number | '', leaseToken: string): (string | number)[] {
  return [now, input.fingerprint, leaseToken, input.leaseMs, input.retentionMs, input.scope, input.key, recordTtlMs(Math.max(input.leaseMs, input.retentionMs))];
}

/** The claim result of the script's `reply` to `input` under `leaseToken`. */
export function claimResultOf(input: ClaimInput, leaseToken: string, reply: ClaimReply): ClaimResult {
  if (reply[0] === 0) {
    return { acquired: false, record: decodeRecord(reply[1] as Buffer) };
  }
  const leaseExpiresAt = (reply[2] ?? Number.NaN) + input.leaseMs;
  return { acquired: true, claim: claimOf(input, leaseToken, leaseExpiresAt, reply[1] === 1, reply[3]?.toString('utf8')) };
}
