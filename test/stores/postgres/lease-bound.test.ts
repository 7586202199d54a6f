/**
 * No transaction outlives its lease (PostgreSQL transactional mode): an HTTP handler that writes a row and
 * then hangs far past its lease is answered 409 lease-lost when the lease ends, its transaction is rolled
 * back and its backend ended at that moment, so the server's snapshot xmin moves on (the outbox relay keeps
 * publishing rows committed meanwhile) and the pool holds only healthy connections afterwards.
 */
import express from 'express';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createReceiver } from '../../../src/receiver.js';
import { createOutbox, createRelay } from '../../../src/messaging/outbox/index.js';
import { createWebhookPublisher } from '../../../src/messaging/transports/webhook.js';
import { createPostgresStore } from '../../../src/stores/postgres/index.js';
import { expressDriver } from '../../http/express-driver.js';
import { gate } from '../../support/http.js';
import { runUntil, startWebhookReceiver, WEBHOOK_SECRET, type WebhookReceiver } from '../../support/outbox.js';
import { createTestSchema, postgresAvailable, type TestSchema } from '../../support/postgres-schema.js';

const available = await postgresAvailable();

const LEASE_MS = 1_500;
/** How long the hung handler would hold its transaction without the bound. */
const HANG_MS = 20_000;
const POOL_SIZE = 4;

describe.runIf(available)('a transaction bounded by its lease (PostgreSQL)', () => {
  let db: TestSchema;
  let hook: WebhookReceiver;

  beforeAll(async () => {
    db = await createTestSchema('rs_pglease', POOL_SIZE);
    await db.pool.query(`CREATE TABLE "${db.schema}".payments (key text NOT NULL, amount int NOT NULL)`);
    hook = await startWebhookReceiver();
  });

  afterAll(async () => {
    await hook.close();
    await db.drop();
  });

  it('answers a handler hung past its lease 409 lease-lost, rolls it back at once, and the relay keeps publishing', async () => {
    const store = createPostgresStore({ pool: db.pool, schema: db.schema });
    const receiver = createReceiver({ store, transactional: true, leaseMs: LEASE_MS, maxExecutionMs: LEASE_MS });
    const hang = gate();
    const hangTimer = setTimeout(() => hang.open(), HANG_MS);
    let calls = 0;
    let inserted!: () => void;
    const firstInsert = new Promise<void>((resolve) => (inserted = resolve));
    let lateWrite: unknown = 'not attempted';
    const client = await expressDriver('express 5', express).start({ receiver }, async (input) => {
      calls++;
      const tx = input.idempotency?.tx as pg.PoolClient;
      await tx.query(`INSERT INTO "${db.schema}".payments (key, amount) VALUES ($1, 100)`, [input.idempotency?.key]);
      if (calls === 1) {
        inserted();
        await hang.promise;
        lateWrite = await tx.query(`INSERT INTO "${db.schema}".payments (key, amount) VALUES ('late', 1)`).then(
          () => 'written',
          (error: unknown) => error,
        );
        // Its request was answered long ago: a bare status, which the framework drops, not a second reply.
        return { status: 201 };
      }
      return { status: 201, headers: { 'content-type': 'application/json' }, body: '{"paid":true}' };
    });
    const outbox = createOutbox({ schema: db.schema });
    const relay = createRelay({ pool: db.pool, outbox, publisher: createWebhookPublisher({ url: hook.url, secret: WEBHOOK_SECRET }), pollIntervalMs: 50 });
    try {
      const pay = { method: 'POST', path: '/payments', headers: { 'idempotency-key': 'hung-1', 'content-type': 'application/json' }, body: '{}' };
      const started = performance.now();
      const late = client.request(pay);
      await firstInsert;
      // Committed after the hung transaction began, so the relay may publish it only once that transaction ends.
      const conn = await db.pool.connect();
      try {
        await conn.query('BEGIN');
        await outbox.enqueue(conn, { topic: 'payments', key: 'p-1', payload: 'enqueued while a handler hangs' });
        await conn.query('COMMIT');
      } finally {
        conn.release();
      }
      await runUntil(relay, () => hook.received.length === 1, LEASE_MS + 3_000);
      const published = performance.now() - started;

      const answer = await late;
      expect(answer.status).toBe(409);
      const problem = JSON.parse(answer.body.toString('utf8')) as { type?: string };
      expect(problem.type).toMatch(/idempotency-lease-lost$/);
      expect(published).toBeGreaterThanOrEqual(LEASE_MS - 50);
      expect(published).toBeLessThan(HANG_MS / 2);
      // The hung transaction's insert was rolled back.
      const rows = await db.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${db.schema}".payments`);
      expect(rows.rows[0]?.n).toBe(0);

      // Every pooled connection answers a query: none was handed back killed or mid-transaction.
      const clients = await Promise.all(Array.from({ length: POOL_SIZE }, () => db.pool.connect()));
      try {
        for (const pooled of clients) {
          const state = await pooled.query<{ one: number; tx: string }>('SELECT 1 AS one, txid_current_if_assigned()::text AS tx');
          expect(state.rows[0]).toEqual({ one: 1, tx: null });
        }
      } finally {
        for (const pooled of clients) pooled.release();
      }

      // The retry runs once and commits; the late handler's next statement fails instead of landing anywhere.
      const retry = await client.request(pay);
      expect(retry.status).toBe(201);
      expect(calls).toBe(2);
      hang.open();
      while (lateWrite === 'not attempted') await new Promise((resolve) => setTimeout(resolve, 10));
      expect(lateWrite).toBeInstanceOf(Error);
      const after = await db.pool.query<{ key: string }>(`SELECT key FROM "${db.schema}".payments`);
      expect(after.rows).toEqual([{ key: 'hung-1' }]);
    } finally {
      clearTimeout(hangTimer);
      hang.open();
      await relay.stop();
      await client.close();
      await store.close();
    }
  }, 30_000);

  it('bounds the transaction on the server too, by the time left of the lease, and only inside it', async () => {
    const store = createPostgresStore({ pool: db.pool, schema: db.schema });
    const receiver = createReceiver({ store, transactional: true, leaseMs: LEASE_MS, maxExecutionMs: LEASE_MS });
    try {
      const inside = await receiver.run({ scope: 's', key: 'bounds-1', fingerprint: 'f'.repeat(64) }, async ({ tx }) => {
        // pg_settings gives the raw value in the setting's unit, milliseconds for both.
        const settings = await tx.query<{ name: string; setting: string }>(
          "SELECT name, setting FROM pg_settings WHERE name IN ('statement_timeout', 'idle_in_transaction_session_timeout')",
        );
        return settings.rows;
      });
      expect(inside.map((row) => row.name).sort()).toEqual(['idle_in_transaction_session_timeout', 'statement_timeout']);
      for (const { setting } of inside) {
        const ms = Number(setting);
        expect(ms).toBeGreaterThan(0);
        expect(ms).toBeLessThanOrEqual(LEASE_MS);
      }
      // SET LOCAL ended with the transaction: the pooled connections keep the server's defaults.
      const outside = await db.pool.query<{ statement: string }>("SELECT current_setting('statement_timeout') AS statement");
      expect(outside.rows[0]?.statement).toBe('0');
    } finally {
      await store.close();
    }
  });
});
