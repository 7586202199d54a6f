/**
 * The claim script: insert-if-absent, or take the record over, in one atomic step.
 *
 * @module
 */
import { nowLua } from './now.lua.js';
import { packHeadLua, READ_RECORD_LUA, unpackHeadLua } from './record.lua.js';

/**
 * Lua source of the claim.
 *
 * KEYS[1] — the record's key (a string holding the record value; see `layout.ts`).
 * ARGV[1] — now in ms since the epoch (the store's injected clock), or empty for Redis's `TIME` (see
 *   `now.lua.ts`); expiry decisions follow it.
 * ARGV[2] — the claimant's fingerprint.
 * ARGV[3] — the new fencing token.
 * ARGV[4] — the lease, in ms.
 * ARGV[5] — the retention, in ms.
 * ARGV[6] — the scope, ARGV[7] — the key (stored so `get` and `reap` read them back verbatim).
 * ARGV[8] — the real Redis TTL to set on the record key, in ms: `recordTtlMs` (`ttl.ts`) of the longer of the lease
 *   and the retention, computed by the caller, so the script passes it on as given.
 *
 * Returns `{1, takeover, now, rp}` when the caller won the lease: `takeover` is 1 when an expired lease of
 * the same fingerprint was taken over, else 0; `now` is the time the script decided by (an integer reply: a
 * whole number of ms is exact in a Lua number, and an integer costs the client less than text), from
 * which the caller derives the lease's end; and `rp` is the recovery point the previous holder reached (only
 * on a takeover of a record that has one; absent otherwise). Returns `{0, value}` when the caller lost:
 * the standing record's value as stored (`layout.ts`), one bulk string, so a replay costs Redis no
 * packing and the client one fixed-layout read.
 *
 * A claim presenting the fencing token of the standing in-progress record (same fingerprint) is its
 * owner's own claim sent again after a lost reply: it wins with the lease unchanged (`takeover` 0, and
 * `now` set to the lease's end minus ARGV[4], so the caller's derived end is the standing one).
 *
 * Takes over when the retention expired (any fingerprint: the key is new again, so the record restarts
 * without a recovery point) or when the record is `in_progress` with an expired lease and the same
 * fingerprint (a crashed holder, or one that handed its lease back at a recovery point: the creation time,
 * the recovery point and a waiter's mark are kept). The takeover flag comes from the branch taken, never from comparing
 * times, so a takeover in the same millisecond as a zero-lease hand-back is still reported as one.
 *
 * A record already held under ARGV[3] is the caller's own claim run a second time: ioredis resends a
 * command whose connection dropped before its reply arrived (`autoResendUnfulfilledCommands`, on by
 * default), so the first run applied and the resend finds its record. Tokens are never reused, so no one
 * else holds ARGV[3]: the resend answers as the first run did (won, with the time it decided by, derived
 * from the lease it set) instead of refusing the caller its own lease. Its takeover flag is read back from
 * the record: a kept recovery point, or a creation time before the decision, means the first run took over.
 */
export const CLAIM_LUA = `
${nowLua(1)}
${READ_RECORD_LUA}
-- Rows C1 to C7 of the claim decision table (docs/semantics.md); C3 is tried before C4.
-- A takeover keeps the record's creation time and recovery point; a new or replaced record starts now.
local takeover, point, made, waited = 0, nil, now, 0
if v then
  ${unpackHeadLua('rp')}
  if expires > now then
    if state == 1 and token == ARGV[3] and fp == ARGV[2] then
      -- C3: the caller's own claim again (its reply lost, or resent by the client): it holds the lease,
      -- unchanged. The third element is the instant the lease began by this claim's lease length, from
      -- which the caller derives its end; the takeover flag is read back from the record.
      local decided = lease - tonumber(ARGV[4])
      local took = 0
      if rp or created < decided then took = 1 end
      return {1, took, decided, rp}
    elseif state == 1 and lease <= now and fp == ARGV[2] then
      -- C4: the lease over under the same fingerprint.
      -- A waiter's mark (the completion field of a record in progress) is kept: it still listens.
      takeover, point, made, waited = 1, rp, created, completed
    else
      -- C5 to C7: the record stands.
      return {0, v}
    end
  end
end
-- C1 (no record), C2 (retention over) or C4.
redis.call('SET', KEYS[1], ${packHeadLua({
  state: '1',
  lease: 'now + tonumber(ARGV[4])',
  created: 'made',
  expires: 'now + tonumber(ARGV[5])',
  completed: 'waited',
  fp: 'ARGV[2]',
  token: 'ARGV[3]',
  rp: 'point',
  scope: 'ARGV[6]',
  key: 'ARGV[7]',
})}, 'PX', ARGV[8])
return {1, takeover, now, point}
`;
