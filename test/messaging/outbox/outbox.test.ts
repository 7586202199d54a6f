/**
 * The outbox and its relay on the real PostgreSQL, publishing to a real HTTP webhook receiver: rollback,
 * commit-visibility ordering, per-key order with two relays, poison messages, leases, shutdown, reaping,
 * status and metrics.
 */
import { metrics } from '@opentelemetry/api';
import type pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../../src/core/clock.js';
import { createWebhookPublisher } from '../../../src/messaging/transports/webhook.js';
import {
  createOutbox,
  createRelay,
  derivedMessageId,
  OUTBOX_INSTRUMENTS,
  type OutboxEvent,
  type OutboxPublisher,
  type Relay,
} from '../../../src/messaging/outbox/index.js';
import { createTestSchema, postgresAvailable, type TestSchema } from '../../support/postgres-schema.js';
import {
  RecordingMeter,
  runUntil,
  startWebhookReceiver,
  untilVisible,
  waitUntil,
  WEBHOOK_SECRET,
  type WebhookReceiver,
} from '../../support/outbox.js';
import { telemetry } from '../../support/telemetry.js';

const available = await postgresAvailable();

describe.runIf(available)('outbox on PostgreSQL', () => {
  let db: TestSchema;
  let hook: WebhookReceiver;
  const relays: Relay[] = [];

  beforeAll(async () => {
    db = await createTestSchema('rs_outbox', 12);
    hook = await startWebhookReceiver();
  });

  afterEach(async () => {
    await Promise.all(relays.splice(0).map((relay) => relay.stop()));
    await db.pool.query(`TRUNCATE "${db.schema}".outbox`);
    hook.received.length = 0;
    hook.respond = () => 200;
  });

  afterAll(async () => {
    await hook.close();
    await db.drop();
  });

  async function inTransaction<R>(fn: (tx: pg.PoolClient) => Promise<R>, commit = true): Promise<R> {
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      const result = await fn(client);
      await client.query(commit ? 'COMMIT' : 'ROLLBACK');
      return result;
    } finally {
      client.release();
    }
  }

  function relayFor(options: Partial<Parameters<typeof createRelay>[0]> = {}): Relay {
    const relay = createRelay({
      pool: db.pool,
      outbox: createOutbox({ schema: db.schema, ...(options.clock === undefined ? {} : { clock: options.clock }) }),
      publisher: createWebhookPublisher({ url: hook.url, secret: WEBHOOK_SECRET }),
      pollIntervalMs: 50,
      ...options,
    });
    relays.push(relay);
    return relay;
  }

  const bodies = (): string[] => hook.received.map((r) => r.body);

  it('validates options and messages with TypeErrors naming them', async () => {
    expect(() => createOutbox({ schema: 'bad-name' })).toThrow(/"schema"/);
    expect(() => createOutbox({ latencyWindowMs: 0 })).toThrow(/"latencyWindowMs"/);
    const outbox = createOutbox({ schema: db.schema });
    const publisher = createWebhookPublisher({ url: hook.url, secret: WEBHOOK_SECRET });
    expect(() => createRelay({ pool: db.pool, outbox, publisher, leaseMs: 1_000, publishTimeoutMs: 1_000 })).toThrow(/"leaseMs"/);
    expect(() => createRelay({ pool: db.pool, outbox, publisher, batchSize: 0 })).toThrow(/"batchSize"/);
    expect(() => createRelay({ pool: db.pool, outbox, publisher, listen: 'postgres://direct' as unknown as false })).toThrow(/"listen"/);
    expect(() => createWebhookPublisher({ url: 'ftp://x', secret: WEBHOOK_SECRET })).toThrow(/"url"/);
    expect(() => createWebhookPublisher({ url: hook.url, secret: 'short' })).toThrow(/"secret"/);
    await expect(outbox.enqueue(db.pool, { topic: '', key: 'k', payload: 'x' })).rejects.toThrow(/"topic"/);
    await expect(outbox.enqueue(db.pool, { topic: 't', key: 'k', payload: 'x' }, { causationId: 'm', index: -1 })).rejects.toThrow(/"index"/);
  });

  it('keeps its SQL off the public interface: the relay takes only an outbox createOutbox made, and publishes through it', async () => {
    const outbox = createOutbox({ schema: db.schema });
    expect(Object.keys(outbox).sort()).toEqual(['channel', 'clock', 'deadLetters', 'enqueue', 'reap', 'redrive', 'schema', 'status']);
    expect('statements' in outbox).toBe(false);
    const publisher = createWebhookPublisher({ url: hook.url, secret: WEBHOOK_SECRET });
    // A look-alike with every public member is not an outbox the relay can run: it has no statements.
    expect(() => createRelay({ pool: db.pool, outbox: { ...outbox }, publisher })).toThrow(/"outbox" must come from createOutbox/);
    await inTransaction((tx) => outbox.enqueue(tx, { topic: 'orders', key: 'o-1', payload: 'sealed' }));
    await untilVisible(db.pool, db.schema);
    expect(await relayFor({ outbox }).runOnce()).toBe(1);
    expect(bodies()).toEqual(['sealed']);
  });

  it('derives version-5 ids per (consumer, incoming id, index), and writing one twice keeps one row', async () => {
    const id = derivedMessageId('billing', 'in-1', 0);
    expect(id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    expect(derivedMessageId('billing', 'in-1', 0)).toBe(id);
    expect(new Set([id, derivedMessageId('billing', 'in-1', 1), derivedMessageId('shipping', 'in-1', 0), derivedMessageId('billing', 'in-2', 0)]).size).toBe(4);

    const outbox = createOutbox({ schema: db.schema });
    const first = await inTransaction((tx) => outbox.enqueue(tx, { topic: 't', key: 'k', payload: 'a' }, { consumer: 'billing', causationId: 'in-1', index: 0 }));
    const again = await inTransaction((tx) => outbox.enqueue(tx, { topic: 't', key: 'k', payload: 'a' }, { consumer: 'billing', causationId: 'in-1', index: 0 }));
    expect(first).toBe(id);
    expect(again).toBe(id);
    expect((await outbox.status(db.pool)).pending).toBe(1);
  });

  it('publishes nothing from a rolled-back transaction; the committed message goes out signed, with its id as Idempotency-Key', async () => {
    const outbox = createOutbox({ schema: db.schema });
    await inTransaction((tx) => outbox.enqueue(tx, { topic: 't', key: 'k', payload: 'rolled back' }), false);
    const id = await inTransaction((tx) => outbox.enqueue(tx, { topic: 't', key: 'k', payload: '{"ok":true}', headers: { 'X-Tenant': 'acme' } }));
    const relay = relayFor();
    await runUntil(relay, async () => (await outbox.status(db.pool)).pending === 0);
    expect(bodies()).toEqual(['{"ok":true}']);
    const [request] = hook.received;
    expect(request?.idempotencyKey).toBe(id);
    expect(request?.id).toBe(id);
    expect(request?.signed).toBe(true);
    expect(request?.headers['x-tenant']).toBe('acme');
    expect(await relay.runOnce()).toBe(0);
  });

  it('never publishes a later commit of a key before an earlier-started transaction of that key commits', async () => {
    const outbox = createOutbox({ schema: db.schema });
    const t1 = await db.pool.connect();
    try {
      await t1.query('BEGIN');
      await outbox.enqueue(t1, { topic: 't', key: 'same', payload: 'seq 1' });
      // T2 takes a higher seq and commits while T1 stays open.
      await inTransaction((tx) => outbox.enqueue(tx, { topic: 't', key: 'same', payload: 'seq 2' }));
      await inTransaction((tx) => outbox.enqueue(tx, { topic: 't', key: 'other', payload: 'other key' }));
      const relay = relayFor();
      // T1's xid holds the snapshot xmin down: nothing at or above it is eligible yet.
      expect(await relay.runOnce()).toBe(0);
      expect(bodies()).toEqual([]);
      await t1.query('COMMIT');
      await runUntil(relay, () => hook.received.length === 3);
    } finally {
      t1.release();
    }
    const order = bodies().filter((b) => b.startsWith('seq'));
    expect(order).toEqual(['seq 1', 'seq 2']);
    expect(bodies()).toContain('other key');
  });

  it('skips nothing when a transaction that took a lower seq commits after a higher one was eligible', async () => {
    const outbox = createOutbox({ schema: db.schema });
    const relay = relayFor();
    const t1 = await db.pool.connect();
    try {
      await t1.query('BEGIN');
      await outbox.enqueue(t1, { topic: 't', key: 'a', payload: 'late low seq' });
      await inTransaction((tx) => outbox.enqueue(tx, { topic: 't', key: 'b', payload: 'early high seq' }));
      await relay.runOnce();
      await t1.query('COMMIT');
    } finally {
      t1.release();
    }
    await runUntil(relay, () => hook.received.length >= 2);
    expect(await relay.runOnce()).toBe(0);
    expect(bodies().sort()).toEqual(['early high seq', 'late low seq']);
  });

  it('keeps per-key order under concurrent enqueues with two relays running (one with two loops), each message once', async () => {
    const outbox = createOutbox({ schema: db.schema });
    const keys = 12;
    const perKey = 25;
    // Random receiver latency interleaves the relays' publishes.
    hook.respond = () => new Promise((resolve) => setTimeout(() => resolve(200), Math.random() * 3));
    const published = [0, 0];
    const a = relayFor({ batchSize: 8, perKeyLimit: 3, concurrency: 2, onEvent: (e) => void (e.type === 'published' && published[0]!++) });
    const b = relayFor({ batchSize: 8, perKeyLimit: 3, onEvent: (e) => void (e.type === 'published' && published[1]!++) });
    a.start();
    b.start();
    await Promise.all(
      Array.from({ length: keys }, async (_, k) => {
        for (let n = 0; n < perKey; n++) {
          await inTransaction((tx) => outbox.enqueue(tx, { topic: 't', key: `key-${k}`, payload: JSON.stringify({ k, n }) }));
        }
      }),
    );
    await waitUntil(async () => (await outbox.status(db.pool)).pending === 0, 30_000);
    const seen = new Map<number, number[]>();
    for (const body of bodies()) {
      const { k, n } = JSON.parse(body) as { k: number; n: number };
      seen.set(k, [...(seen.get(k) ?? []), n]);
    }
    for (let k = 0; k < keys; k++) expect(seen.get(k)).toEqual(Array.from({ length: perKey }, (_, n) => n));
    expect(hook.received.length).toBe(keys * perKey);
    expect(published[0]).toBeGreaterThan(0);
    expect(published[1]).toBeGreaterThan(0);
  });

  it('dead-letters a 4xx at once and a repeated 5xx after maxAttempts with backoff, without blocking other keys', async () => {
    const clock = new ManualClock(1_000_000);
    const outbox = createOutbox({ schema: db.schema, clock });
    const events: OutboxEvent[] = [];
    const relay = relayFor({ clock, maxAttempts: 3, backoffBaseMs: 1_000, backoffMaxMs: 10_000, onEvent: (e) => void events.push(e) });
    hook.respond = (r) => (r.body === 'rejected' ? 422 : r.body === 'flaky' ? 503 : 200);
    const rejected = await inTransaction((tx) => outbox.enqueue(tx, { topic: 't', key: 'p', payload: 'rejected' }));
    await inTransaction((tx) => outbox.enqueue(tx, { topic: 't', key: 'p', payload: 'after rejected' }));
    const flaky = await inTransaction((tx) => outbox.enqueue(tx, { topic: 't', key: 'q', payload: 'flaky' }));
    await inTransaction((tx) => outbox.enqueue(tx, { topic: 't', key: 'q', payload: 'after flaky' }));
    await inTransaction((tx) => outbox.enqueue(tx, { topic: 't', key: 'r', payload: 'healthy' }));

    await runUntil(relay, () => bodies().includes('after rejected') && bodies().includes('healthy'));
    // The flaky head blocks its own key only, and waits out its backoff: 1 s, then 2 s.
    expect(bodies().filter((b) => b === 'flaky')).toHaveLength(1);
    expect(await relay.runOnce()).toBe(0);
    clock.advance(1_000);
    // The head and the key's next row are claimed; the head fails, so the next row is released unpublished.
    expect(await relay.runOnce()).toBe(2);
    clock.advance(1_999);
    expect(await relay.runOnce()).toBe(0);
    clock.advance(1);
    await runUntil(relay, () => bodies().includes('after flaky'));
    expect(bodies().filter((b) => b === 'flaky')).toHaveLength(3);

    const dead = await outbox.deadLetters(db.pool, 10);
    expect(dead.map((d) => [d.id, d.attempts])).toEqual([
      [rejected, 1],
      [flaky, 3],
    ]);
    expect(dead[0]?.error).toMatch(/answered 422/);
    expect(dead[1]?.error).toMatch(/answered 503/);
    expect(events.filter((e) => e.type === 'retry').map((e) => e.attempt)).toEqual([1, 2]);
    expect(events.filter((e) => e.type === 'dead_lettered').map((e) => e.id)).toEqual([rejected, flaky]);
    const status = await outbox.status(db.pool);
    expect([status.pending, status.deadLetters]).toEqual([0, 2]);

    // A redriven dead letter goes out again with its original id.
    hook.respond = () => 200;
    expect(await outbox.redrive(db.pool, flaky)).toBe(true);
    expect(await outbox.redrive(db.pool, flaky)).toBe(false);
    await runUntil(relay, () => hook.received.filter((r) => r.id === flaky).length === 4);
    expect((await outbox.status(db.pool)).deadLetters).toBe(1);
  });

  it('takes over the rows of a relay that stopped mid-batch once its lease expired; the stale relay cannot mark them', async () => {
    const clock = new ManualClock(5_000_000);
    const outbox = createOutbox({ schema: db.schema, clock });
    for (let i = 0; i < 3; i++) await inTransaction((tx) => outbox.enqueue(tx, { topic: 't', key: `k${i}`, payload: `m${i}` }));
    let unblock!: () => void;
    const gate = new Promise<void>((resolve) => {
      unblock = resolve;
    });
    const stuck: OutboxPublisher = { publish: () => gate, close: () => Promise.resolve() };
    const stale = relayFor({ clock, publisher: stuck, leaseMs: 60_000, publishTimeoutMs: 30_000 });
    await untilVisible(db.pool, db.schema);
    const staleRun = stale.runOnce();
    const fresh = relayFor({ clock, leaseMs: 60_000, publishTimeoutMs: 30_000 });
    await waitUntil(async () => (await outbox.status(db.pool)).inFlight === 3);
    expect(await fresh.runOnce()).toBe(0);
    clock.advance(60_000);
    expect(await fresh.runOnce()).toBe(3);
    expect(bodies().sort()).toEqual(['m0', 'm1', 'm2']);
    unblock();
    expect(await staleRun).toBe(3);
    const rows = await db.pool.query<{ attempts: number; status: number }>(`SELECT attempts, status FROM "${db.schema}".outbox`);
    expect(rows.rows.map((r) => [r.status, r.attempts])).toEqual([
      [1, 2],
      [1, 2],
      [1, 2],
    ]);
  });

  it('never starts a publish that could outlast its lease: the rest of the key is released for the next claim', async () => {
    const clock = new ManualClock(7_000_000);
    const outbox = createOutbox({ schema: db.schema, clock });
    for (let n = 0; n < 3; n++) await inTransaction((tx) => outbox.enqueue(tx, { topic: 't', key: 'slow-key', payload: `n${n}` }));
    const published: string[] = [];
    const slowBroker: OutboxPublisher = {
      publish: (message) => {
        published.push(new TextDecoder().decode(message.payload));
        clock.advance(15_000);
        return Promise.resolve();
      },
      close: () => Promise.resolve(),
    };
    const events: OutboxEvent[] = [];
    const relay = relayFor({ clock, publisher: slowBroker, leaseMs: 30_000, publishTimeoutMs: 10_000, onEvent: (e) => void events.push(e) });
    await untilVisible(db.pool, db.schema);
    expect(await relay.runOnce()).toBe(3);
    expect(published).toEqual(['n0', 'n1']);
    expect(events.map((e) => e.type)).toEqual(['published', 'published', 'released']);
    expect(await relay.runOnce()).toBe(1);
    expect(published).toEqual(['n0', 'n1', 'n2']);
  });

  it('stops gracefully: the publish in progress finishes and is marked, unpublished rows are released at once', async () => {
    const clock = new ManualClock(9_000_000);
    const outbox = createOutbox({ schema: db.schema, clock });
    for (let n = 0; n < 4; n++) await inTransaction((tx) => outbox.enqueue(tx, { topic: 't', key: 'one-key', payload: `n${n}` }));
    let started!: () => void;
    const publishing = new Promise<void>((resolve) => {
      started = resolve;
    });
    let finish!: () => void;
    const slow: OutboxPublisher = {
      publish: () => {
        started();
        return new Promise<void>((resolve) => {
          finish = resolve;
        });
      },
      close: () => Promise.resolve(),
    };
    const relay = relayFor({ clock, publisher: slow, perKeyLimit: 4 });
    relay.start();
    await publishing;
    const stopped = relay.stop();
    finish();
    await stopped;
    const status = await outbox.status(db.pool);
    expect([status.pending, status.inFlight, status.sent]).toEqual([3, 0, 1]);
    // Released rows are claimable at once, without waiting out a lease, and their attempt was uncounted.
    const next = relayFor({ clock });
    // The first claim may have seen fewer than four rows (another file's open transaction): wait for all.
    await untilVisible(db.pool, db.schema);
    expect(await next.runOnce()).toBe(3);
    expect(bodies()).toEqual(['n1', 'n2', 'n3']);
    const attempts = await db.pool.query<{ attempts: number }>(`SELECT attempts FROM "${db.schema}".outbox ORDER BY seq`);
    expect(attempts.rows.map((r) => r.attempts)).toEqual([1, 1, 1, 1]);
  });

  it('wakes on NOTIFY at commit instead of waiting for the poll interval', async () => {
    const outbox = createOutbox({ schema: db.schema });
    // In order: the relay falling asleep waiting for rows, each wake with its cause, and each publish.
    const happened: string[] = [];
    const relay = relayFor({
      pollIntervalMs: 60_000,
      onEvent: (event) => {
        if (event.type === 'waiting') happened.push('waiting');
        if (event.type === 'woken') happened.push(`woken by ${event.cause ?? '?'}`);
        if (event.type === 'published') happened.push('published');
      },
    });
    relay.start();
    // Let the relay fall asleep: LISTEN active, the waiting lock held, nothing left to claim.
    await waitUntil(() => happened.includes('waiting'));
    expect(happened).toEqual(['waiting']);
    await inTransaction((tx) => outbox.enqueue(tx, { topic: 't', key: 'k', payload: 'wake' }));
    // The relay reports `published` once the webhook has answered, after the receiver has seen it.
    await waitUntil(() => happened.includes('published'), 20_000);
    expect(hook.received.map((r) => r.body)).toEqual(['wake']);
    // The enqueue's NOTIFY ended the wait and the row was published after it; no poll interval ended first.
    expect(happened.slice(0, happened.indexOf('published') + 1)).toEqual(['waiting', 'woken by notification', 'published']);
  });

  it('cleans up only sent rows older than retention, in bounded batches', async () => {
    const clock = new ManualClock(20_000_000);
    const outbox = createOutbox({ schema: db.schema, clock });
    const relay = relayFor({ clock, maxAttempts: 1 });
    hook.respond = (r) => (r.body === 'dead' ? 400 : 200);
    for (let n = 0; n < 7; n++) await inTransaction((tx) => outbox.enqueue(tx, { topic: 't', key: `k${n}`, payload: `sent ${n}` }));
    await inTransaction((tx) => outbox.enqueue(tx, { topic: 't', key: 'd', payload: 'dead' }));
    await runUntil(relay, async () => (await outbox.status(db.pool)).pending === 0);
    await inTransaction((tx) => outbox.enqueue(tx, { topic: 't', key: 'p', payload: 'pending' }));
    expect(await outbox.reap(db.pool, { retentionMs: 60_000 })).toBe(0);
    clock.advance(60_001);
    expect(await outbox.reap(db.pool, { retentionMs: 60_000, batchSize: 3, maxBatches: 2 })).toBe(6);
    expect(await outbox.reap(db.pool, { retentionMs: 60_000, batchSize: 3 })).toBe(1);
    const status = await outbox.status(db.pool);
    expect([status.sent, status.pending, status.deadLetters]).toEqual([0, 1, 1]);
    await expect(outbox.reap(db.pool, { retentionMs: 0 })).rejects.toThrow(/"retentionMs"/);
  });

  it('reports pending count, oldest-pending age, dead letters and publish latency to the meter and status()', async () => {
    const clock = new ManualClock(30_000_000);
    const outbox = createOutbox({ schema: db.schema, clock });
    const recording = new RecordingMeter();
    const relay = relayFor({ clock, meter: recording.meter, maxAttempts: 1 });
    hook.respond = (r) => (r.body === 'dead' ? 400 : 200);
    await inTransaction((tx) => outbox.enqueue(tx, { topic: 'orders', key: 'a', payload: 'sent' }));
    await inTransaction((tx) => outbox.enqueue(tx, { topic: 'orders', key: 'b', payload: 'dead' }));
    clock.advance(40);
    await runUntil(relay, async () => (await outbox.status(db.pool)).pending === 0);
    await inTransaction((tx) => outbox.enqueue(tx, { topic: 'orders', key: 'c', payload: 'waiting' }));
    clock.advance(2_500);

    expect(await outbox.status(db.pool)).toEqual({
      pending: 1,
      oldestPendingAgeMs: 2_500,
      inFlight: 0,
      deadLetters: 1,
      sent: 1,
      retrying: 0,
      oldestPendingError: undefined,
      latencyP50Ms: 40,
      latencyP99Ms: 40,
    });
    const I = OUTBOX_INSTRUMENTS;
    expect(recording.sum(I.messages, { outcome: 'published', topic: 'orders' })).toBe(1);
    expect(recording.sum(I.messages, { outcome: 'dead_lettered', topic: 'orders' })).toBe(1);
    expect(recording.sum(I.messages)).toBe(2);
    // Durations and ages in seconds, as the receiver's.
    expect(recording.values(I.deliveryDuration, { topic: 'orders' })).toEqual([0.04]);
    expect(recording.values(I.publishDuration, { outcome: 'published' })).toEqual([0]);
    expect(recording.values(I.publishDuration, { outcome: 'dead_lettered' })).toEqual([0]);
    expect([I.messages, I.publishDuration, I.deliveryDuration, I.pending, I.oldestPendingAge, I.deadLetters].map((name) => recording.units.get(name))).toEqual([
      '{message}',
      's',
      's',
      '{message}',
      's',
      '{message}',
    ]);

    // The gauges are observed while a relay runs, and unregistered when it stops.
    let fail!: (error: Error) => void;
    const hanging = new Promise<void>((_, reject) => {
      fail = reject;
    });
    const gauges = relayFor({ clock, meter: recording.meter, publisher: { publish: () => hanging, close: () => Promise.resolve() } });
    gauges.start();
    await waitUntil(async () => (await outbox.status(db.pool)).inFlight === 1);
    const observed = await recording.collect();
    expect(Object.fromEntries(observed)).toEqual({
      [OUTBOX_INSTRUMENTS.pending]: 1,
      [OUTBOX_INSTRUMENTS.oldestPendingAge]: 2.5,
      [OUTBOX_INSTRUMENTS.deadLetters]: 1,
    });
    fail(new Error('broker gone'));
    await gauges.stop();
    expect(recording.callbacks.size).toBe(0);
    expect(recording.sum(OUTBOX_INSTRUMENTS.messages, { outcome: 'retry', topic: 'orders' })).toBe(1);
  });

  it('records to a global meter provider registered while it runs, from its next claim on, gauges included', async () => {
    const t = telemetry();
    const outbox = createOutbox({ schema: db.schema });
    const relay = relayFor({ outbox });
    relay.start();
    await inTransaction((tx) => outbox.enqueue(tx, { topic: 'orders', key: 'a', payload: 'before' }));
    await waitUntil(() => hook.received.length === 1);
    metrics.setGlobalMeterProvider(t.meterProvider);
    try {
      await inTransaction((tx) => outbox.enqueue(tx, { topic: 'orders', key: 'b', payload: 'after' }));
      await waitUntil(async () => (await outbox.status(db.pool)).pending === 0);
      const I = OUTBOX_INSTRUMENTS;
      expect(await t.sum(I.messages, { outcome: 'published', topic: 'orders' })).toBe(1);
      expect(await t.count(I.deliveryDuration, { topic: 'orders' })).toBe(1);
      const observed = await t.metrics();
      expect([I.pending, I.oldestPendingAge, I.deadLetters].map((name) => observed.has(name))).toEqual([true, true, true]);
      expect(await t.sum(I.pending)).toBe(0);
    } finally {
      await relay.stop();
      metrics.disable();
      await t.shutdown();
    }
  });
});
