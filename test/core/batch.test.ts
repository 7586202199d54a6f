/**
 * `Receiver.runBatch` on the memory store (the batch suite), on a store without `claimMany` (one claim per
 * item), and its option checks.
 */
import { describe, expect, it, vi } from 'vitest';
import { ManualClock } from '../../src/core/clock.js';
import type { IdempotencyStore } from '../../src/core/store.js';
import { createMemoryStore } from '../../src/stores/memory.js';
import { createReceiver } from '../../src/receiver.js';
import { batchItems, batchSuite, statusCounts } from '../support/batch.js';

batchSuite('memory', () => {
  const clock = new ManualClock(1_700_000_000_000);
  return Promise.resolve({ store: createMemoryStore({ clock }), clock, close: () => Promise.resolve() });
});

/** The memory store seen without its `claimMany`, as a store that lacks one. */
function withoutClaimMany(store: IdempotencyStore): IdempotencyStore {
  return {
    claim: (input) => store.claim(input),
    complete: (claim, response, retentionMs) => store.complete(claim, response, retentionMs),
    release: (claim) => store.release(claim),
    renew: (claim, leaseMs) => store.renew(claim, leaseMs),
    get: (scope, key) => store.get(scope, key),
    reap: (limit) => store.reap(limit),
    close: () => store.close(),
  };
}

batchSuite('a store without claimMany', () => {
  const clock = new ManualClock(1_700_000_000_000);
  return Promise.resolve({ store: withoutClaimMany(createMemoryStore({ clock })), clock, close: () => Promise.resolve() });
});

describe('runBatch', () => {
  it('claims one item at a time, at most `concurrency` at once, on a store without claimMany', async () => {
    const store = withoutClaimMany(createMemoryStore());
    let claiming = 0;
    let most = 0;
    const claim = store.claim.bind(store);
    store.claim = async (input) => {
      most = Math.max(most, ++claiming);
      await new Promise((resolve) => setImmediate(resolve));
      claiming--;
      return claim(input);
    };
    const outcomes = await createReceiver({ store }).runBatch(batchItems([1, 2, 3, 4, 5, 6, 7]), (n) => Promise.resolve(n), { concurrency: 3 });
    expect(statusCounts(outcomes)).toEqual({ executed: 7 });
    expect(most).toBe(3);
  });

  it('runs at most `concurrency` items at once', async () => {
    let running = 0;
    let most = 0;
    const receiver = createReceiver({ store: createMemoryStore() });
    await receiver.runBatch(batchItems(Array.from({ length: 20 }, (_, i) => i)), async (n) => {
      most = Math.max(most, ++running);
      await new Promise((resolve) => setTimeout(resolve, 1));
      running--;
      return n;
    }, { concurrency: 5 });
    expect(most).toBe(5);
  });

  it('answers every item failed with StoreUnavailableError when the store cannot claim, running no work', async () => {
    const store = createMemoryStore();
    store.claimMany = () => Promise.reject(new Error('connection reset'));
    const work = vi.fn((n: number) => Promise.resolve(n));
    const outcomes = await createReceiver({ store }).runBatch(batchItems([1, 2]), work);
    expect(outcomes.map((o) => (o.status === 'failed' ? (o.error as Error).name : o.status))).toEqual(['StoreUnavailableError', 'StoreUnavailableError']);
    expect(work).not.toHaveBeenCalled();
  });

  it('sends a failed claim round once more with the same owner tokens', async () => {
    const store = createMemoryStore();
    const claimMany = store.claimMany!.bind(store);
    const tokens: (string | undefined)[][] = [];
    let calls = 0;
    store.claimMany = async (inputs) => {
      tokens.push(inputs.map((input) => input.leaseToken));
      const results = await claimMany(inputs);
      if (++calls === 1) throw new Error('reply lost');
      return results;
    };
    const outcomes = await createReceiver({ store }).runBatch(batchItems([1, 2]), (n) => Promise.resolve(n));
    expect(statusCounts(outcomes)).toEqual({ executed: 2 });
    expect(tokens[1]).toEqual(tokens[0]);
  });

  it('refuses a bad option, a missing function and atomic outside transactional mode', async () => {
    const receiver = createReceiver({ store: createMemoryStore() });
    await expect(receiver.runBatch([], (n) => Promise.resolve(n), { concurrency: 0 })).rejects.toThrow(/concurrency/);
    await expect(receiver.runBatch([], undefined as never)).rejects.toThrow(TypeError);
    await expect(receiver.runBatch([], (n) => Promise.resolve(n), { atomic: true })).rejects.toThrow(/transactional/);
  });

  it('answers an empty batch with no outcomes', async () => {
    expect(await createReceiver({ store: createMemoryStore() }).runBatch([], (n) => Promise.resolve(n))).toEqual([]);
  });
});
