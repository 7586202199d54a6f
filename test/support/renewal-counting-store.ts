/** A memory store whose lease renewals are counted, for tests that check a keep-alive stopped. */
import { createMemoryStore } from '../../src/stores/memory.js';
import type { IdempotencyStore } from '../../src/core/store.js';

/**
 * The memory store, its renewals counted; while `failing.completes` is above 0, each `complete` fails (a
 * store error, as a store that is down rejects) and counts it down.
 */
export function renewalCountingStore(failing: { completes: number } = { completes: 0 }): { store: IdempotencyStore; renewals: () => number } {
  const store = createMemoryStore();
  let renewals = 0;
  return {
    renewals: () => renewals,
    store: {
      claim: (input) => store.claim(input),
      complete: (claim, saved, retentionMs) => {
        if (failing.completes === 0) return store.complete(claim, saved, retentionMs);
        failing.completes--;
        return Promise.reject(new Error('store down'));
      },
      release: (claim) => store.release(claim),
      renew: (claim, leaseMs) => {
        renewals++;
        return store.renew(claim, leaseMs);
      },
      get: (scope, key) => store.get(scope, key),
      reap: (limit) => store.reap(limit),
      close: () => store.close(),
    },
  };
}

/** Resolves after `ms` milliseconds. */
export const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));
