/**
 * The Redis claim, one round trip in the common cases: a plain `SET … NX GET` when the store knows a bound
 * of Redis's clock (`server-clock.ts`), else one run of the claim script (`scripts/claim.lua.ts`). Either
 * inserts the record, or takes it over when its retention expired (any fingerprint) or its lease expired
 * (same fingerprint, still in progress, the recovery point kept), or else returns the standing record
 * unchanged; only the script takes a record over.
 *
 * @module
 */
import { claimOf, type IdempotencyRecord } from '../../core/record.js';
import type { ClaimInput, ClaimResult } from '../../core/store.js';
import { decodeRecord, encodeNewHead } from './layout.js';
import { LuaScript } from './script.js';
import { CLAIM_LUA } from './scripts/claim.lua.js';
import type { RedisTransport } from './transport.js';
import { recordTtlMs } from './ttl.js';

const CLAIM = new LuaScript(CLAIM_LUA);

/**
 * Claims `input` under the record key `key` with the fencing token `leaseToken`, at `now` (ms), or at the
 * server's `TIME` when `now` is `''`.
 */
export async function claimOn(transport: RedisTransport, key: string, input: ClaimInput, now: number | '', leaseToken: string): Promise<ClaimResult> {
  return claimResultOf(input, leaseToken, (await CLAIM.run(transport, [key], claimArguments(input, now, leaseToken))) as ClaimReply);
}

// Hot path: docs/hot-path.md#redis-set-claim
/**
 * Claims `input` under the record key `key` with the fencing token `leaseToken` on one Redis of version 7
 * or later, deciding by `bound`: an upper bound of Redis's clock (ms since the epoch, never behind it, ahead
 * of it by at most about a round trip; `ServerClock.latest`). Sends `SET key value PX ttl NX GET`, the value
 * the new record the claim script would write at `bound` (lease end `bound + leaseMs`, created `bound`,
 * retention end `bound + retentionMs`):
 *
 * - no reply value: the key was absent and now holds that record (C1 of the claim decision table);
 * - the standing record, which Redis left as it was: at `bound` it is still retained, and is either this
 *   claim's own, in progress under `leaseToken` and this fingerprint with its lease not over (C3: the
 *   driver resent the `SET` after a dropped connection), answered won with the standing lease; or one that stands
 *   (C5 to C7: another fingerprint, completed, or another holder's lease not over), answered refused with it;
 * - anything else (a lease or retention that may be over, since `bound` leads Redis's clock and so proves
 *   nothing at or before it; a value this store cannot read), a `WRONGTYPE` refusal (a retrysafe 0.1.0
 *   record hash) or an `OOM` refusal (Redis refuses every `SET` over `maxmemory` under `noeviction`, even
 *   one that writes nothing, while the script refuses only a claim that writes): the claim script, by
 *   Redis's `TIME`, as {@link claimOn} runs it.
 *
 * @throws the driver's error when Redis fails (after the script, when it ran)
 */
export async function setClaimOn(transport: RedisTransport, key: string, input: ClaimInput, leaseToken: string, bound: number): Promise<ClaimResult> {
  const leaseExpiresAt = bound + input.leaseMs;
  const value = encodeNewHead({
    scope: input.scope,
    key: input.key,
    fingerprint: input.fingerprint,
    leaseToken,
    leaseExpiresAt,
    createdAt: bound,
    expiresAt: bound + input.retentionMs,
  });
  const standing = await transport.setIfAbsent(key, value, recordTtlMs(Math.max(input.leaseMs, input.retentionMs))).catch((error: unknown) => {
    if (error instanceof Error && (error.message.startsWith('WRONGTYPE') || error.message.startsWith('OOM'))) return undefined;
    throw error;
  });
  if (standing === null) return { acquired: true, claim: claimOf(input, leaseToken, leaseExpiresAt, false) };
  const record = standing === undefined ? undefined : readable(standing);
  if (record !== undefined && record.expiresAt > bound) {
    const live = record.state === 'in_progress' && record.leaseExpiresAt > bound;
    if (live && record.leaseToken === leaseToken && record.fingerprint === input.fingerprint) {
      // C3, the takeover flag read back from the record as the script reads it.
      const took = record.recoveryPoint !== undefined || record.createdAt < record.leaseExpiresAt - input.leaseMs;
      return { acquired: true, claim: claimOf(input, leaseToken, record.leaseExpiresAt, took, record.recoveryPoint) };
    }
    if (record.leaseToken !== leaseToken && (live || record.state === 'completed' || record.fingerprint !== input.fingerprint)) return { acquired: false, record };
  }
  return claimOn(transport, key, input, '', leaseToken);
}

/** `value` decoded, or `undefined` when it is not a record value this store wrote (the script then decides). */
function readable(value: Buffer): IdempotencyRecord | undefined {
  try {
    return decodeRecord(value);
  } catch {
    return undefined;
  }
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
