/**
 * The Redis claim of a whole batch: one run of the batch claim script (`scripts/claim-many.lua.ts`) per
 * hash slot. Every record is its own hash tag (`keys.ts`), so on one Redis the whole batch is one call
 * (one slot space), and on Redis Cluster each record is one call of the single claim, all sent at once.
 *
 * @module
 */
import type { ClaimInput, ClaimResult } from '../../core/store.js';
import { claimArguments, claimOn, claimResultOf, type ClaimReply } from './claim.js';
import { LuaScript } from './script.js';
import { CLAIM_MANY_LUA } from './scripts/claim-many.lua.js';
import type { RedisTransport } from './transport.js';

const CLAIM_MANY = new LuaScript(CLAIM_MANY_LUA);

/**
 * Claims every input (under the record keys `keys` and the owner tokens `tokens`, one per input) at `now`
 * (ms), or at the server's `TIME` when `now` is `''`.
 */
export async function claimManyOn(
  transport: RedisTransport,
  keys: readonly string[],
  inputs: readonly ClaimInput[],
  now: number | '',
  tokens: readonly string[],
): Promise<ClaimResult[]> {
  if (transport.cluster) {
    return Promise.all(inputs.map((input, at) => claimOn(transport, keys[at] as string, input, now, tokens[at] as string)));
  }
  const args = inputs.flatMap((input, at) => claimArguments(input, now, tokens[at] as string));
  const replies = (await CLAIM_MANY.run(transport, keys, args)) as ClaimReply[];
  return replies.map((reply, at) => claimResultOf(inputs[at] as ClaimInput, tokens[at] as string, reply));
}
