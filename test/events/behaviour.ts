/**
 * The behaviour every event store shows, run by each store's test file on a fresh store: derived ids,
 * repeated appends answered with their first positions, conflicts, expected versions, never a partial
 * append, and concurrent appenders in one process.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { EventConflictError, WrongExpectedVersionError, eventIdOf, type EventStore } from '../../src/events/index.js';

/** A fresh, empty event store and how to dispose of it. */
export interface EventStoreFixture {
  readonly store: EventStore;
  close(): Promise<void>;
}

const placed = { type: 'OrderPlaced', data: { order: 42, total: 1200, lines: [{ sku: 'a', n: 2 }] } };
const paid = { type: 'OrderPaid', data: { order: 42, amount: 1200 }, metadata: { by: 'card' } };

/** Registers `describe(\`event store: ${name}\`)` over the stores `open` makes, one per test. */
export function eventStoreBehaviour(name: string, open: () => Promise<EventStoreFixture>, concurrent: boolean): void {
  describe(`event store: ${name}`, () => {
    let fixture: EventStoreFixture;
    let store: EventStore;
    beforeEach(async () => {
      fixture = await open();
      store = fixture.store;
    });
    afterEach(async () => {
      await fixture.close();
    });

    it('appends from version 0 with ids derived from the key and index, positions increasing', async () => {
      const result = await store.appendOnce('order-42', [placed, paid], { expectedVersion: 'no_stream', idempotencyKey: 'cmd-1' });
      expect(result.events.map((e) => [e.eventId, e.version, e.status])).toEqual([
        [eventIdOf('order-42', 'cmd-1', 0), 0, 'appended'],
        [eventIdOf('order-42', 'cmd-1', 1), 1, 'appended'],
      ]);
      expect(result.events[1]?.position).toBeGreaterThan(result.events[0]?.position ?? Infinity);
      const next = await store.appendOnce('order-42', [{ type: 'OrderShipped', data: {} }], { expectedVersion: 1, idempotencyKey: 'cmd-2' });
      expect(next.events[0]).toMatchObject({ version: 2, status: 'appended' });
      const read = await store.read('order-42');
      expect(read.map((e) => [e.version, e.type])).toEqual([[0, 'OrderPlaced'], [1, 'OrderPaid'], [2, 'OrderShipped']]);
      expect(read[1]).toMatchObject({ stream: 'order-42', data: paid.data, metadata: paid.metadata });
      expect(read[0]?.metadata).toBeNull();
    });

    it('answers the same append again already_appended with the original positions, whatever the stream now holds', async () => {
      const first = await store.appendOnce('order-42', [placed, paid], { expectedVersion: 'no_stream', idempotencyKey: 'cmd-1' });
      await store.appendOnce('order-42', [{ type: 'OrderShipped', data: {} }], { expectedVersion: 1, idempotencyKey: 'cmd-2' });
      // The retry of cmd-1 carries its stale expected version; it is still the same append.
      const again = await store.appendOnce('order-42', [placed, { ...paid, data: { amount: 1200, order: 42 } }], { expectedVersion: 'no_stream', idempotencyKey: 'cmd-1' });
      expect(again.events).toEqual(first.events.map((e) => ({ ...e, status: 'already_appended' })));
      expect((await store.read('order-42')).map((e) => e.version)).toEqual([0, 1, 2]);
      // The same key on another stream is another append.
      expect((await store.appendOnce('order-43', [placed], { expectedVersion: 'any', idempotencyKey: 'cmd-1' })).events[0]?.status).toBe('appended');
    });

    it('refuses the key reused for other events with EventConflictError, appending nothing', async () => {
      await store.appendOnce('order-42', [placed, paid], { expectedVersion: 'no_stream', idempotencyKey: 'cmd-1' });
      const conflicts = [
        [placed, { ...paid, data: { order: 42, amount: 1 } }],
        [placed, { ...paid, metadata: { by: 'cash' } }],
        [placed, { ...paid, type: 'OrderRefunded' }],
        [placed],
        [placed, paid, paid],
      ];
      for (const events of conflicts) {
        const attempt = store.appendOnce('order-42', events, { expectedVersion: 'any', idempotencyKey: 'cmd-1' });
        await expect(attempt).rejects.toBeInstanceOf(EventConflictError);
        await expect(attempt).rejects.toMatchObject({ code: 'event-conflict', stream: 'order-42' });
      }
      expect(await store.read('order-42')).toHaveLength(2);
    });

    it('refuses a wrong expected version with WrongExpectedVersionError, appending none of the events', async () => {
      await expect(store.appendOnce('s', [placed], { expectedVersion: 0, idempotencyKey: 'k0' })).rejects.toMatchObject({ expected: 0, actual: -1 });
      await expect(store.appendOnce('s', [placed], { expectedVersion: 'stream_exists', idempotencyKey: 'k0' })).rejects.toBeInstanceOf(WrongExpectedVersionError);
      await store.appendOnce('s', [placed], { expectedVersion: 'no_stream', idempotencyKey: 'k1' });
      const stale = store.appendOnce('s', [paid, paid, paid], { expectedVersion: 'no_stream', idempotencyKey: 'k2' });
      await expect(stale).rejects.toBeInstanceOf(WrongExpectedVersionError);
      await expect(stale).rejects.toMatchObject({ code: 'event-wrong-expected-version', expected: 'no_stream', actual: 0 });
      await expect(store.appendOnce('s', [paid], { expectedVersion: 5, idempotencyKey: 'k2' })).rejects.toMatchObject({ actual: 0 });
      expect(await store.read('s')).toHaveLength(1);
      // Nothing of the refused appends was written: the key is free for the right version.
      expect((await store.appendOnce('s', [paid, paid, paid], { expectedVersion: 0, idempotencyKey: 'k2' })).events.map((e) => e.version)).toEqual([1, 2, 3]);
    });

    it('refuses malformed appends with a TypeError', async () => {
      await expect(store.appendOnce('s', [], { expectedVersion: 'any', idempotencyKey: 'k' })).rejects.toThrow(TypeError);
      await expect(store.appendOnce('', [placed], { expectedVersion: 'any', idempotencyKey: 'k' })).rejects.toThrow(/"stream"/);
      await expect(store.appendOnce('s', [placed], { expectedVersion: -1, idempotencyKey: 'k' })).rejects.toThrow(/"expectedVersion"/);
      await expect(store.appendOnce('s', [placed], { expectedVersion: 'any', idempotencyKey: '' })).rejects.toThrow(/"idempotencyKey"/);
      await expect(store.appendOnce('s', [{ type: 'T', data: () => 1 }], { expectedVersion: 'any', idempotencyKey: 'k' })).rejects.toThrow(TypeError);
      expect(await store.read('s')).toEqual([]);
    });

    if (concurrent) {
      it('writes 20 concurrent copies of one append once, every copy answered with the same positions', async () => {
        const results = await Promise.all(
          Array.from({ length: 20 }, () => store.appendOnce('hot', [placed, paid], { expectedVersion: 'any', idempotencyKey: 'cmd' })),
        );
        expect(results.filter((r) => r.events[0]?.status === 'appended')).toHaveLength(1);
        expect(new Set(results.map((r) => JSON.stringify(r.events.map((e) => [e.version, e.position]))))).toHaveProperty('size', 1);
        expect(await store.read('hot')).toHaveLength(2);
      });

      it('lets exactly one of 20 concurrent appends expecting the same version win, and the others append nothing', async () => {
        const results = await Promise.allSettled(
          Array.from({ length: 20 }, (_, i) => store.appendOnce('race', [placed, paid], { expectedVersion: 'no_stream', idempotencyKey: `cmd-${i}` })),
        );
        expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(1);
        for (const r of results) if (r.status === 'rejected') expect(r.reason).toBeInstanceOf(WrongExpectedVersionError);
        expect((await store.read('race')).map((e) => e.version)).toEqual([0, 1]);
      });

      it('gives 20 concurrent appends to one stream with any version contiguous versions, none twice', async () => {
        await Promise.all(Array.from({ length: 20 }, (_, i) => store.appendOnce('many', [placed, paid], { expectedVersion: 'any', idempotencyKey: `cmd-${i}` })));
        const read = await store.read('many');
        expect(read.map((e) => e.version)).toEqual(Array.from({ length: 40 }, (_, i) => i));
        expect(new Set(read.map((e) => e.eventId)).size).toBe(40);
        // Each append's two events are adjacent: no append was interleaved with another.
        for (let i = 0; i < 40; i += 2) expect([read[i]?.type, read[i + 1]?.type]).toEqual(['OrderPlaced', 'OrderPaid']);
      });
    }
  });
}
