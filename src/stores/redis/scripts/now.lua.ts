/**
 * The "now" every record script decides by: Redis's own clock, so processes sharing the store need no
 * clock sync.
 *
 * @module
 */

/**
 * Lua that sets the local `now` (milliseconds since the epoch, an integer) from `ARGV[index]`: the
 * store's injected clock when it holds a number (tests on a fake clock), else Redis's `TIME`. Redis 5 and
 * later replicate a script's effects rather than the script, so a write after `TIME` is allowed and a
 * replica stores the same times.
 */
export function nowLua(index: number): string {
  return `
local now
if ARGV[${index}] ~= '' then
  now = tonumber(ARGV[${index}])
else
  local time = redis.call('TIME')
  now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end
`;
}
