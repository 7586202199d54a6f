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
  const reply = (await CLAIM.run(
    client,
    [key],
    [
      now,
      input.fingerprint,
      leaseToken,
      input.leaseMs,
      input.retentionMs,
      input.scope,
      input.key,
      recordTtlMs(Math.max(input.leaseMs, input.retentionMs)),
    ],
  )) as [number, number | Buffer, number?, Buffer?];
  if (reply[0] === 0) {
    return { acquired: false, record: decodeRecord(reply[1] as Buffer) };
  }
  const leaseExpiresAt = (reply[2] ?? Number.NaN) + input.leaseMs;
  return { acquired: true, claim: claimOf(input, leaseToken, leaseExpiresAt, reply[1] === 1, reply[3]?.toString('utf8')) };
}
