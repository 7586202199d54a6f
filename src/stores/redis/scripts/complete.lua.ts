/**
 * The complete script: saves the response, fenced by the lease token.
 *
 * @module
 */
import { FIXED_BYTES } from '../layout.js';
import { REDIS_TTL_GRACE_MS } from '../ttl.js';
import { READ_RECORD_LUA } from './record.lua.js';

// Hot path: docs/hot-path.md#redis-completion-script
/**
 * Lua source of `complete`. It reads the record's bytes at fixed offsets rather than unpacking its head,
 * and builds the completed record in one concatenation: the state byte 2, the lease end and creation time
 * as they stand (bytes 2 to 17), the retention end and completion time the caller packed, the head's texts
 * as they stand (from byte 34 on), and the response tail.
 *
 * KEYS[1] — the record's key; also the pub/sub channel `waitFor` listens on.
 * ARGV[1] — the claim's identity as the head holds it: the fingerprint and the fencing token, each a
 *   4-byte length and its bytes (`encodeIdentity` in `layout.ts`), compared with the head's bytes from
 *   byte 34 on. A record under this token holds this claim's fingerprint too (a claim writes both; a
 *   takeover writes a new token), so the comparison fences by the token as a comparison of the token alone.
 *   (`string.find` anchored at byte 34 makes no substring; for a record of another token it may scan on
 *   through the value, on that path alone.)
 * ARGV[2] — the retention end and the completion time, two doubles as the head holds them
 *   (`encodeCompletionTimes` in `layout.ts`): from the store's injected clock, or the upper bound of
 *   Redis's clock (`server-clock.ts`); or empty, and the script reads Redis's `TIME` and works out the
 *   retention from ARGV[3].
 * ARGV[3] — the real Redis TTL to set on the record key, in ms: `recordTtlMs` (`ttl.ts`) of the retention.
 * ARGV[4] — the response packed as a completed record's tail (`encodeTail` in `layout.ts`).
 *
 * Returns 1 when saved (and publishes `completed` on KEYS[1] when a `waitFor` marked the record, setting its
 * completion field to 1, whose first byte is not 0: see `scripts/listen.lua.ts`; an unmarked record has no
 * listener to wake); 0, changing nothing, when the record is absent, or is under another token.
 *
 * A record already completed under ARGV[1] answers 1 and changes nothing: that is this completion run a
 * second time — the engine retrying a completion whose reply was lost, or ioredis resending a command whose
 * connection dropped before its reply arrived (`autoResendUnfulfilledCommands`, on by default) — and
 * answering 0 would tell the holder its lease was lost although its response was saved (the store
 * contract: `complete` is idempotent for its own token).
 */
export const COMPLETE_LUA = `
${READ_RECORD_LUA}
if not v then return 0 end
if string.find(v, ARGV[1], ${FIXED_BYTES + 1}, true) ~= ${FIXED_BYTES + 1} then return 0 end
if string.byte(v) == 2 then return 1 end
local times = ARGV[2]
if times == '' then
  local time = redis.call('TIME')
  local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  times = struct.pack('>dd', now + tonumber(ARGV[3]) - ${REDIS_TTL_GRACE_MS}, now)
end
redis.call('SET', KEYS[1], '\\2' .. string.sub(v, 2, ${FIXED_BYTES - 16}) .. times .. string.sub(v, ${FIXED_BYTES + 1}) .. ARGV[4], 'PX', ARGV[3])
-- Hot path: docs/hot-path.md#redis-completion-notice
if string.byte(v, ${FIXED_BYTES - 7}) ~= 0 then redis.call('PUBLISH', KEYS[1], 'completed') end
return 1
`;
