/**
 * `idempotencyOf` in each adapter: the handler's context is typed with its receiver's transaction handle
 * (no cast from `unknown`), it is the very context the middleware made, it refuses a receiver the request
 * did not go through, and it is `undefined` on a request the middleware let pass. `npm run typecheck`
 * fails on the type assertions if the typing regresses.
 */
import type { Database } from 'better-sqlite3';
import express, { type NextFunction, type Request, type Response } from 'express';
import Fastify, { type FastifyInstance } from 'fastify';
import { Hono } from 'hono';
import request from 'supertest';
import { afterEach, beforeEach, describe, expect, expectTypeOf, it } from 'vitest';
import { type Receiver } from '../../src/core/receiver.js';
import { createReceiver } from '../../src/receiver.js';
import type { IdempotencyContext } from '../../src/http/pipeline.js';
import { idempotency as expressIdempotency, idempotencyOf as expressIdempotencyOf } from '../../src/http/express.js';
import { idempotency as fastifyIdempotency, idempotencyOf as fastifyIdempotencyOf } from '../../src/http/fastify.js';
import { idempotency as honoIdempotency, idempotencyOf as honoIdempotencyOf } from '../../src/http/hono.js';
import { createMemoryStore } from '../../src/stores/memory.js';
import { createSqliteStore, type SqliteStore } from '../../src/stores/sqlite/index.js';

let store: SqliteStore;
let receiver: Receiver<Database>;
/** A receiver the requests never go through. */
let other: Receiver;

beforeEach(() => {
  store = createSqliteStore({ path: ':memory:' });
  store.database.exec('CREATE TABLE charges (id INTEGER PRIMARY KEY, key TEXT NOT NULL)');
  receiver = createReceiver({ store, transactional: true });
  other = createReceiver({ store: createMemoryStore() });
});

afterEach(async () => {
  await store.close();
});

const charges = (): number => store.database.prepare<[], number>('SELECT count(*) FROM charges').pluck().get() ?? -1;

/** What each handler reports: the row it wrote through the typed handle, and what the accessor did otherwise. */
function charge(context: IdempotencyContext<Database>): { id: number; inTransaction: boolean } {
  const row = context.tx.prepare<[string], { id: number }>('INSERT INTO charges (key) VALUES (?) RETURNING id').get(context.key);
  return { id: row?.id ?? -1, inTransaction: context.tx.inTransaction };
}

describe('express: idempotencyOf(req, receiver)', () => {
  function app(): express.Express {
    const app = express();
    app.post('/charges', expressIdempotency({ receiver }), (req, res) => {
      const context = expressIdempotencyOf(req, receiver);
      expectTypeOf(context).toEqualTypeOf<IdempotencyContext<Database> | undefined>();
      expect(context).toBe(req.idempotency);
      res.status(201).json(context ? charge(context) : { passed: true });
    });
    app.post('/optional', expressIdempotency({ receiver, required: false }), (req, res) => {
      res.json({ context: expressIdempotencyOf(req, receiver) ?? null });
    });
    app.post('/wrong', expressIdempotency({ receiver }), (req, res) => {
      expectTypeOf(expressIdempotencyOf(req, other)).toEqualTypeOf<IdempotencyContext<undefined> | undefined>();
      res.json(expressIdempotencyOf(req, other));
    });
    app.use((error: Error, _req: Request, res: Response, _next: NextFunction) => {
      res.status(500).json({ name: error.name, message: error.message });
    });
    return app;
  }

  it('hands the context with the transaction the row commits in; a retry replays', async () => {
    const server = app();
    const first = await request(server).post('/charges').set('idempotency-key', 'e-1').send({ amount: 1 });
    expect(first.status).toBe(201);
    expect(first.body).toEqual({ id: 1, inTransaction: true });
    const retry = await request(server).post('/charges').set('idempotency-key', 'e-1').send({ amount: 1 });
    expect(retry.headers['idempotent-replayed']).toBe('true');
    expect(retry.body).toEqual(first.body);
    expect(charges()).toBe(1);
  });

  it('is undefined on a request passed through, and refuses another receiver', async () => {
    const server = app();
    expect((await request(server).post('/optional').send({})).body).toEqual({ context: null });
    const wrong = await request(server).post('/wrong').set('idempotency-key', 'e-2').send({});
    expect(wrong.status).toBe(500);
    expect(wrong.body).toMatchObject({ name: 'TypeError', message: expect.stringMatching(/another receiver/) as unknown });
  });
});

describe('fastify: idempotencyOf(request, receiver)', () => {
  async function app(): Promise<FastifyInstance> {
    const app = Fastify();
    await app.register(fastifyIdempotency, { receiver });
    app.post('/charges', async (req, reply) => {
      const context = fastifyIdempotencyOf(req, receiver);
      expectTypeOf(context).toEqualTypeOf<IdempotencyContext<Database> | undefined>();
      expect(context).toBe(req.idempotency);
      return reply.code(201).send(context ? charge(context) : { passed: true });
    });
    app.post('/optional', { config: { idempotency: { required: false } } }, (req, reply) =>
      reply.send({ context: fastifyIdempotencyOf(req, receiver) ?? null }),
    );
    app.post('/wrong', (req, reply) => reply.send(fastifyIdempotencyOf(req, other)));
    return app;
  }

  it('hands the context with the transaction the row commits in; a retry replays', async () => {
    const server = await app();
    const post = () => server.inject({ method: 'POST', url: '/charges', headers: { 'idempotency-key': 'f-1' }, payload: { amount: 1 } });
    const first = await post();
    expect(first.statusCode).toBe(201);
    expect(first.json()).toEqual({ id: 1, inTransaction: true });
    const retry = await post();
    expect(retry.headers['idempotent-replayed']).toBe('true');
    expect(retry.body).toBe(first.body);
    expect(charges()).toBe(1);
    await server.close();
  });

  it('is undefined on a request passed through, and refuses another receiver', async () => {
    const server = await app();
    expect((await server.inject({ method: 'POST', url: '/optional', payload: {} })).json()).toEqual({ context: null });
    const wrong = await server.inject({ method: 'POST', url: '/wrong', headers: { 'idempotency-key': 'f-2' }, payload: {} });
    expect(wrong.statusCode).toBe(500);
    expect(wrong.body).toMatch(/another receiver/);
    await server.close();
  });
});

describe('hono: the typed variable and idempotencyOf(c, receiver)', () => {
  function app(): Hono {
    const app = new Hono();
    // Chained after the middleware in one route call, c.get('idempotency') is typed by the receiver.
    app.post('/charges', honoIdempotency({ receiver }), (c) => {
      const context = c.get('idempotency');
      expectTypeOf(context).toEqualTypeOf<IdempotencyContext<Database> | undefined>();
      return c.json(context ? charge(context) : { passed: true }, 201);
    });
    // Declared apart from app.use(), the route reads it through the accessor.
    app.use('/apart/*', honoIdempotency({ receiver, required: false }));
    app.post('/apart/charges', (c) => {
      const context = honoIdempotencyOf(c, receiver);
      expectTypeOf(context).toEqualTypeOf<IdempotencyContext<Database> | undefined>();
      return c.json(context ? charge(context) : { context: null }, 201);
    });
    app.post('/wrong', honoIdempotency({ receiver }), (c) => c.json(honoIdempotencyOf(c, other)));
    app.onError((error, c) => c.json({ name: error.name, message: error.message }, 500));
    return app;
  }

  it('hands the context with the transaction the row commits in; a retry replays', async () => {
    const server = app();
    for (const path of ['/charges', '/apart/charges']) {
      const post = () => server.request(path, { method: 'POST', headers: { 'idempotency-key': `h-${path}` }, body: '{}' });
      const first = await post();
      expect(first.status).toBe(201);
      const body: unknown = await first.json();
      expect(body).toMatchObject({ inTransaction: true });
      const retry = await post();
      expect(retry.headers.get('idempotent-replayed')).toBe('true');
      expect(await retry.json()).toEqual(body);
    }
    expect(charges()).toBe(2);
  });

  it('is undefined on a request passed through, and refuses another receiver', async () => {
    const server = app();
    expect(await (await server.request('/apart/charges', { method: 'POST', body: '{}' })).json()).toEqual({ context: null });
    const wrong = await server.request('/wrong', { method: 'POST', headers: { 'idempotency-key': 'h-2' }, body: '{}' });
    expect(wrong.status).toBe(500);
    expect(await wrong.json()).toMatchObject({ name: 'TypeError', message: expect.stringMatching(/another receiver/) as unknown });
  });
});
