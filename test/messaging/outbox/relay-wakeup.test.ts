/**
 * How the relay avoids useless claims, waits and NOTIFYs on the real PostgreSQL: a notified row held back
 * by an older open transaction (snapshot xmin) is chased with short waits instead of a whole poll
 * interval; overlapping `runOnce` calls do not re-claim while the keys they would find are this relay's
 * own batch; enqueues NOTIFY only while a relay waits (migration 0007), and a relay that starts waiting
 * still claims every row whose transaction did not NOTIFY.
 */
import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createWebhookPublisher } from '../../../src/messaging/transports/webhook.js';
import { createOutbox, createRelay, type OutboxMessage, type OutboxPublisher, type Relay } from '../../../src/messaging/outbox/index.js';
import { createTestSchema, postgresAvailable, type TestSchema } from '../../support/postgres-schema.js';
import {
  relaysWaiting,
  startWebhookReceiver,
  untilRelayWaits,
  untilVisible,
  waitingLockHolders,
  waitUntil,
  WEBHOOK_SECRET,
  type WebhookReceiver,
} from '../../support/outbox.js';

const available = await postgresAvailable();

describe.runIf(available)('outbox relay wake-up and claim pacing', () => {
  let db: TestSchema;
  let hook: WebhookReceiver;
  const relays: Relay[] = [];

  beforeAll(async () => {
    db = await createTestSchema('rs_outbox_wake', 8);
    hook = await startWebhookReceiver();
  });

  afterEach(async () => {
    await Promise.all(relays.splice(0).map((relay) => relay.stop()));
    await db.pool.query(`TRUNCATE "${db.schema}".outbox`);
    hook.received.length = 0;
  });

  afterAll(async () => {
    await hook.close();
    await db.drop();
  });

  const webhook = (): OutboxPublisher => createWebhookPublisher({ url: hook.url, secret: WEBHOOK_SECRET });

  /**
   * Runs `during` while an older transaction with an xid is open (it keeps the snapshot xmin below any row
   * committed meanwhile), then commits it. On a failure it rolls back, so no xid outlives the test.
   */
  async function withOlderTransaction(during: () => Promise<void>): Promise<void> {
    const older = await db.pool.connect();
    try {
      await older.query('BEGIN');
      await older.query('SELECT pg_current_xact_id()');
      await during();
      await older.query('COMMIT');
    } finally {
      await older.query('ROLLBACK').catch(() => undefined);
      older.release();
    }
  }

  /** A publisher whose publishes wait until the test lets them go. */
  function holdingPublisher(): { publisher: OutboxPublisher; held: OutboxMessage[]; releaseAll: () => void } {
    const held: OutboxMessage[] = [];
    const releases: (() => void)[] = [];
    return {
      held,
      publisher: {
        publish: (message) => {
          held.push(message);
          return new Promise<void>((resolve) => releases.push(resolve));
        },
        close: () => Promise.resolve(),
      },
      releaseAll: () => {
        for (const release of releases.splice(0)) release();
      },
    };
  }

  async function inTransaction<R>(fn: (tx: pg.PoolClient) => Promise<R>): Promise<R> {
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      const result = await fn(client);
      await client.query('COMMIT');
      return result;
    } finally {
      client.release();
    }
  }

  it('publishes a notified row soon after an older transaction ends, not a poll interval later', async () => {
    const outbox = createOutbox({ schema: db.schema });
    const relay = createRelay({ pool: db.pool, outbox, publisher: webhook(), pollIntervalMs: 60_000 });
    relays.push(relay);
    relay.start();
    await untilRelayWaits(db.pool, outbox.channel);
    // An older transaction with an xid keeps the snapshot xmin below the row's: the NOTIFY's claim sees nothing.
    await withOlderTransaction(async () => {
      await inTransaction((tx) => outbox.enqueue(tx, { topic: 't', key: 'k', payload: 'held back' }));
      await new Promise((resolve) => setTimeout(resolve, 15));
      expect(hook.received).toHaveLength(0);
    });
    // The poll interval is 60 s: only the relay's doubling re-claims after the NOTIFY can publish in time.
    await waitUntil(() => hook.received.length === 1, 20_000);
    expect(hook.received[0]?.body).toBe('held back');
  });

  it('an overlapping runOnce that found only its own relay\'s leased keys waits for that batch, then claims the next rows', async () => {
    const outbox = createOutbox({ schema: db.schema });
    const { publisher, held, releaseAll } = holdingPublisher();
    const relay = createRelay({ pool: db.pool, outbox, publisher, perKeyLimit: 1 });
    relays.push(relay);
    await inTransaction(async (tx) => {
      for (let n = 0; n < 2; n++) for (const key of ['a', 'b', 'c']) await outbox.enqueue(tx, { topic: 't', key, payload: `${key}${n}` });
    });

    await untilVisible(db.pool, db.schema);
    const first = relay.runOnce();
    await waitUntil(() => held.length === 3);
    // Every key's head is in the first batch: a claim now finds nothing.
    expect(await relay.runOnce()).toBe(0);
    let thirdDone = false;
    const third = relay.runOnce().then((claimed) => {
      thirdDone = true;
      return claimed;
    });
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(thirdDone).toBe(false);
    expect(held).toHaveLength(3);

    releaseAll();
    expect(await first).toBe(3);
    await waitUntil(() => held.length === 6);
    releaseAll();
    expect(await third).toBe(3);
    expect(held.map((m) => m.payload).map((p) => Buffer.from(p).toString())).toEqual(['a0', 'b0', 'c0', 'a1', 'b1', 'c1']);
    expect((await outbox.status(db.pool)).pending).toBe(0);
  });
  it('sends no NOTIFY while no relay waits or the relay is busy; one while it waits', async () => {
    const outbox = createOutbox({ schema: db.schema });
    const listener = new pg.Client(db.pool.options);
    await listener.connect();
    let heard = 0;
    listener.on('notification', () => void heard++);
    await listener.query(`LISTEN "${outbox.channel}"`);
    // A NOTIFY is queued at COMMIT and delivered before the listener's next ReadyForQuery.
    const settle = async (): Promise<void> => {
      await new Promise((resolve) => setTimeout(resolve, 200));
      await listener.query('SELECT 1');
    };
    const { publisher, held, releaseAll } = holdingPublisher();
    try {
      await inTransaction((tx) => outbox.enqueue(tx, { topic: 't', key: 'a', payload: 'nobody waits' }));
      await settle();
      expect(heard).toBe(0);

      const relay = createRelay({ pool: db.pool, outbox, publisher, pollIntervalMs: 60_000 });
      relays.push(relay);
      relay.start();
      await waitUntil(() => held.length === 1);
      releaseAll();
      await untilRelayWaits(db.pool, outbox.channel);
      expect(heard).toBe(0);
      await inTransaction((tx) => outbox.enqueue(tx, { topic: 't', key: 'b', payload: 'wakes the relay' }));
      await waitUntil(() => heard === 1 && held.length === 2);
      // The relay holds that batch open: it gave the waiting lock back, so enqueues stay silent.
      await waitUntil(async () => (await relaysWaiting(db.pool, outbox.channel)) === 0);
      for (let n = 0; n < 3; n++) await inTransaction((tx) => outbox.enqueue(tx, { topic: 't', key: `c${n}`, payload: 'while busy' }));
      await settle();
      expect(heard).toBe(1);
      releaseAll();
      await waitUntil(() => {
        releaseAll();
        return held.length === 5;
      });
      await untilRelayWaits(db.pool, outbox.channel);
      expect((await outbox.status(db.pool)).pending).toBe(0);
    } finally {
      releaseAll();
      await listener.end();
    }
  });

  it('cannot start waiting while a transaction that enqueued without a NOTIFY is open, and publishes its row soon after it commits', async () => {
    const outbox = createOutbox({ schema: db.schema });
    const writer = await db.pool.connect();
    try {
      await writer.query('BEGIN');
      await outbox.enqueue(writer, { topic: 't', key: 'k', payload: 'open writer' });
      const relay = createRelay({ pool: db.pool, outbox, publisher: webhook(), pollIntervalMs: 60_000 });
      relays.push(relay);
      relay.start();
      await new Promise((resolve) => setTimeout(resolve, 300));
      expect(await relaysWaiting(db.pool, outbox.channel)).toBe(0);
      await writer.query('COMMIT');
    } finally {
      await writer.query('ROLLBACK').catch(() => undefined);
      writer.release();
    }
    // The poll interval is 60 s: only the relay's doubling retries of the waiting lock can publish in time.
    await waitUntil(() => hook.received.length === 1, 10_000);
    expect(hook.received[0]?.body).toBe('open writer');
    await untilRelayWaits(db.pool, outbox.channel);
  });

  it('claims a row that was enqueued without a NOTIFY once every transaction below its waiting horizon has ended', async () => {
    const outbox = createOutbox({ schema: db.schema });
    await withOlderTransaction(async () => {
      // No relay waits: this commit sends no NOTIFY, and the older transaction keeps the row unclaimable.
      await inTransaction((tx) => outbox.enqueue(tx, { topic: 't', key: 'k', payload: 'behind an older transaction' }));
      const relay = createRelay({ pool: db.pool, outbox, publisher: webhook(), pollIntervalMs: 60_000 });
      relays.push(relay);
      relay.start();
      await untilRelayWaits(db.pool, outbox.channel);
      await new Promise((resolve) => setTimeout(resolve, 100));
      expect(hook.received).toHaveLength(0);
    });
    await waitUntil(() => hook.received.length === 1, 10_000);
    expect(hook.received[0]?.body).toBe('behind an older transaction');
  });

  it('a relay whose LISTEN connection is cut stops holding the waiting lock, reconnects and is woken again', async () => {
    const outbox = createOutbox({ schema: db.schema });
    // The relay's own account of the cut, printed if it does not take the lock again in time.
    const started = Date.now();
    const events: string[] = [];
    const relay = createRelay({
      pool: db.pool,
      outbox,
      publisher: webhook(),
      pollIntervalMs: 60_000,
      onEvent: (event) => events.push(`${Date.now() - started} ms ${event.type}${event.error === undefined ? '' : `: ${event.error}`}`),
    });
    relays.push(relay);
    relay.start();
    await untilRelayWaits(db.pool, outbox.channel);
    const holder = async (): Promise<number | undefined> => (await waitingLockHolders(db.pool, outbox.channel))[0];
    const first = await holder();
    expect(first).toBeTypeOf('number');
    await db.pool.query('SELECT pg_terminate_backend($1)', [first]);
    events.push(`${Date.now() - started} ms backend ${String(first)} terminated`);
    await waitUntil(
      async () => {
        const now = await holder();
        return now !== undefined && now !== first;
      },
      15_000,
      async () => {
        const locks = await db.pool.query<{ pid: number; mode: string; granted: boolean }>(
          `SELECT pid, mode, granted FROM pg_locks WHERE locktype = 'advisory' AND classid = 1920168034`,
        );
        return `relay events: ${events.join('; ')}; advisory locks: ${JSON.stringify(locks.rows)}`;
      },
    );
    await inTransaction((tx) => outbox.enqueue(tx, { topic: 't', key: 'k', payload: 'after the cut' }));
    await waitUntil(() => hook.received.length === 1, 10_000);
  });
});
