import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import { serve } from '@hono/node-server';
import { Hono } from 'hono';
import { describe, expect, it } from 'vitest';
import { type Receiver } from '../../src/core/receiver.js';
import { createReceiver } from '../../src/receiver.js';
import { idempotency } from '../../src/http/hono.js';
import { createMemoryStore } from '../../src/stores/memory.js';
import { honoDriver } from './hono-driver.js';
import { BINARY, httpScenarios, transactionalScenarios } from './scenarios.js';

httpScenarios(honoDriver);
transactionalScenarios(honoDriver);

describe('hono middleware', () => {
  const receiver = (): Receiver => createReceiver({ store: createMemoryStore() });
  const post = (path: string, key: string, body = '{"b":1,"a":2}'): Request =>
    new Request(`http://localhost${path}`, { method: 'POST', headers: { 'idempotency-key': key, 'content-type': 'application/json' }, body });

  it('leaves the body readable with c.req.json() and hands the handler c.get("idempotency")', async () => {
    const app = new Hono();
    const seen: unknown[] = [];
    app.use(idempotency({ receiver: receiver(), scope: (c) => c.req.header('x-tenant') ?? 'anonymous' }));
    app.post('/payments', async (c) => {
      const context = c.get('idempotency');
      seen.push(await c.req.json(), context?.key, context?.scope);
      return c.json({ ok: true }, 201);
    });
    const res = await app.request(post('/payments', 'k'));
    expect(res.status).toBe(201);
    expect(seen).toEqual([{ b: 1, a: 2 }, 'k', 'anonymous']);
  });

  it('acts only where it is mounted', async () => {
    const app = new Hono();
    let calls = 0;
    app.use('/payments/*', idempotency({ receiver: receiver() }));
    app.post('/payments/new', (c) => c.text(String(++calls)));
    app.post('/search', (c) => c.text(String(++calls)));
    expect((await app.request('/payments/new', { method: 'POST' })).status).toBe(400);
    expect(await (await app.request('/search', { method: 'POST' })).text()).toBe('1');
  });

  it('names the route with the route option', async () => {
    const app = new Hono();
    let calls = 0;
    app.use(idempotency({ receiver: receiver(), route: () => 'payments' }));
    app.post('/*', (c) => c.text(String(++calls)));
    await app.request(post('/v1/payments', 'k'));
    const res = await app.request(post('/v2/payments', 'k'));
    expect(res.headers.get('idempotent-replayed')).toBe('true');
    expect(calls).toBe(1);
  });

  it('gives each response a headers object of its own, which a runtime may add to (as @hono/node-server 1.x adds Content-Length), replay after replay', async () => {
    const app = new Hono();
    let calls = 0;
    app.use(idempotency({ receiver: receiver() }));
    app.post('/charge', (c) => c.json({ n: ++calls }, 201));
    const fetchResponse = globalThis.Response;
    class AddingResponse extends fetchResponse {
      constructor(body?: ConstructorParameters<typeof Response>[0], init?: ResponseInit) {
        if (init?.headers !== undefined && !(init.headers instanceof Headers) && !Array.isArray(init.headers)) {
          (init.headers as Record<string, string>)['content-length'] = '7';
        }
        super(body, init);
      }
    }
    globalThis.Response = AddingResponse;
    try {
      await app.request(post('/charge', 'k-own-headers'));
      for (let i = 0; i < 2; i++) {
        const replay = await app.request(post('/charge', 'k-own-headers'));
        expect(replay.status).toBe(201);
        expect(replay.headers.get('idempotent-replayed')).toBe('true');
      }
    } finally {
      globalThis.Response = fetchResponse;
    }
    expect(calls).toBe(1);
  });

  it('serves the same app over a real socket with @hono/node-server', async () => {
    const app = new Hono();
    app.use(idempotency({ receiver: receiver() }));
    app.post('/bytes', () => new Response(BINARY, { status: 201, headers: { 'content-type': 'application/octet-stream', 'set-cookie': 'a=1' } }));
    const server = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' });
    try {
      await once(server, 'listening');
      const { port } = server.address() as AddressInfo;
      const send = (): Promise<Response> => fetch(`http://127.0.0.1:${port}/bytes`, { method: 'POST', headers: { 'idempotency-key': 'n' } });
      const first = await send();
      const firstBody = Buffer.from(await first.arrayBuffer());
      const retry = await send();
      expect(first.headers.getSetCookie()).toEqual(['a=1']);
      expect(retry.headers.getSetCookie()).toEqual([]);
      expect(retry.headers.get('idempotent-replayed')).toBe('true');
      expect(Buffer.from(await retry.arrayBuffer()).equals(firstBody)).toBe(true);
      expect(firstBody.equals(Buffer.from(BINARY))).toBe(true);
    } finally {
      await new Promise((resolve) => server.close(resolve));
    }
  });

  it('refuses bad options at creation with a TypeError naming the option', () => {
    expect(() => idempotency({ receiver: receiver(), methods: ['GET', 42] as never })).toThrow(/option "methods"/);
  });
});
