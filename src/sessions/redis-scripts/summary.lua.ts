/**
 * The session `summary` script: one consistent read of a session's counters and its highest request
 * number, for `listSessions`.
 *
 * @module
 */

/**
 * Lua source of `summary`.
 *
 * KEYS[1] — the session hash; KEYS[2] — its saved responses; KEYS[3] — its executions in progress.
 *
 * Returns `{state, lowWaterMark, leaseExpiresAt, storedResponses, inProgress, highest}` (the mark and the
 * lease as decimal strings; `highest` the largest request number of either hash, or -1 when both are
 * empty), or nil when no session or tombstone exists. Cost: O(requests held), which the low-water mark
 * bounds.
 */
export const SUMMARY_SESSION_LUA = `
local fields = redis.call('HMGET', KEYS[1], 'state', 'lwm', 'lease')
if not fields[1] then return nil end
local highest = -1
for i = 2, 3 do
  for _, field in ipairs(redis.call('HKEYS', KEYS[i])) do
    local number = tonumber(field)
    if number > highest then highest = number end
  end
end
return { fields[1], fields[2], fields[3], redis.call('HLEN', KEYS[2]), redis.call('HLEN', KEYS[3]), highest }
`;
