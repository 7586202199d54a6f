/**
 * The session `end` script: deletes a session (or tombstone) and its requests.
 *
 * @module
 */

/**
 * Lua source of `end`.
 *
 * KEYS[1] — the session hash; KEYS[2], KEYS[3] — its responses and in-progress hashes.
 *
 * Returns 1 when the session hash existed, else 0.
 */
export const END_SESSION_LUA = `
local existed = redis.call('DEL', KEYS[1])
redis.call('DEL', KEYS[2], KEYS[3])
return existed
`;
