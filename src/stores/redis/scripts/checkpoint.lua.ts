/**
 * The checkpoint script: records a recovery point and renews the lease, fenced by the lease token (atomic
 * phases; see `IdempotencyStore.checkpoint`).
 *
 * @module
 */
import { nowLua } from './now.lua.js';

/**
 * Lua source of `checkpoint`.
 *
 * KEYS[1] — the record's hash key.
 * ARGV[1] — the caller's fencing token.
 * ARGV[2] — the recovery point (opaque text, stored in the field `rp`).
 * ARGV[3] — now in ms since the epoch from the store's injected clock, or empty for Redis's `TIME` (see
 *   `now.lua.ts`).
 * ARGV[4] — the renewed lease, in ms from now (0 ends the lease at once).
 * ARGV[5] — the grace the hash key's real TTL keeps past its last deadline, in ms (see `ttl.ts`).
 *
 * Returns the new lease end (integer text, ms since the epoch) when recorded: `rp` and `lease` are set,
 * `expires` is stretched to the new lease end when that is later (never shortened), and the real TTL
 * follows `expires`. Returns 0, changing nothing, when the record is absent, completed, or held under
 * another token.
 */
export const CHECKPOINT_LUA = `
local held = redis.call('HMGET', KEYS[1], 'state', 'token', 'expires')
if held[1] ~= 'in_progress' or held[2] ~= ARGV[1] then return 0 end
${nowLua(3)}
local lease_end = fmt(now + tonumber(ARGV[4]))
local expires = held[3]
if tonumber(lease_end) > tonumber(expires) then expires = lease_end end
redis.call('HSET', KEYS[1], 'rp', ARGV[2], 'lease', lease_end, 'expires', expires)
redis.call('PEXPIRE', KEYS[1], math.max(tonumber(expires) - now, 0) + tonumber(ARGV[5]))
return lease_end
`;
