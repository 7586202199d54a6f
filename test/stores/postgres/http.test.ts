/**
 * The HTTP middleware on the real PostgreSQL server: the whole shared behaviour table (`test/http/scenarios.ts`)
 * through Hono, and transactional mode through Express 5, Fastify and Hono — the handler's business row and
 * the saved response commit together, the response leaves only after COMMIT, a concurrent duplicate is
 * answered 409 at once, a failure leaves nothing behind.
 */
import express from 'express';
import type pg from 'pg';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createReceiver } from '../../../src/receiver.js';
import { createPostgresStore, type PostgresStore } from '../../../src/stores/postgres/index.js';
import { gateCommits } from '../../support/commit-gate.js';
import { expressDriver } from '../../http/express-driver.js';
import { fastifyDriver } from '../../http/fastify-driver.js';
import { honoDriver } from '../../http/hono-driver.js';
import { postgresScenarioStore } from '../../http/scenario-stores.js';
import { httpScenarios } from '../../http/scenarios.js';
import { gate, type Driver, type TestClient, type TestRequest } from '../../support/http.js';
import { createTestSchema, postgresAvailable, type TestSchema } from '../../support/postgres-schema.js';

const available = await postgresAvailable();

const drivers: readonly Driver[] = [expressDriver('express 5', express), fastifyDriver, honoDriver];

// One framework is enough for the store-independent rows; Hono's in-process `app.request()` is the fastest.
if (available) httpScenarios(honoDriver, postgresScenarioStore('rs_pghttp_table'));

describe.runIf(available)('HTTP transactional mode on PostgreSQL', () => {
  let db: TestSchema;

  beforeAll(async () => {
    db = await createTestSchema('rs_pghttp');
    await db.pool.query(`CREATE TABLE "${db.schema}".payments (key text NOT NULL, amount int NOT NULL)`);
  });

  afterAll(async () => {
    await db.drop();
  });

  describe.each(drivers)('$name', (driver) => {
    let store: PostgresStore;
    let client: TestClient | undefined;
    let calls: number;
    const events: string[] = [];
    // Every gate a test made, opened in afterEach so a failed test never leaves a transaction open.
    const gates: { open(): void }[] = [];
    function held(): { readonly promise: Promise<void>; open(): void } {
      const made = gate();
      gates.push(made);
      return made;
    }

    beforeEach(async () => {
      await db.truncate();
      await db.pool.query(`TRUNCATE "${db.schema}".payments`);
      store = createPostgresStore({ pool: db.pool, schema: db.schema });
      calls = 0;
      events.length = 0;
    });

    afterEach(async () => {
      for (const made of gates.splice(0)) made.open();
      await client?.close();
      client = undefined;
      await store.close();
    });

    async function rows(key: string): Promise<number> {
      const result = await db.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${db.schema}".payments WHERE key = $1`, [key]);
      return result.rows[0]?.n ?? -1;
    }

    /**
     * Starts the app; `hold` parks the handler after its insert, `commit` parks COMMIT, until the test
     * opens them.
     */
    async function start(options: { hold?: Promise<void>; commit?: Promise<void>; fail?: boolean } = {}): Promise<TestClient> {
      // Records when COMMIT happened, so the test can tell the response left after it.
      const observed = gateCommits(store, events, options.commit);
      const receiver = createReceiver({ store: observed, transactional: true });
      client = await driver.start({ receiver }, async (input) => {
        calls++;
        const tx = input.idempotency?.tx as pg.PoolClient;
        await tx.query(`INSERT INTO "${db.schema}".payments (key, amount) VALUES ($1, 100)`, [input.idempotency?.key]);
        await options.hold;
        if (options.fail === true) throw new Error('card declined after the insert');
        return { status: 201, headers: { 'content-type': 'application/json' }, body: JSON.stringify({ paid: input.idempotency?.key }) };
      });
      return client;
    }

    const pay = (key: string, body = '{"amount":100}'): TestRequest => ({
      method: 'POST',
      path: '/payments',
      headers: { 'idempotency-key': key, 'content-type': 'application/json' },
      body,
    });

    it('commits the payment with the saved response, answers after COMMIT, and replays byte for byte', async () => {
      const commit = held();
      const app = await start({ commit: commit.promise });
      const sent = app.request(pay('k-1')).then((response) => {
        events.push('responded');
        return response;
      });
      while (!events.includes('before-commit')) await new Promise((resolve) => setTimeout(resolve, 5));
      await new Promise((resolve) => setTimeout(resolve, 50));
      expect(events).toEqual(['before-commit']);
      commit.open();
      const first = await sent;
      expect(first.status).toBe(201);
      expect(first.header('idempotent-replayed')).toBeUndefined();
      expect(events).toEqual(['before-commit', 'committed', 'responded']);
      expect(await rows('k-1')).toBe(1);

      const retry = await app.request(pay('k-1'));
      expect(retry.status).toBe(201);
      expect(retry.header('idempotent-replayed')).toBe('true');
      expect(retry.header('content-type')).toBe(first.header('content-type'));
      expect(retry.body.equals(first.body)).toBe(true);
      expect(calls).toBe(1);
      expect(await rows('k-1')).toBe(1);
    });

    it('answers a concurrent duplicate 409 with Retry-After while the original is still in its transaction', async () => {
      const hold = held();
      const app = await start({ hold: hold.promise });
      const original = app.request(pay('k-2'));
      while (calls === 0) await new Promise((resolve) => setTimeout(resolve, 5));
      const started = performance.now();
      const duplicate = await app.request(pay('k-2'));
      expect(performance.now() - started).toBeLessThan(1_000);
      expect(duplicate.status).toBe(409);
      expect(duplicate.header('retry-after')).toBe('1');
      expect(duplicate.header('content-type')).toContain('application/problem+json');
      hold.open();
      expect((await original).status).toBe(201);
      expect(calls).toBe(1);
      expect(await rows('k-2')).toBe(1);
    });

    it('leaves neither the payment nor the record when the handler throws after its insert; a retry pays once', async () => {
      const failing = await start({ fail: true });
      const failed = await failing.request(pay('k-3'));
      expect(failed.status).toBeGreaterThanOrEqual(500);
      expect(await rows('k-3')).toBe(0);
      expect(await store.get('', 'k-3')).toBeUndefined();
      await failing.close();

      const working = await start();
      expect((await working.request(pay('k-3'))).status).toBe(201);
      expect((await working.request(pay('k-3'))).header('idempotent-replayed')).toBe('true');
      expect(await rows('k-3')).toBe(1);
    });

    it('refuses the same key with another body (422) and leaves the record untouched', async () => {
      const app = await start();
      expect((await app.request(pay('k-4'))).status).toBe(201);
      const before = await store.get('', 'k-4');
      const reused = await app.request(pay('k-4', '{"amount":999}'));
      expect(reused.status).toBe(422);
      expect(await store.get('', 'k-4')).toEqual(before);
      expect(await rows('k-4')).toBe(1);
    });
  });
});
