/**
 * The inbox on the real PostgreSQL: the shared contract, plus what only a multi-connection database shows
 * (a handler stuck in a query, concurrent cleanup) and the metrics hooks.
 */
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../../src/core/clock.js';
import { createInbox, createPostgresInboxStore, HandlerTimeoutError, INBOX_INSTRUMENTS, type InboxEvent } from '../../../src/messaging/inbox/index.js';
import { postgresAvailable } from '../../support/postgres-schema.js';
import { POSTGRES_URL } from '../../support/services.js';
import { inboxContract } from './contract.js';
import { inboxBatchContract } from './batch-contract.js';
import { runBatchChild } from './batch-child.js';
import { createEffectsSchema, type EffectsSchema } from '../../support/messaging.js';
import { telemetry } from '../../support/telemetry.js';

const available = await postgresAvailable();

describe.runIf(available)('PostgreSQL inbox', () => {
  let db: EffectsSchema;

  beforeAll(async () => {
    db = await createEffectsSchema('rs_inbox_pg', 12);
  });

  afterAll(async () => {
    await db.drop();
  });

  inboxContract('postgres', async () => {
    await db.pool.query(`TRUNCATE "${db.schema}".inbox_processed, "${db.schema}".inbox_attempts, "${db.schema}".effects`);
    return { store: createPostgresInboxStore({ pool: db.pool, schema: db.schema }), write: db.write, count: db.count };
  });

  inboxBatchContract('postgres', async () => {
    await db.pool.query(`TRUNCATE "${db.schema}".inbox_processed, "${db.schema}".inbox_attempts, "${db.schema}".effects`);
    return {
      store: createPostgresInboxStore({ pool: db.pool, schema: db.schema }),
      write: db.write,
      count: db.count,
      crash: (consumer, ids, crashAt) =>
        runBatchChild({ STORE: 'postgres', SCHEMA: db.schema, CONSUMER: consumer, IDS: JSON.stringify(ids), CRASH_AT: crashAt, MAX_ATTEMPTS: '2' }),
    };
  });

  it('times out a handler stuck in a query at once, by dropping its connection, and persists nothing', async () => {
    const inbox = createInbox({ store: createPostgresInboxStore({ pool: db.pool, schema: db.schema }), handlerTimeoutMs: 200 });
    const id = randomUUID();
    const started = Date.now();
    const outcome = await inbox.handle({ consumer: 'slow', messageId: id }, async (tx) => {
      await db.write(tx, 'slow', id);
      await tx.query('SELECT pg_sleep(10)');
    });
    expect(Date.now() - started).toBeLessThan(3_000);
    expect(outcome.status === 'retry' && outcome.error).toBeInstanceOf(HandlerTimeoutError);
    expect(await db.count('slow', id)).toBe(0);
    expect(await inbox.handle({ consumer: 'slow', messageId: id }, (tx) => db.write(tx, 'slow', id))).toEqual({ status: 'processed', attempts: 2 });
  });

  it('lets several instances clean up at once without deleting a mark twice or blocking a consumer', async () => {
    const clock = new ManualClock(1_000_000);
    const inbox = createInbox({ store: createPostgresInboxStore({ pool: db.pool, schema: db.schema }), clock, retentionMs: 2_000, retryHorizonMs: 1_000 });
    const ids = Array.from({ length: 60 }, () => randomUUID());
    for (const id of ids) await inbox.handle({ consumer: 'gc', messageId: id }, () => Promise.resolve());
    clock.advance(5_000);
    const deleted = await Promise.all([inbox.reap(25), inbox.reap(25), inbox.reap(25), inbox.reap(25)]);
    expect(deleted.every((n) => n <= 25)).toBe(true);
    let total = deleted.reduce((a, b) => a + b, 0);
    while (total < 60) {
      const more = await inbox.reap(25);
      expect(more).toBeGreaterThan(0);
      total += more;
    }
    expect(total).toBe(60);
    expect(await inbox.reap(25)).toBe(0);
  });

  // The second plan is a nested-loop semi join with the batch query on the inner side, rescanned once per
  // outer row: a bound that rested on the subquery being evaluated once breaks there.
  it.each([
    ['the planner\'s own plan', ''],
    ['a plan that rescans the batch query', '-c enable_hashjoin=off -c enable_mergejoin=off -c enable_hashagg=off -c enable_material=off -c enable_sort=off'],
  ])('deletes at most limit marks and limit attempts per cleanup call, with calls racing (%s)', async (_plan, options) => {
    await db.pool.query(`TRUNCATE "${db.schema}".inbox_processed, "${db.schema}".inbox_attempts`);
    const clock = new ManualClock(3_000_000);
    const settings = { clock, retentionMs: 2_000, retryHorizonMs: 1_000 };
    const writer = createInbox({ store: createPostgresInboxStore({ pool: db.pool, schema: db.schema }), ...settings });
    for (let i = 0; i < 150; i += 1) await writer.handle({ consumer: 'bound', messageId: `done-${i}` }, () => Promise.resolve());
    for (let i = 0; i < 90; i += 1) {
      const outcome = await writer.handle({ consumer: 'bound', messageId: `failing-${i}` }, () => Promise.reject(new Error('not yet')));
      expect(outcome.status).toBe('retry');
    }
    await db.pool.query(`ANALYZE "${db.schema}".inbox_processed, "${db.schema}".inbox_attempts`);
    clock.advance(5_000);
    const pool = new pg.Pool({ connectionString: POSTGRES_URL, max: 6, options });
    try {
      const inbox = createInbox({ store: createPostgresInboxStore({ pool, schema: db.schema }), ...settings });
      const limit = 3;
      const counts: number[] = [];
      for (let round = 0; round < 500 && counts.reduce((a, b) => a + b, 0) < 240; round += 1) {
        counts.push(...(await Promise.all(Array.from({ length: 6 }, () => inbox.reap(limit)))));
      }
      expect(counts.filter((n) => n > 2 * limit)).toEqual([]);
      expect(counts.reduce((a, b) => a + b, 0)).toBe(240);
      expect(await inbox.reap(limit)).toBe(0);
    } finally {
      await pool.end();
    }
  });

  it('skips marks another transaction holds instead of waiting on them', async () => {
    const clock = new ManualClock(2_000_000);
    const inbox = createInbox({ store: createPostgresInboxStore({ pool: db.pool, schema: db.schema }), clock, retentionMs: 2_000, retryHorizonMs: 1_000 });
    const held = randomUUID();
    const free = randomUUID();
    for (const id of [held, free]) await inbox.handle({ consumer: 'lock', messageId: id }, () => Promise.resolve());
    clock.advance(5_000);
    const holder = await db.pool.connect();
    try {
      await holder.query('BEGIN');
      await holder.query(`SELECT 1 FROM "${db.schema}".inbox_processed WHERE consumer = 'lock' AND message_id = $1 FOR UPDATE`, [held]);
      expect(await inbox.reap(10)).toBe(1);
      await holder.query('ROLLBACK');
    } finally {
      holder.release();
    }
    expect(await inbox.reap(10)).toBe(1);
  });

  it('reports processed, duplicates, retries and dead letters to the meter and onEvent', async () => {
    const t = telemetry();
    const events: InboxEvent[] = [];
    const inbox = createInbox({
      store: createPostgresInboxStore({ pool: db.pool, schema: db.schema }),
      maxAttempts: 2,
      meter: t.meterProvider.getMeter('retrysafe'),
      onEvent: (event) => {
        events.push(event);
        throw new Error('a broken hook must not fail the delivery');
      },
    });
    const ok = randomUUID();
    const bad = randomUUID();
    expect((await inbox.handle({ consumer: 'm', messageId: ok }, () => Promise.resolve())).status).toBe('processed');
    expect((await inbox.handle({ consumer: 'm', messageId: ok }, () => Promise.resolve())).status).toBe('duplicate');
    await inbox.handle({ consumer: 'm', messageId: bad }, () => Promise.reject(new Error('x')));
    await inbox.handle({ consumer: 'm', messageId: bad }, () => Promise.reject(new Error('x')));
    await expect(inbox.handle({ consumer: 'm', messageId: undefined }, () => Promise.resolve())).rejects.toThrow();
    const byOutcome = async (outcome: string): Promise<[number, number]> => [
      await t.sum(INBOX_INSTRUMENTS.messages, { outcome, consumer: 'm' }),
      await t.count(INBOX_INSTRUMENTS.processDuration, { outcome, consumer: 'm' }),
    ];
    expect(await byOutcome('processed')).toEqual([1, 1]);
    expect(await byOutcome('duplicate')).toEqual([1, 1]);
    expect(await byOutcome('retry')).toEqual([1, 1]);
    expect(await byOutcome('dead_lettered')).toEqual([1, 1]);
    expect(await byOutcome('rejected')).toEqual([1, 0]);
    expect(await t.sum(INBOX_INSTRUMENTS.messages)).toBe(5);
    await t.shutdown();
    expect(events.map((e) => [e.type, e.messageId, e.attempts])).toEqual([
      ['processed', ok, 1],
      ['duplicate', ok, undefined],
      ['retry', bad, 1],
      ['dead_lettered', bad, 2],
      ['rejected', undefined, undefined],
    ]);
  });

  it('validates its options once, naming the option', () => {
    const store = createPostgresInboxStore({ pool: db.pool, schema: db.schema });
    expect(() => createInbox({ store, retentionMs: 1_000, retryHorizonMs: 1_000 })).toThrow(/"retentionMs" \(1000\) must exceed "retryHorizonMs" \(1000\)/);
    expect(() => createInbox({ store, maxAttempts: 0 })).toThrow(/"maxAttempts".*got 0/);
    expect(() => createInbox({ store, handlerTimeoutMs: 1.5 })).toThrow(/"handlerTimeoutMs"/);
    expect(() => createInbox({ store: {} as never })).toThrow(/"store"/);
    expect(() => createPostgresInboxStore({ pool: db.pool, schema: 'bad name' })).toThrow(/"schema"/);
    expect(Object.isFrozen(createInbox({ store }).config)).toBe(true);
  });
});
