/**
 * The session `stats` script: one consistent read of a session's counters.
 *
 * @module
 */

/**
 * Lua source of `stats`.
 *
 * KEYS[1] — the session hash; KEYS[2] — its saved responses; KEYS[3] — its executions in progress.
 *
 * Returns `{state, lowWaterMark, leaseExpiresAt, storedResponses, inProgress}` (the mark and the lease as
 * decimal strings), or nil when no session or tombstone exists.
 */
export const STATS_SESSION_LUA = `
local fields = redis.call('HMGET', KEYS[1], 'state', 'lwm', 'lease')
if not fields[1] then return nil end
return { fields[1], fields[2], fields[3], redis.call('HLEN', KEYS[2]), redis.call('HLEN', KEYS[3]) }
`;
