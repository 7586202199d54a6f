/**
 * Claiming a whole batch: through the store's `claimMany` where it has one (one round trip, or one
 * transaction), else one claim per input, a bounded number at a time.
 *
 * @module
 */
import type { ClaimInput, ClaimResult, IdempotencyStore } from './store.js';

/**
 * Claims every input of `inputs` (distinct (scope, key) pairs) on `store`, one result per input in input
 * order. A store without `claimMany` is claimed one input at a time, at most `concurrency` at once.
 * A claim whose reply was lost may have committed, so a failed round is sent once more with the same
 * owner tokens, which the store answers as the caller's own claims (row C3 of the claim decision table).
 *
 * @throws the store's error when the second round fails too
 */
export async function claimAll(store: IdempotencyStore, inputs: readonly ClaimInput[], concurrency: number): Promise<ClaimResult[]> {
  if (inputs.length === 0) return [];
  const round = (): Promise<ClaimResult[]> =>
    store.claimMany !== undefined ? store.claimMany(inputs) : mapBounded(inputs, concurrency, (input) => store.claim(input));
  try {
    return await round();
  } catch {
    return await round();
  }
}

/**
 * Maps `items` through `fn`, at most `concurrency` calls in flight, resolving the results in input order.
 * Rejects with the first rejection (calls already started still run to their end).
 */
export async function mapBounded<I, O>(items: readonly I[], concurrency: number, fn: (item: I, index: number) => Promise<O>): Promise<O[]> {
  const results = new Array<O>(items.length);
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < items.length) {
      const index = next++;
      results[index] = await fn(items[index] as I, index);
    }
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, items.length) }, worker));
  return results;
}
