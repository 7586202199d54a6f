/**
 * The Redis claim: one run of the claim script (`scripts/claim.lua.ts`), one round trip. It inserts the
 * record, or takes it over when its retention expired (any fingerprint) or its lease expired (same
 * fingerprint, still in progress, the recovery point kept), or else returns the standing record unchanged.
 *
 * @module
 */
import type { RedisConnection } from './connection.js';
import { claimOf } from '../../core/record.js';
import type { ClaimInput, ClaimResult } from '../../core/store.js';
import { decodeRecord } from './layout.js';
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
