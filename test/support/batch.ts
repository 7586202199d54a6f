/**
 * The batch suite (`Receiver.runBatch`), run on every store: duplicates inside a batch, records already
 * completed, the same batch from four callers at once, a changed fingerprint, a failed item, and effects
 * counted per key.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { BatchOutcome } from '../../src/core/batch.js';
import type { ManualClock } from '../../src/core/clock.js';
import type { IdempotencyStore } from '../../src/core/store.js';
import { createReceiver } from '../../src/receiver.js';
import { batchItems, fingerprintOf } from './batch-items.js';

export { batchItems } from './batch-items.js';

/** A fresh store for one test. */
export interface BatchFixture {
  readonly store: IdempotencyStore;
  readonly clock: ManualClock;
  close(): Promise<void>;
}

/** How many outcomes have each status. */
export function statusCounts(outcomes: readonly BatchOutcome<unknown>[]): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const outcome of outcomes) counts[outcome.status] = (counts[outcome.status] ?? 0) + 1;
  return counts;
}

const range = (from: number, to: number): number[] => Array.from({ length: to - from }, (_, i) => from + i);

/** Registers the batch suite for the store `name` builds. */
export function batchSuite(name: string, setup: () => Promise<BatchFixture>): void {
  describe(`runBatch: ${name}`, () => {
    let fixture: BatchFixture;
    let effects: Map<number, number>;
    const effect = async (n: number): Promise<{ n: number }> => {
      effects.set(n, (effects.get(n) ?? 0) + 1);
      await new Promise((resolve) => setImmediate(resolve));
      return { n };
    };

    beforeEach(async () => {
      fixture = await setup();
      effects = new Map();
    });
    afterEach(async () => {
      await fixture.close();
    });

    it('runs 200 items (20 duplicated inside the batch, 50 already completed) with one effect per key, in input order', async () => {
      const receiver = createReceiver({ store: fixture.store, clock: fixture.clock });
      const done = await receiver.runBatch(batchItems(range(0, 50)), effect);
      expect(statusCounts(done)).toEqual({ executed: 50 });
      const keys = [...range(0, 180), ...range(0, 20).map((i) => i * 9)];
      const claimMany = fixture.store.claimMany === undefined ? undefined : vi.spyOn(fixture.store as Required<IdempotencyStore>, 'claimMany');
      const outcomes = await receiver.runBatch(batchItems(keys), effect, { concurrency: 16 });
      if (claimMany !== undefined) expect(claimMany).toHaveBeenCalledTimes(1);
      expect(outcomes.map((o) => o.index)).toEqual(range(0, 200));
      expect(outcomes.map((o) => o.key)).toEqual(keys.map((n) => `k${n}`));
      expect(statusCounts(outcomes)).toEqual({ executed: 130, replayed: 70 });
      for (const [at, outcome] of outcomes.entries()) {
        const n = keys[at] as number;
        expect(outcome.status).toBe(at < 180 && n >= 50 ? 'executed' : 'replayed');
        expect('value' in outcome ? outcome.value : undefined).toEqual({ n });
      }
      expect(effects.size).toBe(180);
      expect([...effects.values()].every((count) => count === 1)).toBe(true);
    });

    it('runs the same batch sent by 4 callers at once exactly once per key', async () => {
      const receivers = range(0, 4).map(() => createReceiver({ store: fixture.store, clock: fixture.clock }));
      const items = batchItems(range(0, 60));
      const all = await Promise.all(receivers.map((receiver) => receiver.runBatch(items, effect, { concurrency: 4 })));
      expect([...effects.values()].every((count) => count === 1)).toBe(true);
      expect(effects.size).toBe(60);
      for (const at of range(0, 60)) {
        const statuses = all.map((outcomes) => outcomes[at]?.status);
        expect(statuses.filter((s) => s === 'executed')).toHaveLength(1);
        expect(statuses.every((s) => s === 'executed' || s === 'replayed' || s === 'in_flight')).toBe(true);
      }
      const again = await receivers[0]!.runBatch(items, effect);
      expect(statusCounts(again)).toEqual({ replayed: 60 });
    });

    it('answers only the item whose fingerprint changed as mismatch', async () => {
      const receiver = createReceiver({ store: fixture.store, clock: fixture.clock });
      await receiver.runBatch(batchItems(range(0, 10)), effect);
      const changed = batchItems(range(0, 10)).map((item) => (item.key === 'k4' ? { ...item, fingerprint: fingerprintOf(4, 'x') } : item));
      const outcomes = await receiver.runBatch(changed, effect);
      expect(outcomes.map((o) => o.status)).toEqual(range(0, 10).map((n) => (n === 4 ? 'mismatch' : 'replayed')));
      const mismatch = outcomes[4];
      expect(mismatch?.status === 'mismatch' ? mismatch.error.code : undefined).toBe('idempotency-key-reused');
      expect([...effects.values()]).toEqual(range(0, 10).map(() => 1));
    });

    it('answers a later duplicate with another fingerprint as mismatch, the first one executed', async () => {
      const receiver = createReceiver({ store: fixture.store, clock: fixture.clock });
      const items = [...batchItems([1, 2]), { ...batchItems([1])[0]!, fingerprint: fingerprintOf(1, 'y') }];
      const outcomes = await receiver.runBatch(items, effect);
      expect(outcomes.map((o) => o.status)).toEqual(['executed', 'executed', 'mismatch']);
      expect(effects.get(1)).toBe(1);
    });

    it('releases a failed item, never replaying it as a success: the retry runs it again', async () => {
      const receiver = createReceiver({ store: fixture.store, clock: fixture.clock });
      const failing = new Error('card declined');
      let fail = true;
      const work = (n: number): Promise<{ n: number }> => (n === 3 && fail ? Promise.reject(failing) : effect(n));
      const first = await receiver.runBatch(batchItems(range(0, 6)), work);
      expect(first.map((o) => o.status)).toEqual(['executed', 'executed', 'executed', 'failed', 'executed', 'executed']);
      expect(first[3]?.status === 'failed' ? first[3].error : undefined).toBe(failing);
      expect(await fixture.store.get('batch', 'k3')).toBeUndefined();
      fail = false;
      const second = await receiver.runBatch(batchItems(range(0, 6)), work);
      expect(second.map((o) => o.status)).toEqual(['replayed', 'replayed', 'replayed', 'executed', 'replayed', 'replayed']);
      expect([...effects.values()]).toEqual(range(0, 6).map(() => 1));
    });

    it('answers a key held under a live lease as in_flight and takes it over once the lease is over', async () => {
      const receiver = createReceiver({ store: fixture.store, clock: fixture.clock, leaseMs: 5_000 });
      const held = await fixture.store.claim({ scope: 'batch', key: 'k2', fingerprint: fingerprintOf(2), leaseMs: 5_000, retentionMs: 60_000 });
      expect(held.acquired).toBe(true);
      const first = await receiver.runBatch(batchItems(range(0, 4)), effect);
      expect(first.map((o) => o.status)).toEqual(['executed', 'executed', 'in_flight', 'executed']);
      fixture.clock.advance(5_001);
      const second = await receiver.runBatch(batchItems(range(0, 4)), effect);
      expect(second.map((o) => o.status)).toEqual(['replayed', 'replayed', 'executed', 'replayed']);
      expect([...effects.values()]).toEqual([1, 1, 1, 1]);
    });
  });
}
