/**
 * The batch claim script: the claim script (`claim.lua.ts`) run once per record key of the call, in one
 * atomic step, so a batch costs one round trip.
 *
 * @module
 */
import { CLAIM_LUA } from './claim.lua.js';

/**
 * The single claim's source made a function of its record key and its arguments: `KEYS[1]` becomes the
 * parameter `key`, `ARGV[n]` the parameter `A[n]`, and its `return`s the function's.
 */
const CLAIM_ONE_LUA = `local function claim_one(key, A)
${CLAIM_LUA.replaceAll('KEYS[1]', 'key').replaceAll('ARGV[', 'A[')}
end`;

/**
 * Lua source of the batch claim.
 *
 * KEYS[i] — the i-th record's key. ARGV — eight arguments per key, in the order of the claim script's
 * ARGV[1] to ARGV[8], key after key.
 *
 * Returns one reply per key, in order, each as the claim script returns it.
 */
export const CLAIM_MANY_LUA = `
${CLAIM_ONE_LUA}
local results = {}
for i = 1, #KEYS do
  local A = {}
  for j = 1, 8 do A[j] = ARGV[(i - 1) * 8 + j] end
  results[i] = claim_one(KEYS[i], A)
end
return results
`;
