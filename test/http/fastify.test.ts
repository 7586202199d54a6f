import { once } from 'node:events';
import { request as httpRequest, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Readable, Transform } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import Fastify, { type FastifyInstance } from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
import { createReceiver } from '../../src/receiver.js';
import { idempotency, type FastifyIdempotencyOptions } from '../../src/http/fastify.js';
import { createMemoryStore } from '../../src/stores/memory.js';
import { fastifyDriver, fastifySocketDriver, injectClient } from './fastify-driver.js';
import { BINARY, httpScenarios, transactionalScenarios } from './scenarios.js';
import type { TestClient, TestRequest } from '../support/http.js';

httpScenarios(fastifyDriver);
httpScenarios(fastifySocketDriver);
transactionalScenarios(fastifyDriver);

describe('fastify plugin', () => {
  let app: FastifyInstance;
  let client: TestClient;
  let calls: number;

  async function start(routes: (app: FastifyInstance) => void, options: Partial<FastifyIdempotencyOptions> = {}): Promise<void> {
    calls = 0;
    app = Fastify({ logger: false });
    await app.register(idempotency, { receiver: createReceiver({ store: createMemoryStore() }), ...options });
    routes(app);
    client = await injectClient(app);
  }
  afterEach(async () => {
    await client.close();
  });

  const post = (path: string, key?: string): TestRequest => ({
    method: 'POST',
    path,
    headers: { 'content-type': 'application/json', ...(key !== undefined && { 'idempotency-key': key }) },
    body: '{"amount":1}',
  });

  it('honours per-route config: required false and enabled false', async () => {
    await start((app) => {
      app.post('/optional', { config: { idempotency: { required: false } } }, () => ({ n: ++calls }));
      app.post('/off', { config: { idempotency: { enabled: false } } }, () => ({ n: ++calls }));
      app.post('/on', () => ({ n: ++calls }));
    });
    expect((await client.request(post('/optional'))).status).toBe(200);
    expect((await client.request(post('/optional', 'k1'))).status).toBe(200);
    expect((await client.request(post('/optional', 'k1'))).header('idempotent-replayed')).toBe('true');
    const off = [await client.request(post('/off', 'k2')), await client.request(post('/off', 'k2'))];
    expect(off.map((r) => r.header('idempotent-replayed'))).toEqual([undefined, undefined]);
    expect((await client.request(post('/on'))).status).toBe(400);
    expect(calls).toBe(4);
  });

  it("replays the first response's bytes many times, and the application's onSend hooks see each replay as a Buffer", async () => {
    const seen: string[] = [];
    await start((app) => {
      app.addHook('onSend', (_request, reply, payload, done) => {
        if (reply.getHeader('idempotent-replayed') === 'true') {
          seen.push(`${Buffer.isBuffer(payload)} ${Object.prototype.toString.call(payload)} ${Object.keys(payload as object).length}`);
        }
        done(null, payload);
      });
      app.post('/charge', (_request, reply) => reply.code(201).send({ n: ++calls, note: 'café ✓' }));
    });
    const first = await client.request(post('/charge', 'k-bytes'));
    const replays = [await client.request(post('/charge', 'k-bytes')), await client.request(post('/charge', 'k-bytes'))];
    for (const replay of replays) {
      expect(replay.status).toBe(201);
      expect(replay.header('idempotent-replayed')).toBe('true');
      expect(replay.header('content-type')).toBe(first.header('content-type'));
      expect(replay.body).toEqual(first.body);
    }
    expect(calls).toBe(1);
    const keys = first.body.byteLength;
    expect(seen).toEqual([`true [object Uint8Array] ${keys}`, `true [object Uint8Array] ${keys}`]);
  });

  it('a route can require a key the plugin leaves optional', async () => {
    await start(
      (app) => {
        app.post('/strict', { config: { idempotency: { required: true } } }, () => ({ n: ++calls }));
      },
      { required: false },
    );
    expect((await client.request(post('/strict'))).status).toBe(400);
    expect(calls).toBe(0);
  });

  it('captures a serialized object and a streamed payload and replays them byte for byte', async () => {
    await start((app) => {
      app.post('/object', async (request, reply) => {
        calls++;
        return reply.code(201).send({ key: request.idempotency?.key, scope: request.idempotency?.scope, n: calls });
      });
      app.post('/stream', async (_request, reply) => {
        calls++;
        return reply.type('application/octet-stream').send(Readable.from([Buffer.from(BINARY.subarray(0, 100)), Buffer.from(BINARY.subarray(100))]));
      });
    });
    const object = await client.request(post('/object', 'o'));
    expect(JSON.parse(object.body.toString('utf8'))).toEqual({ key: 'o', scope: '', n: 1 });
    const objectRetry = await client.request(post('/object', 'o'));
    expect(objectRetry.status).toBe(201);
    expect(objectRetry.header('content-type')).toBe(object.header('content-type'));
    expect(objectRetry.body.equals(object.body)).toBe(true);
    const stream = await client.request(post('/stream', 's'));
    const streamRetry = await client.request(post('/stream', 's'));
    expect(stream.body.equals(Buffer.from(BINARY))).toBe(true);
    expect(streamRetry.body.equals(Buffer.from(BINARY))).toBe(true);
    expect(streamRetry.header('idempotent-replayed')).toBe('true');
    expect(calls).toBe(2);
  });

  it('keeps the parsed body for the handler after reading the raw bytes', async () => {
    const seen: unknown[] = [];
    await start((app) => {
      app.post('/echo', (request) => {
        seen.push(request.body);
        return request.body;
      });
    });
    await client.request({ ...post('/echo', 'e'), body: '{"b":[1,2],"a":"x"}' });
    expect(seen).toEqual([{ b: [1, 2], a: 'x' }]);
    // Raw bytes are fingerprinted: another key order is another request.
    expect((await client.request({ ...post('/echo', 'e'), body: '{"a":"x","b":[1,2]}' })).status).toBe(422);
  });

  it("fingerprints a JSON body as the text Fastify's parser read, with its poisoning checks and bodyLimit", async () => {
    await start((app) => {
      app.post('/echo', (request) => request.body);
    });
    const json = (key: string, body: string, type = 'application/json; charset=utf-8'): TestRequest => ({
      method: 'POST',
      path: '/echo',
      headers: { 'content-type': type, 'idempotency-key': key },
      body,
    });
    const first = await client.request(json('t', '{"a":"é"}'));
    expect([first.status, first.body.toString('utf8')]).toEqual([200, '{"a":"é"}']);
    const retry = await client.request(json('t', '{"a":"é"}', 'Application/JSON'));
    expect(retry.header('idempotent-replayed')).toBe('true');
    expect((await client.request(json('t', '{"a":"e"}'))).status).toBe(422);
    // Fastify's own JSON parser answers as before: invalid JSON and __proto__ are 400s, nothing claimed.
    expect((await client.request(json('bad', '{"a":'))).status).toBe(400);
    expect((await client.request(json('proto', '{"__proto__":{"x":1}}'))).status).toBe(400);
    expect((await client.request(json('proto', '{"b":1}'))).status).toBe(200);
  });

  it('saves the response of a handler that answers at once before it is sent, and replays it in place', async () => {
    const store = createMemoryStore();
    let runs = 0;
    app = Fastify({ logger: false });
    await app.register(idempotency, { receiver: createReceiver({ store }) });
    app.post('/now', (_request, reply) => reply.code(201).header('location', '/now/1').send({ n: ++runs }));
    client = await injectClient(app);
    const first = await client.request(post('/now', 'now'));
    expect([first.status, first.body.toString('utf8')]).toEqual([201, '{"n":1}']);
    expect((await store.get('', 'now'))?.state).toBe('completed');
    const retries = await Promise.all([client.request(post('/now', 'now')), client.request(post('/now', 'now'))]);
    for (const retry of retries) {
      expect([retry.status, retry.header('location'), retry.header('idempotent-replayed'), retry.body.toString('utf8')]).toEqual([201, '/now/1', 'true', '{"n":1}']);
    }
    expect(runs).toBe(1);
  });

  it('on the memory store, saves a new key and sends its response within the handler’s reply.send()', async () => {
    const store = createMemoryStore();
    const seen: [boolean, string | undefined][] = [];
    app = Fastify({ logger: false });
    await app.register(idempotency, { receiver: createReceiver({ store }) });
    app.post('/later', async (_request, reply) => {
      await sleep(1);
      void reply.code(201).send({ ok: true });
      seen.push([reply.sent, (await store.get('', 'later'))?.state]);
      return reply;
    });
    client = await injectClient(app);
    const first = await client.request(post('/later', 'later'));
    expect([first.status, first.body.toString('utf8')]).toEqual([201, '{"ok":true}']);
    expect(seen).toEqual([[true, 'completed']]);
  });

  it('keeps a JSON parser of the application registered before the plugin, and fingerprints the bytes it reads', async () => {
    calls = 0;
    app = Fastify({ logger: false });
    app.removeContentTypeParser('application/json');
    app.addContentTypeParser('application/json', { parseAs: 'string' }, (_request, text, done) => {
      calls++;
      done(null, { own: JSON.parse(text as string) as unknown });
    });
    await app.register(idempotency, { receiver: createReceiver({ store: createMemoryStore() }) });
    app.post('/echo', (request) => request.body);
    client = await injectClient(app);
    const first = await client.request({ ...post('/echo', 'own'), body: '{"b":1,"a":2}' });
    expect(JSON.parse(first.body.toString('utf8'))).toEqual({ own: { b: 1, a: 2 } });
    expect((await client.request({ ...post('/echo', 'own'), body: '{"b":1,"a":2}' })).header('idempotent-replayed')).toBe('true');
    expect((await client.request({ ...post('/echo', 'own'), body: '{"a":2,"b":1}' })).status).toBe(422);
    expect(calls).toBe(3);
  });

  describe('over a socket', () => {
    let server: FastifyInstance | undefined;
    afterEach(async () => {
      await server?.close();
      server = undefined;
    });

    /** POSTs `chunks` to `path` on `app` (listening) as separate writes `pauseMs` apart, chunked; resolves status, replay header and body. */
    async function upload(app: FastifyInstance, path: string, key: string, chunks: readonly string[], pauseMs: number) {
      const { port } = app.server.address() as AddressInfo;
      const req = httpRequest({ host: '127.0.0.1', port, path, method: 'POST', headers: { 'content-type': 'application/json', 'idempotency-key': key } });
      const responded = once(req, 'response') as Promise<[IncomingMessage]>;
      for (const chunk of chunks) {
        req.write(chunk);
        await sleep(pauseMs);
      }
      req.end();
      const [res] = await responded;
      const parts: Buffer[] = [];
      for await (const part of res) parts.push(part as Buffer);
      return { status: res.statusCode, replayed: res.headers['idempotent-replayed'], body: Buffer.concat(parts).toString('utf8') };
    }

    it('fingerprints a body that arrives in several packets and hands it whole to the parser', async () => {
      const seen: unknown[] = [];
      server = Fastify({ logger: false });
      await server.register(idempotency, { receiver: createReceiver({ store: createMemoryStore() }) });
      server.post('/echo', (request) => {
        seen.push(request.body);
        return { n: seen.length };
      });
      await server.listen({ port: 0, host: '127.0.0.1' });
      const parts = ['{"amount":', '1250,"currency"', ':"EUR"}'];
      const first = await upload(server, '/echo', 'slow', parts, 20);
      const retry = await upload(server, '/echo', 'slow', parts, 20);
      const other = await upload(server, '/echo', 'slow', ['{"amount":', '1251,"currency"', ':"EUR"}'], 20);
      expect([first.status, first.body]).toEqual([200, '{"n":1}']);
      expect([retry.status, retry.replayed, retry.body]).toEqual([200, 'true', '{"n":1}']);
      expect(other.status).toBe(422);
      expect(seen).toEqual([{ amount: 1250, currency: 'EUR' }]);
    });

    it('refuses a chunked JSON body over maxBodyBytes with 413 before claiming', async () => {
      const store = createMemoryStore();
      server = Fastify({ logger: false });
      await server.register(idempotency, { receiver: createReceiver({ store }), maxBodyBytes: 14 });
      let handled = 0;
      server.post('/echo', () => ({ n: ++handled }));
      await server.listen({ port: 0, host: '127.0.0.1' });
      const tooLarge = await upload(server, '/echo', 'big', ['{"amount":', '1000}'], 5);
      expect(tooLarge.status).toBe(413);
      expect(JSON.parse(tooLarge.body)).toMatchObject({ type: expect.stringContaining('idempotency-request-too-large') as unknown });
      expect(await store.get('', 'big')).toBeUndefined();
      // Multi-byte text counts in bytes: 13 characters, 15 bytes.
      expect((await upload(server, '/echo', 'big', ['{"a":"éé', 'xxx"}'], 5)).status).toBe(413);
      expect((await upload(server, '/echo', 'big', ['{"amount":', '100}'], 5)).status).toBe(200);
      expect(handled).toBe(1);
    });

    it('fingerprints the stream an earlier preParsing hook hands on, and the parser gets it whole', async () => {
      const seen: unknown[] = [];
      server = Fastify({ logger: false });
      // Registered first: the plugin reads the stream this hook returns, not the request.
      server.addHook('preParsing', (_request, _reply, payload, done) => {
        const upper = new Transform({ transform: (chunk: Buffer, _encoding, next) => next(null, Buffer.from(chunk.toString('utf8').toUpperCase())) });
        done(null, payload.pipe(upper));
      });
      await server.register(idempotency, { receiver: createReceiver({ store: createMemoryStore() }) });
      server.post('/echo', (request) => {
        seen.push(request.body);
        return { n: seen.length };
      });
      await server.listen({ port: 0, host: '127.0.0.1' });
      const first = await upload(server, '/echo', 'hooked', ['{"a":', '"x"}'], 10);
      // Another body before the hook, the same after it: the same request to the plugin.
      const retry = await upload(server, '/echo', 'hooked', ['{"A":"X"}'], 0);
      expect([first.status, first.body]).toEqual([200, '{"n":1}']);
      expect([retry.status, retry.replayed, retry.body]).toEqual([200, 'true', '{"n":1}']);
      expect(seen).toEqual([{ A: 'X' }]);
    });
  });

  it('refuses bad options at registration with a TypeError naming the option', async () => {
    const bad = Fastify({ logger: false });
    await expect(
      bad.register(idempotency, { receiver: createReceiver({ store: createMemoryStore() }), replayHeaders: ['set-cookie'] }),
    ).rejects.toThrow(/option "replayHeaders"/);
    await bad.close();
    await start(() => undefined);
  });
});
