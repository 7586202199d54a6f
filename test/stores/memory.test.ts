import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/core/clock.js';
import { createMemoryStore } from '../../src/stores/memory.js';
import { storeContract } from './contract.js';

storeContract('memory', () => {
  const clock = new ManualClock(1_700_000_000_000);
  const store = createMemoryStore({ clock });
  return Promise.resolve({ store, clock, close: () => store.close() });
});

describe('memory store', () => {
  it('offers waitFor, so the contract exercises it', async () => {
    const store = createMemoryStore();
    if (store.waitFor === undefined) throw new Error('the memory store has no waitFor');
    expect(await store.waitFor('s', 'absent', 1)).toBeUndefined();
  });

  it('uses the injected id generator for fencing tokens', async () => {
    let n = 0;
    const store = createMemoryStore({ clock: new ManualClock(0), generateId: () => `token-${++n}` });
    const result = await store.claim({ scope: 's', key: 'k', fingerprint: 'f', leaseMs: 1_000, retentionMs: 2_000 });
    expect(result.acquired && result.claim.leaseToken).toBe('token-1');
  });
});

describe('memory store sweep', () => {
  const response = { status: 201, headers: {}, body: new Uint8Array([1]) };
  const claimed = async (store: ReturnType<typeof createMemoryStore>, scope: string, key: string, leaseMs = 1_000, retentionMs = 10_000) => {
    const result = await store.claim({ scope, key, fingerprint: 'f', leaseMs, retentionMs });
    if (!result.acquired) throw new Error(`expected to claim ${scope}/${key}`);
    return result.claim;
  };

  it('drops expired records of every scope on a claim once a second, without reap, and keeps live ones', async () => {
    const clock = new ManualClock(1_000_000);
    const store = createMemoryStore({ clock });
    for (let i = 0; i < 3; i++) await store.complete(await claimed(store, 'quiet', `old-${i}`), response, 10_000);
    await store.complete(await claimed(store, 'busy', 'old'), response, 10_000);
    clock.advance(5_000);
    await store.complete(await claimed(store, 'busy', 'younger'), response, 10_000);
    clock.advance(5_000);
    // The old records' retention ends now; the younger one has 5 s left.
    await claimed(store, 'busy', 'trigger');
    for (let i = 0; i < 3; i++) expect(await store.get('quiet', `old-${i}`)).toBeUndefined();
    expect(await store.get('busy', 'old')).toBeUndefined();
    expect((await store.get('busy', 'younger'))?.state).toBe('completed');
    expect((await store.get('busy', 'trigger'))?.state).toBe('in_progress');
    // Nothing left for the reaper but what has not expired.
    expect(await store.reap(100)).toBe(0);
  });

  it('sweeps at most once per second of the clock, and never a record whose lease outlives its retention', async () => {
    const clock = new ManualClock(2_000_000);
    const store = createMemoryStore({ clock });
    await claimed(store, 's', 'held', 60_000, 1_000);
    await store.complete(await claimed(store, 's', 'behind', 1_000, 1_000), response, 1_000);
    await claimed(store, 's', 'first-of-second');
    clock.advance(1_000);
    await claimed(store, 's', 'sweeps');
    // The held lease is still live, so it stays, and the sweep stops there: the reaper finds the rest.
    expect((await store.get('s', 'held'))?.state).toBe('in_progress');
    expect((await store.get('s', 'behind'))?.state).toBe('completed');
    expect(await store.reap(100)).toBe(1);
    expect(await store.get('s', 'behind')).toBeUndefined();
    const expiring = await claimed(store, 't', 'short', 100, 100);
    await store.complete(expiring, response, 100);
    clock.advance(500);
    await claimed(store, 't', 'within-the-second');
    // Expired, but the last sweep ran less than a second ago.
    expect((await store.get('t', 'short'))?.state).toBe('completed');
    clock.advance(500);
    await claimed(store, 't', 'next-second');
    expect(await store.get('t', 'short')).toBeUndefined();
  });
});
