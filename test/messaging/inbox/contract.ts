/**
 * The behaviour every inbox store must show, run once per database (PostgreSQL, SQLite). Each test
 * counts the handler's runs and the business rows it left, so a double execution fails it.
 */
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../../src/core/clock.js';
import {
  createInbox,
  HandlerTimeoutError,
  inboxProcessor,
  MessageIdMissingError,
  type Inbox,
  type InboxOptions,
  type InboxStore,
} from '../../../src/messaging/inbox/index.js';

/** What a store's test file provides. */
export interface InboxHarness<Tx> {
  readonly store: InboxStore<Tx>;
  /** Writes one business row for (consumer, message id) through the transaction. */
  write(tx: Tx, consumer: string, messageId: string): Promise<void>;
  /** Counts the business rows of (consumer, message id). */
  count(consumer: string, messageId: string): Promise<number>;
}

export function inboxContract<Tx>(name: string, setup: () => Promise<InboxHarness<Tx>>): void {
  describe(`inbox contract (${name})`, () => {
    async function inboxWith(options: Omit<InboxOptions<Tx>, 'store'> = {}): Promise<{ inbox: Inbox<Tx>; harness: InboxHarness<Tx>; clock: ManualClock }> {
      const harness = await setup();
      const clock = new ManualClock(1_700_000_000_000);
      return { inbox: createInbox({ store: harness.store, clock, ...options }), harness, clock };
    }
    const consumer = 'billing';

    it('runs the handler once and answers later deliveries as duplicates', async () => {
      const { inbox, harness } = await inboxWith();
      const id = randomUUID();
      let runs = 0;
      const handler = async (tx: Tx): Promise<void> => {
        runs += 1;
        await harness.write(tx, consumer, id);
      };
      expect(await inbox.handle({ consumer, messageId: id }, handler)).toEqual({ status: 'processed', attempts: 1 });
      expect(await inbox.handle({ consumer, messageId: id }, handler)).toEqual({ status: 'duplicate' });
      expect(await inbox.handle({ consumer, messageId: id }, handler)).toEqual({ status: 'duplicate' });
      expect(runs).toBe(1);
      expect(await harness.count(consumer, id)).toBe(1);
    });

    it('scopes dedup per consumer: two consumers of one message each process it once', async () => {
      const { inbox, harness } = await inboxWith();
      const id = randomUUID();
      for (const name of ['billing', 'shipping', 'billing', 'shipping']) {
        await inbox.handle({ consumer: name, messageId: id }, (tx) => harness.write(tx, name, id));
      }
      expect(await harness.count('billing', id)).toBe(1);
      expect(await harness.count('shipping', id)).toBe(1);
    });

    it('commits exactly once when 8 deliveries of one id arrive concurrently', async () => {
      const { inbox, harness } = await inboxWith();
      const id = randomUUID();
      let runs = 0;
      const outcomes = await Promise.all(
        Array.from({ length: 8 }, () =>
          inbox.handle({ consumer, messageId: id }, async (tx) => {
            runs += 1;
            await harness.write(tx, consumer, id);
            // Hold the transaction open so the others pile up behind its uncommitted mark.
            await new Promise((resolve) => setTimeout(resolve, 50));
          }),
        ),
      );
      expect(outcomes.filter((o) => o.status === 'processed')).toHaveLength(1);
      expect(outcomes.filter((o) => o.status === 'duplicate')).toHaveLength(7);
      expect(runs).toBe(1);
      expect(await harness.count(consumer, id)).toBe(1);
      expect(await inbox.deadLetters()).toEqual([]);
    });

    // Deliveries in one process count their attempts on separate connections, so the database may count
    // them in any order. Here the first delivery's attempt is counted last (the 8th, past maxAttempts 5),
    // and its mark goes in first: it must run the handler, not take the seven others for crashed runs.
    it('never takes concurrent deliveries in this process for a crash loop, whatever order their attempts were counted in', async () => {
      const { harness } = await inboxWith();
      const { store } = harness;
      let begins = 0;
      let processes = 0;
      let othersBegun = 0;
      let allOthersBegun!: () => void;
      const othersHaveBegun = new Promise<void>((resolve) => (allOthersBegun = resolve));
      let firstSettled!: () => void;
      const firstHasSettled = new Promise<void>((resolve) => (firstSettled = resolve));
      const reordering: InboxStore<Tx> = {
        begin: async (c, m, now) => {
          const n = begins++;
          if (n === 0) await othersHaveBegun;
          const result = await store.begin(c, m, now);
          if (n > 0 && ++othersBegun === 7) allOthersBegun();
          return result;
        },
        // The first delivery begins last, so its process call is the eighth; the others wait for it.
        process: async (c, m, now, timeoutMs, fn) => {
          if (++processes < 8) {
            await firstHasSettled;
            return store.process(c, m, now, timeoutMs, fn);
          }
          try {
            return await store.process(c, m, now, timeoutMs, fn);
          } finally {
            firstSettled();
          }
        },
        fail: (...args) => store.fail(...args),
        deadLetters: (...args) => store.deadLetters(...args),
        requestRedrive: (...args) => store.requestRedrive(...args),
        pendingRedrives: (...args) => store.pendingRedrives(...args),
        reap: (...args) => store.reap(...args),
        close: () => store.close(),
      };
      const inbox = createInbox({ store: reordering, clock: new ManualClock(1_700_000_000_000), maxAttempts: 5 });
      const id = randomUUID();
      let runs = 0;
      const outcomes = await Promise.all(
        Array.from({ length: 8 }, () =>
          inbox.handle({ consumer, messageId: id }, async (tx) => {
            runs += 1;
            await harness.write(tx, consumer, id);
          }),
        ),
      );
      expect(outcomes[0]).toEqual({ status: 'processed', attempts: 8 });
      expect(outcomes.slice(1)).toEqual(Array.from({ length: 7 }, () => ({ status: 'duplicate' })));
      expect(runs).toBe(1);
      expect(await harness.count(consumer, id)).toBe(1);
      expect(await inbox.deadLetters()).toEqual([]);
    });

    it('rejects a message without a usable id and never runs the handler', async () => {
      const { inbox } = await inboxWith();
      let runs = 0;
      const handler = (): Promise<void> => {
        runs += 1;
        return Promise.resolve();
      };
      for (const messageId of [undefined, '', 'x'.repeat(256), 'a\0b']) {
        await expect(inbox.handle({ consumer, messageId }, handler)).rejects.toBeInstanceOf(MessageIdMissingError);
      }
      await expect(inbox.handle({ consumer: '', messageId: 'm' }, handler)).rejects.toThrow(/"consumer"/);
      expect(runs).toBe(0);
    });

    it('rolls back the writes and the mark together on a throw, counts the attempt, then processes', async () => {
      const { inbox, harness } = await inboxWith({ maxAttempts: 3 });
      const id = randomUUID();
      const boom = new Error('boom');
      const first = await inbox.handle({ consumer, messageId: id }, async (tx) => {
        await harness.write(tx, consumer, id);
        throw boom;
      });
      expect(first).toEqual({ status: 'retry', attempts: 1, error: boom });
      expect(await harness.count(consumer, id)).toBe(0);
      const attempts: number[] = [];
      const second = await inbox.handle({ consumer, messageId: id }, async (tx, { attempt }) => {
        attempts.push(attempt);
        await harness.write(tx, consumer, id);
      });
      expect(second).toEqual({ status: 'processed', attempts: 2 });
      expect(attempts).toEqual([2]);
      expect(await harness.count(consumer, id)).toBe(1);
    });

    it('dead-letters after maxAttempts failures with the error, attempts, headers and body; later deliveries do not run', async () => {
      const { inbox, harness } = await inboxWith({ maxAttempts: 3 });
      const id = randomUUID();
      const poison = { consumer, messageId: id, headers: { 'content-type': 'application/json' }, body: new Uint8Array([123, 0, 255, 125]) };
      let runs = 0;
      const failing = async (tx: Tx): Promise<void> => {
        runs += 1;
        await harness.write(tx, consumer, id);
        throw new TypeError(`bad payload ${runs}`);
      };
      expect((await inbox.handle(poison, failing)).status).toBe('retry');
      expect((await inbox.handle(poison, failing)).status).toBe('retry');
      const third = await inbox.handle(poison, failing);
      expect(third).toMatchObject({ status: 'dead_lettered', attempts: 3 });
      expect(await inbox.handle(poison, failing)).toEqual({ status: 'dead_lettered', attempts: undefined, error: undefined });
      expect(runs).toBe(3);
      expect(await harness.count(consumer, id)).toBe(0);
      const [letter, ...rest] = await inbox.deadLetters({ consumer });
      expect(rest).toEqual([]);
      expect(letter).toMatchObject({ consumer, messageId: id, attempts: 3, error: 'TypeError: bad payload 3', headers: poison.headers });
      expect(Array.from(letter?.body ?? [])).toEqual([123, 0, 255, 125]);
      expect(letter?.deadLetteredAt).toBe(1_700_000_000_000);
    });

    it('dead-letters a message started maxAttempts times without finishing, without running it again', async () => {
      const { inbox, harness } = await inboxWith({ maxAttempts: 2 });
      const id = randomUUID();
      // Two processes died inside the handler: each counted its start, neither finished.
      await harness.store.begin(consumer, id, 1);
      await harness.store.begin(consumer, id, 2);
      let runs = 0;
      const outcome = await inbox.handle({ consumer, messageId: id, body: new Uint8Array([1]) }, () => {
        runs += 1;
        return Promise.resolve();
      });
      expect(outcome).toMatchObject({ status: 'dead_lettered', attempts: 3 });
      expect(runs).toBe(0);
      const [letter] = await inbox.deadLetters();
      expect(letter?.error).toBe('started 2 times without finishing (maxAttempts 2)');
      expect(Array.from(letter?.body ?? [])).toEqual([1]);
    });

    it('rolls back a handler that exceeds handlerTimeoutMs and counts the attempt', async () => {
      const { inbox, harness } = await inboxWith({ handlerTimeoutMs: 150 });
      const id = randomUUID();
      let aborted = false;
      const outcome = await inbox.handle({ consumer, messageId: id }, async (tx, { signal }) => {
        await harness.write(tx, consumer, id);
        await new Promise<void>((resolve) => signal.addEventListener('abort', () => resolve(), { once: true }));
        aborted = signal.aborted;
      });
      expect(outcome).toMatchObject({ status: 'retry', attempts: 1 });
      expect(outcome.status === 'retry' && outcome.error).toBeInstanceOf(HandlerTimeoutError);
      expect(aborted).toBe(true);
      expect(await harness.count(consumer, id)).toBe(0);
      expect(await inbox.handle({ consumer, messageId: id }, (tx) => harness.write(tx, consumer, id))).toEqual({ status: 'processed', attempts: 2 });
      expect(await harness.count(consumer, id)).toBe(1);
    });

    it('redrives a dead letter once, however often the redrive is requested or run', async () => {
      const { inbox, harness, clock } = await inboxWith({ maxAttempts: 1 });
      const id = randomUUID();
      await inbox.handle({ consumer, messageId: id, body: new TextEncoder().encode('{"n":1}') }, () => Promise.reject(new Error('down')));
      expect((await inbox.deadLetters()).map((letter) => [letter.deadLetteredAt, letter.redriveRequestedAt])).toEqual([[clock.now(), undefined]]);
      clock.advance(1_000);
      expect(await inbox.redrive(consumer, id)).toBe(true);
      expect(await inbox.redrive(consumer, id)).toBe(false);
      const [pending] = await inbox.pendingRedrives(consumer);
      expect(pending).toMatchObject({ messageId: id, attempts: 0, deadLetteredAt: undefined, redriveRequestedAt: clock.now() });
      // Listed as redrive pending, not gone, until the consumer takes it.
      expect(await inbox.deadLetters()).toEqual([pending]);
      const bodies: string[] = [];
      const processor = inboxProcessor(inbox, consumer, async (message, tx) => {
        bodies.push(new TextDecoder().decode(message.body));
        await harness.write(tx, consumer, id);
      });
      // Two polls at once: each runs the letter if its read of the pending list came before the other's run
      // finished ([1, 1]), or finds nothing left ([0, 1] in either order); which happens depends on the
      // round trips (it differs behind PgBouncer). Either way the effect happens once, checked below.
      const runs = await Promise.all([processor.redrivePending?.(), processor.redrivePending?.()]);
      expect(runs.includes(1)).toBe(true);
      expect(runs.every((n) => n === 0 || n === 1)).toBe(true);
      expect(await processor.redrivePending?.()).toBe(0);
      expect(bodies).toEqual(['{"n":1}']);
      expect(await harness.count(consumer, id)).toBe(1);
      expect(await inbox.deadLetters()).toEqual([]);
      expect(await inbox.redrive(consumer, id)).toBe(false);
    });

    it('reaps marks older than the retention in bounded batches, keeping newer ones', async () => {
      const { inbox, harness, clock } = await inboxWith({ retentionMs: 10_000, retryHorizonMs: 5_000 });
      const old = [randomUUID(), randomUUID(), randomUUID()];
      for (const id of old) await inbox.handle({ consumer, messageId: id }, (tx) => harness.write(tx, consumer, id));
      clock.advance(10_001);
      const fresh = randomUUID();
      await inbox.handle({ consumer, messageId: fresh }, (tx) => harness.write(tx, consumer, fresh));
      expect(await inbox.reap(2)).toBe(2);
      expect(await inbox.reap(2)).toBe(1);
      expect(await inbox.reap(2)).toBe(0);
      expect(await inbox.handle({ consumer, messageId: fresh }, () => Promise.resolve())).toEqual({ status: 'duplicate' });
    });
  });
}
