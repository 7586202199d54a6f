/**
 * The session `begin` script: validates the session, advances it and claims one request number.
 *
 * @module
 */
import { SESSION_PRELUDE_LUA } from './prelude.lua.js';

/**
 * Lua source of `begin`.
 *
 * KEYS[1] — the session hash; KEYS[2] — its saved responses; KEYS[3] — its executions in progress.
 * ARGV[1] — now (ms since the epoch); ARGV[2] — the request number; ARGV[3] — the client's low-water mark;
 * ARGV[4] — the renewed session lease expiry (ms since the epoch); ARGV[5] — the execution lease expiry
 * (ms since the epoch); ARGV[6] — the fencing token; ARGV[7] — the TTL grace in ms.
 *
 * Returns `{'unknown'}`, `{'expired'}`, `{'stale', lowWaterMark}`, `{'replay', response}`,
 * `{'in_flight'}`, or `{'execute', takeover}` (takeover 1 when an expired execution lease was taken over).
 */
export const BEGIN_SESSION_LUA = `${SESSION_PRELUDE_LUA}
local now = tonumber(ARGV[1])
local grace = tonumber(ARGV[7])
local refused, fields = live(now, grace)
if refused then return { refused } end
if tonumber(ARGV[2]) <= tonumber(fields[3]) then return { 'stale', tonumber(fields[3]) } end
local lease = advance(fields, ARGV[3], ARGV[4])
local response = redis.call('HGET', KEYS[2], ARGV[2])
if response then
  expire_all(lease, now, grace)
  return { 'replay', response }
end
local held = redis.call('HGET', KEYS[3], ARGV[2])
if held and tonumber(string.sub(held, 1, string.find(held, ':', 1, true) - 1)) > now then
  expire_all(lease, now, grace)
  return { 'in_flight' }
end
redis.call('HSET', KEYS[3], ARGV[2], ARGV[5] .. ':' .. ARGV[6])
expire_all(lease, now, grace)
if held then return { 'execute', 1 } end
return { 'execute', 0 }
`;
