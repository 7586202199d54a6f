/**
 * The session reap step: deletes one session whose lease has ended.
 *
 * @module
 */

/**
 * Lua source of the per-session reap step (`reap` finds candidates with SCAN, then runs this on each).
 *
 * KEYS[1] — the session hash; KEYS[2], KEYS[3] — its responses and in-progress hashes.
 * ARGV[1] — now, ms since the epoch.
 *
 * Returns 1 when deleted; 0 when the session is absent or its lease ends after now (renewed meanwhile).
 */
export const REAP_SESSION_LUA = `
local lease = redis.call('HGET', KEYS[1], 'lease')
if not lease or tonumber(lease) > tonumber(ARGV[1]) then return 0 end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
return 1
`;
