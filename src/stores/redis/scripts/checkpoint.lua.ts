/**
 * The checkpoint script: records a recovery point and renews the lease, fenced by the lease token (atomic
 * phases; see `IdempotencyStore.checkpoint`).
 *
 * @module
 */

/**
 * Lua source of `checkpoint`.
 *
 * KEYS[1] — the record's hash key.
 * ARGV[1] — the caller's fencing token.
 * ARGV[2] — the recovery point (opaque text, stored in the field `rp`).
 * ARGV[3] — now, ms since the epoch (the store's injected clock).
 * ARGV[4] — the renewed lease's end, ms since the epoch (now + leaseMs; equal to now ends the lease at once).
 * ARGV[5] — the grace the hash key's real TTL keeps past its last deadline, in ms (see `ttl.ts`).
 *
 * Returns 1 when recorded: `rp` and `lease` are set, `expires` is stretched to the new lease end when that
 * is later (never shortened), and the real TTL follows `expires`. Returns 0, changing nothing, when the
 * record is absent, completed, or held under another token.
 *
 * The deadlines are compared as numbers but written back as the strings received, so no Lua number
 * formatting ever touches a stored time.
 */
export const CHECKPOINT_LUA = `
local held = redis.call('HMGET', KEYS[1], 'state', 'token', 'expires')
if held[1] ~= 'in_progress' or held[2] ~= ARGV[1] then return 0 end
local expires = held[3]
if tonumber(ARGV[4]) > tonumber(expires) then expires = ARGV[4] end
redis.call('HSET', KEYS[1], 'rp', ARGV[2], 'lease', ARGV[4], 'expires', expires)
redis.call('PEXPIRE', KEYS[1], math.max(tonumber(expires) - tonumber(ARGV[3]), 0) + tonumber(ARGV[5]))
return 1
`;
