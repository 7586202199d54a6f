/**
 * Health against the real stores: `ping()` and the expired-lease count on memory, SQLite, PostgreSQL and
 * Redis; the health route of each framework answering 200, and 503 once the store cannot be reached (a
 * PostgreSQL pool and a Redis client pointed at a closed port, a closed SQLite store); the outbox backlog
 * and oldest unsent age, and the inbox dead letters, on PostgreSQL.
 */
import express from 'express';
import Fastify from 'fastify';
import { Hono } from 'hono';
import { Redis } from 'ioredis';
import pg from 'pg';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/core/clock.js';
import { createReceiver } from '../../src/receiver.js';
import type { IdempotencyStore } from '../../src/core/store.js';
import { healthRoute as expressHealth } from '../../src/http/express.js';
import { healthRoute as fastifyHealth } from '../../src/http/fastify.js';
import { healthRoute as honoHealth } from '../../src/http/hono.js';
import { createInbox } from '../../src/messaging/inbox/inbox.js';
import { createPostgresInboxStore } from '../../src/messaging/inbox/postgres.js';
import { createOutbox } from '../../src/messaging/outbox/outbox.js';
import { inboxHealthCheck, outboxHealthCheck, type HealthCheck } from '../../src/observability/health.js';
import { createMemoryStore } from '../../src/stores/memory.js';
import { createPostgresStore } from '../../src/stores/postgres/index.js';
import { createRedisStore } from '../../src/stores/redis/index.js';
import { createSqliteStore } from '../../src/stores/sqlite/index.js';
import { createTestSchema, postgresAvailable, type TestSchema } from '../support/postgres-schema.js';
import { REDIS_URL, redisAvailable, uniqueName } from '../support/services.js';

const [pgUp, redisUp] = await Promise.all([postgresAvailable(), redisAvailable()]);
const CLOSED_PORT = 1;

type Answer = { status: number; body: { status: string; checks: Record<string, Record<string, unknown>> } };

/** Asks each framework's health route and checks they agree; resolves the answer. */
async function askEveryFramework(checks: Record<string, HealthCheck>): Promise<Answer> {
  const app = express();
  app.get('/health', expressHealth(checks));
  const viaExpress = await request(app).get('/health');
  const fastify = Fastify();
  fastify.get('/health', fastifyHealth(checks));
  const viaFastify = await fastify.inject({ method: 'GET', url: '/health' });
  await fastify.close();
  const hono = new Hono();
  hono.get('/health', honoHealth(checks));
  const viaHono = await hono.request('/health');
  const answers: Answer[] = [
    { status: viaExpress.status, body: viaExpress.body as Answer['body'] },
    { status: viaFastify.statusCode, body: viaFastify.json() },
    { status: viaHono.status, body: (await viaHono.json()) as Answer['body'] },
  ];
  expect(viaExpress.headers['cache-control']).toBe('no-store');
  expect(viaFastify.headers['cache-control']).toBe('no-store');
  expect(viaHono.headers.get('cache-control')).toBe('no-store');
  for (const answer of answers) expect(answer.status).toBe(answers[0]?.status);
  return answers[2] as Answer;
}

/** Claims one key under a 1 s lease, lets it expire, and checks health reports it as the one stuck key. */
async function reportsOneStuckKey(store: IdempotencyStore, clock: ManualClock): Promise<void> {
  const receiver = createReceiver({ store, clock, leaseMs: 1_000 });
  await store.claim({ scope: 's', key: 'stuck', fingerprint: 'f', leaseMs: 1_000, retentionMs: 60_000 });
  await store.claim({ scope: 's', key: 'live', fingerprint: 'f', leaseMs: 60_000, retentionMs: 60_000 });
  expect((await receiver.health()).expiredLeases).toBe(0);
  clock.advance(2_000);
  const health = await receiver.health();
  expect(health).toMatchObject({ healthy: true, store: store.kind, expiredLeases: 1 });
  expect(await store.countExpiredLeases?.(1)).toBe(1);
  const answer = await askEveryFramework({ idempotency: () => receiver.health() });
  expect(answer.status).toBe(200);
  expect(answer.body).toMatchObject({ status: 'ok', checks: { idempotency: { healthy: true, expiredLeases: 1 } } });
}

describe('store health', () => {
  it('memory: reachable, one stuck key', async () => {
    const clock = new ManualClock(1_000_000);
    await reportsOneStuckKey(createMemoryStore({ clock }), clock);
  });

  it('SQLite: reachable, one stuck key; 503 once the store is closed', async () => {
    const clock = new ManualClock(1_000_000);
    const store = createSqliteStore({ clock });
    await reportsOneStuckKey(store, clock);
    await store.close();
    const receiver = createReceiver({ store });
    const answer = await askEveryFramework({ idempotency: () => receiver.health() });
    expect(answer.status).toBe(503);
    expect(answer.body.checks['idempotency']).toMatchObject({ healthy: false, store: 'sqlite' });
  });

  describe.runIf(pgUp)('PostgreSQL', () => {
    let db: TestSchema;
    beforeAll(async () => {
      db = await createTestSchema('health');
    });
    afterAll(async () => {
      await db.drop();
    });

    it('reachable, one stuck key', async () => {
      const clock = new ManualClock(Date.now());
      await reportsOneStuckKey(createPostgresStore({ pool: db.pool, schema: db.schema, clock }), clock);
    });

    it('answers 503 when the server cannot be reached (wrong port)', async () => {
      const pool = new pg.Pool({ host: '127.0.0.1', port: CLOSED_PORT, user: 'postgres', database: 'test', connectionTimeoutMillis: 2_000 });
      pool.on('error', () => undefined);
      const receiver = createReceiver({ store: createPostgresStore({ pool, schema: db.schema }) });
      const answer = await askEveryFramework({ idempotency: () => receiver.health() });
      expect(answer.status).toBe(503);
      expect(answer.body).toMatchObject({ status: 'unavailable', checks: { idempotency: { healthy: false, store: 'postgres' } } });
      expect(String(answer.body.checks['idempotency']?.['error'])).toMatch(/ECONNREFUSED/);
      await pool.end();
    });

    it('reports the outbox backlog and oldest unsent age, and the inbox dead letters', async () => {
      const clock = new ManualClock(Date.now());
      const outbox = createOutbox({ schema: db.schema, clock });
      await outbox.enqueue(db.pool, { topic: 'orders', key: 'a', payload: '1' });
      await outbox.enqueue(db.pool, { topic: 'orders', key: 'b', payload: '2' });
      clock.advance(90_000);
      const inbox = createInbox({ store: createPostgresInboxStore({ pool: db.pool, schema: db.schema }), maxAttempts: 1 });
      await inbox.handle({ consumer: 'mailer', messageId: 'm-1' }, () => Promise.reject(new Error('smtp down')));
      const checks = {
        outbox: outboxHealthCheck(() => outbox.status(db.pool), 60_000),
        inbox: inboxHealthCheck((limit) => inbox.deadLetters({ limit })),
      };
      const lagging = await askEveryFramework(checks);
      expect(lagging.status).toBe(503);
      expect(lagging.body.checks['outbox']).toMatchObject({ healthy: false, pending: 2, deadLetters: 0 });
      expect(lagging.body.checks['outbox']?.['oldestPendingAgeMs']).toBeGreaterThanOrEqual(90_000);
      expect(lagging.body.checks['inbox']).toEqual({ healthy: true, deadLetters: 1 });
      const patient = await askEveryFramework({ ...checks, outbox: outboxHealthCheck(() => outbox.status(db.pool), 600_000) });
      expect(patient.status).toBe(200);
    });
  });

  describe.runIf(redisUp)('Redis', () => {
    const client = new Redis(REDIS_URL, { lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 1 });
    const prefix = uniqueName('health');
    beforeAll(async () => {
      await client.connect();
    });
    afterAll(async () => {
      const keys = await client.keys(`${prefix}*`);
      if (keys.length > 0) await client.del(...keys);
      await client.quit();
    });

    it('reachable, one stuck key', async () => {
      const clock = new ManualClock(Date.now());
      await reportsOneStuckKey(createRedisStore({ client, prefix, clock }), clock);
    });

    it('answers 503 when the server cannot be reached (wrong port)', async () => {
      const down = new Redis({ host: '127.0.0.1', port: CLOSED_PORT, lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 0, retryStrategy: () => null });
      down.on('error', () => undefined);
      const receiver = createReceiver({ store: createRedisStore({ client: down, prefix, subscriber: down }) });
      const answer = await askEveryFramework({ idempotency: () => receiver.health() });
      expect(answer.status).toBe(503);
      expect(answer.body.checks['idempotency']).toMatchObject({ healthy: false, store: 'redis' });
      down.disconnect();
    });
  });
});
