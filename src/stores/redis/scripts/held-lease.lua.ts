/**
 * The part `renew` and `checkpoint` share: read the record, fence it by the lease token, extend its lease
 * and write it back with the real TTL following its retention end.
 *
 * @module
 */
import { nowLua } from './now.lua.js';
import { packHeadLua, READ_RECORD_LUA, unpackHeadLua } from './record.lua.js';

/** Where the calling script keeps each argument of {@link extendHeldLeaseLua}. */
interface HeldLeaseArgs {
  /** The `ARGV` index of now (see `nowLua`). */
  readonly now: number;
  /** The `ARGV` index of the new lease, in milliseconds from now. */
  readonly lease: number;
  /** The `ARGV` index of the real TTL's grace past the last deadline, in milliseconds (see `ttl.ts`). */
  readonly grace: number;
  /** The Lua expression of the recovery point to store: `rp` keeps the record's own. */
  readonly rp: string;
}

/**
 * Lua that returns 0, changing nothing, unless `KEYS[1]` holds an in-flight record under the fencing token
 * `ARGV[1]`; then sets the lease end to now plus the lease, stretches the retention end to the lease end
 * when that is later (never shortened), stores the recovery point `args.rp` (a waiter's mark is kept), resets the key's real TTL to
 * the retention end plus the grace, and returns the new lease end (integer text, milliseconds since the
 * epoch).
 */
export function extendHeldLeaseLua(args: HeldLeaseArgs): string {
  return `
${READ_RECORD_LUA}
if not v then return 0 end
${unpackHeadLua('key')}
if state ~= 1 or token ~= ARGV[1] then return 0 end
${nowLua(args.now)}
local lease_end = now + tonumber(ARGV[${args.lease}])
if lease_end > expires then expires = lease_end end
local record = ${packHeadLua({
  state: '1',
  lease: 'lease_end',
  created: 'created',
  expires: 'expires',
  completed: 'completed',
  fp: 'fp',
  token: 'token',
  rp: args.rp,
  scope: 'scope',
  key: 'key',
})}
redis.call('SET', KEYS[1], record, 'PX', math.max(expires - now, 0) + tonumber(ARGV[${args.grace}]))
-- Integer text: tostring would switch to exponent notation past 14 digits.
return string.format('%d', lease_end)
`;
}
