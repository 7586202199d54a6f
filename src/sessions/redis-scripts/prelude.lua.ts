/**
 * Lua helpers shared by the session scripts that validate and advance a session (`begin`, `keepAlive`),
 * prepended to their source so each stays one self-contained script.
 *
 * @module
 */

/**
 * Lua source of the helpers. Every script using them takes the session's three keys, all under one hash
 * tag: KEYS[1] the session hash (`state`, `lease` in ms since the epoch, `lwm`), KEYS[2] the saved
 * responses (field: request number, value: response), KEYS[3] the executions in progress (field: request
 * number, value: `<lease expiry ms>:<token>`).
 *
 * - `live(now, grace)` returns `'unknown'`, `'expired'` (turning a session whose lease ended at or before
 *   `now` into a tombstone: requests dropped, key kept `grace` ms) or `nil, fields` for a live session.
 * - `advance(fields, lwm, lease)` raises the low-water mark (deleting requests at or below it) and the lease
 *   to the larger of stored and given; it returns the lease kept. Numbers stay the caller's decimal strings.
 * - `expire_all(lease, now, grace)` sets the real TTL of the three keys to the lease left plus `grace`.
 */
export const SESSION_PRELUDE_LUA = `
local function live(now, grace)
  local fields = redis.call('HMGET', KEYS[1], 'state', 'lease', 'lwm')
  if not fields[1] then return 'unknown' end
  if fields[1] == 'expired' then return 'expired' end
  if tonumber(fields[2]) <= now then
    redis.call('HSET', KEYS[1], 'state', 'expired')
    redis.call('DEL', KEYS[2], KEYS[3])
    redis.call('PEXPIRE', KEYS[1], grace)
    return 'expired'
  end
  return nil, fields
end

local function drop_through(key, lwm)
  local doomed = {}
  for _, field in ipairs(redis.call('HKEYS', key)) do
    if tonumber(field) <= lwm then doomed[#doomed + 1] = field end
  end
  -- unpack() is bounded by the Lua stack, so delete in slices.
  for i = 1, #doomed, 1000 do
    redis.call('HDEL', key, unpack(doomed, i, math.min(i + 999, #doomed)))
  end
end

local function advance(fields, lwm, lease)
  local kept = fields[2]
  if tonumber(lease) > tonumber(kept) then kept = lease end
  if tonumber(lwm) > tonumber(fields[3]) then
    drop_through(KEYS[2], tonumber(lwm))
    drop_through(KEYS[3], tonumber(lwm))
    redis.call('HSET', KEYS[1], 'lease', kept, 'lwm', lwm)
  else
    redis.call('HSET', KEYS[1], 'lease', kept)
  end
  return kept
end

local function expire_all(lease, now, grace)
  local left = tonumber(lease) - now
  if left < 0 then left = 0 end
  for i = 1, 3 do redis.call('PEXPIRE', KEYS[i], left + grace) end
end
`;
