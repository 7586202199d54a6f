/**
 * What `inbox.handleBatch` must show on every store with a batch path (PostgreSQL, SQLite): one outcome per
 * delivery, effects counted per id (exactly one), a poison message dead-lettered without the others, and a
 * process SIGKILLed mid-batch (through `crash`) leaving nothing half-done behind.
 */
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../../src/core/clock.js';
import { createInbox, MessageIdMissingError, type Delivery, type InboxOptions } from '../../../src/messaging/inbox/index.js';
import type { InboxHarness } from './contract.js';

/** A store's harness plus a way to SIGKILL a child process that is running a batch at message `crashAt`. */
export interface BatchHarness<Tx> extends InboxHarness<Tx> {
  crash(consumer: string, ids: readonly string[], crashAt: string): Promise<NodeJS.Signals | null>;
}

export function inboxBatchContract<Tx>(name: string, setup: () => Promise<BatchHarness<Tx>>): void {
  describe(`inbox batch contract (${name})`, () => {
    const consumer = 'batch';
    async function inboxWith(options: Omit<InboxOptions<Tx>, 'store'> = {}) {
      const harness = await setup();
      return { inbox: createInbox({ store: harness.store, clock: new ManualClock(1_700_000_000_000), ...options }), harness };
    }
    const deliveries = (ids: readonly string[]): Delivery[] => ids.map((messageId) => ({ consumer, messageId }));

    it('runs each id once across duplicates inside a batch and across batches sent concurrently', async () => {
      const { inbox, harness } = await inboxWith();
      const ids = Array.from({ length: 50 }, () => randomUUID());
      const done = ids.slice(0, 10);
      await inbox.handleBatch(deliveries(done), (tx, d) => harness.write(tx, consumer, d.messageId ?? ''));
      const runs = new Map<string, number>();
      const handler = async (tx: Tx, d: Delivery): Promise<void> => {
        runs.set(d.messageId ?? '', (runs.get(d.messageId ?? '') ?? 0) + 1);
        await harness.write(tx, consumer, d.messageId ?? '');
      };
      // 50 ids, the first 10 already processed, 10 of them twice in the batch.
      const batch = deliveries([...ids, ...ids.slice(20, 30)]);
      const [first] = await Promise.all([inbox.handleBatch(batch, handler), inbox.handleBatch(batch, handler), inbox.handleBatch(batch, handler)]);
      expect(first).toHaveLength(60);
      expect(first?.slice(0, 10).every((o) => o.status === 'duplicate')).toBe(true);
      expect(first?.slice(50).every((o) => o.status === 'duplicate')).toBe(true);
      for (const id of ids) expect(await harness.count(consumer, id)).toBe(1);
      expect([...runs.values()].every((n) => n === 1)).toBe(true);
      expect(runs.size).toBe(40);
      expect(await inbox.deadLetters()).toEqual([]);
      expect((await inbox.handleBatch(batch, handler)).every((o) => o.status === 'duplicate')).toBe(true);
    });

    it('rolls back only the message that throws, rejects one without an id, and commits the rest', async () => {
      const { inbox, harness } = await inboxWith({ maxAttempts: 3 });
      const ids = Array.from({ length: 6 }, () => randomUUID());
      const bad = ids[2] as string;
      const boom = new Error('boom');
      const outcomes = await inbox.handleBatch([...deliveries(ids), { consumer, messageId: '' }], async (tx, d) => {
        await harness.write(tx, consumer, d.messageId ?? '');
        if (d.messageId === bad) throw boom;
      });
      expect(outcomes[2]).toEqual({ status: 'retry', attempts: 1, error: boom });
      expect(outcomes[6]?.status === 'rejected' && outcomes[6].error).toBeInstanceOf(MessageIdMissingError);
      expect(outcomes.filter((o) => o.status === 'processed')).toHaveLength(5);
      expect(await harness.count(consumer, bad)).toBe(0);
      for (const id of ids.filter((id) => id !== bad)) expect(await harness.count(consumer, id)).toBe(1);
      // The redelivery runs it alone and counts its attempt: it is the second.
      const again = await inbox.handleBatch(deliveries(ids), (tx, d) => harness.write(tx, consumer, d.messageId ?? ''));
      expect(again[2]).toEqual({ status: 'processed', attempts: 2 });
      expect(again.filter((o) => o.status === 'duplicate')).toHaveLength(5);
      expect(await harness.count(consumer, bad)).toBe(1);
    });

    it('dead-letters a poison message after maxAttempts failures, with the others processed', async () => {
      const { inbox, harness } = await inboxWith({ maxAttempts: 3 });
      const ids = Array.from({ length: 5 }, () => randomUUID());
      const poison = ids[1] as string;
      let poisonRuns = 0;
      const handler = async (tx: Tx, d: Delivery): Promise<void> => {
        await harness.write(tx, consumer, d.messageId ?? '');
        if (d.messageId === poison) {
          poisonRuns += 1;
          throw new TypeError('bad payload');
        }
      };
      const batch = ids.map((messageId) => ({ consumer, messageId, body: new Uint8Array([7]) }));
      expect((await inbox.handleBatch(batch, handler))[1]).toMatchObject({ status: 'retry', attempts: 1 });
      expect((await inbox.handleBatch(batch, handler))[1]).toMatchObject({ status: 'retry', attempts: 2 });
      expect((await inbox.handleBatch(batch, handler))[1]).toMatchObject({ status: 'dead_lettered', attempts: 3 });
      expect((await inbox.handleBatch(batch, handler))[1]).toEqual({ status: 'dead_lettered', attempts: undefined, error: undefined });
      expect(poisonRuns).toBe(3);
      const [letter, ...rest] = await inbox.deadLetters({ consumer });
      expect(rest).toEqual([]);
      expect(letter).toMatchObject({ messageId: poison, attempts: 3, error: 'TypeError: bad payload' });
      expect(Array.from(letter?.body ?? [])).toEqual([7]);
      expect(await harness.count(consumer, poison)).toBe(0);
      for (const id of ids.filter((id) => id !== poison)) expect(await harness.count(consumer, id)).toBe(1);
    });

    it('after a SIGKILL mid-batch keeps nothing of it, and dead-letters the message that keeps crashing without the rest', async () => {
      const { inbox, harness } = await inboxWith({ maxAttempts: 2 });
      const ids = Array.from({ length: 8 }, () => randomUUID());
      const crasher = ids[3] as string;
      expect(await harness.crash(consumer, ids, crasher)).toBe('SIGKILL');
      for (const id of ids) expect(await harness.count(consumer, id)).toBe(0);
      // Redelivered: every message has a started attempt on record, so each runs alone; the crasher kills
      // the process again, after the three before it committed.
      expect(await harness.crash(consumer, ids, crasher)).toBe('SIGKILL');
      for (const id of ids.slice(0, 3)) expect(await harness.count(consumer, id)).toBe(1);
      let crasherRuns = 0;
      const outcomes = await inbox.handleBatch(deliveries(ids), async (tx, d) => {
        if (d.messageId === crasher) crasherRuns += 1;
        await harness.write(tx, consumer, d.messageId ?? '');
      });
      expect(crasherRuns).toBe(0);
      expect(outcomes.map((o) => o.status)).toEqual(['duplicate', 'duplicate', 'duplicate', 'dead_lettered', 'processed', 'processed', 'processed', 'processed']);
      expect((await inbox.deadLetters({ consumer })).map((letter) => letter.messageId)).toEqual([crasher]);
      for (const id of ids) expect(await harness.count(consumer, id)).toBe(id === crasher ? 0 : 1);
    });
  });
}
