/**
 * How the relay avoids useless claims and waits on the real PostgreSQL: a notified row held back by an
 * older open transaction (snapshot xmin) is chased with short waits instead of a whole poll interval, and
 * overlapping `runOnce` calls do not re-claim while the keys they would find are this relay's own batch.
 */
import type pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createWebhookPublisher } from '../../src/messaging/brokers/webhook.js';
import { createOutbox, createRelay, type OutboxMessage, type OutboxPublisher, type Relay } from '../../src/messaging/outbox/index.js';
import { createTestSchema, postgresAvailable, type TestSchema } from '../stores/fixtures/postgres-schema.js';
import { startWebhookReceiver, untilVisible, waitUntil, WEBHOOK_SECRET, type WebhookReceiver } from './fixtures/outbox-support.js';

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
    const relay = createRelay({ pool: db.pool, outbox, publisher: createWebhookPublisher({ url: hook.url, secret: WEBHOOK_SECRET }), pollIntervalMs: 60_000 });
    relays.push(relay);
    relay.start();
    await waitUntil(async () => {
      const r = await db.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE query = $1`, [`LISTEN "${outbox.channel}"`]);
      return (r.rows[0]?.n ?? 0) > 0;
    });
    // An older transaction with an xid keeps the snapshot xmin below the row's: the NOTIFY's claim sees nothing.
    const older = await db.pool.connect();
    try {
      await older.query('BEGIN');
      await older.query('SELECT pg_current_xact_id()');
      await inTransaction((tx) => outbox.enqueue(tx, { topic: 't', key: 'k', payload: 'held back' }));
      await new Promise((resolve) => setTimeout(resolve, 15));
      expect(hook.received).toHaveLength(0);
      await older.query('COMMIT');
    } finally {
      older.release();
    }
    // The poll interval is 60 s: only the relay's doubling re-claims after the NOTIFY can publish in time.
    await waitUntil(() => hook.received.length === 1, 20_000);
    expect(hook.received[0]?.body).toBe('held back');
  });

  it('an overlapping runOnce that found only its own relay\'s leased keys waits for that batch, then claims the next rows', async () => {
    const outbox = createOutbox({ schema: db.schema });
    const held: OutboxMessage[] = [];
    const releases: (() => void)[] = [];
    const publisher: OutboxPublisher = {
      publish: (message) => {
        held.push(message);
        return new Promise<void>((resolve) => releases.push(resolve));
      },
      close: () => Promise.resolve(),
    };
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

    for (const release of releases.splice(0)) release();
    expect(await first).toBe(3);
    await waitUntil(() => held.length === 6);
    for (const release of releases.splice(0)) release();
    expect(await third).toBe(3);
    expect(held.map((m) => m.payload).map((p) => Buffer.from(p).toString())).toEqual(['a0', 'b0', 'c0', 'a1', 'b1', 'c1']);
    expect((await outbox.status(db.pool)).pending).toBe(0);
  });
});
