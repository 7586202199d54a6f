/**
 * Request-body reading (src/http/body.ts) as the Express middleware uses it: a body the middleware read
 * for the fingerprint is handed, unconsumed, to a body parser mounted after it, on Express 4
 * (body-parser 1) and Express 5 (body-parser 2), without touching any parser's private flags.
 */
import { once } from 'node:events';
import { createServer, request, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import express from 'express';
import type { Express, NextFunction, Request, Response } from 'express';
import { afterEach, describe, expect, it } from 'vitest';
import { idempotency } from '../../src/http/express.js';
import { createReceiver } from '../../src/receiver.js';
import { createMemoryStore } from '../../src/stores/memory.js';
import type { TestClient } from '../support/http.js';
import { express4Factory, supertestClient, type ExpressFactory } from './express-driver.js';

describe.each<[string, ExpressFactory]>([
  ['express 5', express],
  ['express 4', express4Factory],
])('%s: a body parser mounted after the middleware', (_name, factory) => {
  const clients: TestClient[] = [];
  afterEach(async () => {
    await Promise.all(clients.splice(0).map((client) => client.close()));
  });

  /** An app with the middleware, then `parsers`, then a handler answering what it saw. */
  function app(...parsers: ReturnType<typeof express.json>[]): Express {
    return appWith({}, ...parsers);
  }

  /**
   * {@link app}, with the middleware's `maxBodyBytes` given, and `delayMs` of waiting before it (so the
   * whole request has arrived when it reads the body).
   */
  function appWith(options: { maxBodyBytes?: number; delayMs?: number }, ...parsers: ReturnType<typeof express.json>[]): Express {
    const app = factory();
    const delayMs = options.delayMs;
    if (delayMs !== undefined) app.use((_req: Request, _res: Response, next: NextFunction) => void setTimeout(next, delayMs));
    app.use(idempotency({ receiver: createReceiver({ store: createMemoryStore() }), ...(options.maxBodyBytes !== undefined && { maxBodyBytes: options.maxBodyBytes }) }));
    for (const parser of parsers) app.use(parser);
    app.post('/x', (req: Request, res: Response) => {
      res.status(201).json({ body: req.body as unknown, raw: req.rawBody?.toString('utf8') ?? null });
    });
    app.use((error: Error & { status?: number }, _req: Request, res: Response, _next: NextFunction) => {
      res.status(error.status ?? 500).json({ error: error.message });
    });
    return app;
  }

  async function serve(...parsers: ReturnType<typeof express.json>[]): Promise<TestClient> {
    const client = await supertestClient(app(...parsers));
    clients.push(client);
    return client;
  }

  /**
   * POSTs `parts` chunked (Transfer-Encoding: chunked), each part written once the server has had the
   * previous one for a while, so the middleware meets a body that is still arriving.
   */
  function postChunked(parsers: ReturnType<typeof express.json>[], key: string, parts: readonly string[]): Promise<{ status: number; body: string }> {
    return postParts(app(...parsers), { 'idempotency-key': key, 'content-type': 'text/plain', 'transfer-encoding': 'chunked' }, parts);
  }

  /** POSTs `parts` to `/x` of `served` with `headers`, each part written 20 ms after the one before. */
  async function postParts(served: Express, headers: Record<string, string>, parts: readonly string[]): Promise<{ status: number; body: string }> {
    const server = createServer(served).listen(0, '127.0.0.1');
    await once(server, 'listening');
    try {
      const { port } = server.address() as AddressInfo;
      const req = request({ host: '127.0.0.1', port, method: 'POST', path: '/x', headers });
      const answered = once(req, 'response') as Promise<[IncomingMessage]>;
      req.flushHeaders();
      for (const part of parts) {
        await new Promise((resolve) => setTimeout(resolve, 20));
        req.write(part);
      }
      req.end();
      const [res] = await answered;
      let body = '';
      for await (const chunk of res) body += String(chunk);
      return { status: res.statusCode ?? 0, body };
    } finally {
      server.close();
    }
  }

  const post = (key: string, type: string, body: string) => ({
    method: 'POST',
    path: '/x',
    headers: { 'idempotency-key': key, 'content-type': type },
    body,
  });

  it('reads the same bytes itself, under its own options (its verify hook sees them)', async () => {
    const verified: string[] = [];
    const client = await serve(factory.json({ verify: (_req, _res, buf) => void verified.push(buf.toString('utf8')) }));
    const res = await client.request(post('k1', 'application/json', '{"b":2,"a":1}'));
    expect(res.status).toBe(201);
    expect(JSON.parse(res.body.toString('utf8'))).toEqual({ body: { b: 2, a: 1 }, raw: '{"b":2,"a":1}' });
    expect(verified).toEqual(['{"b":2,"a":1}']);
  });

  it('parses a form post mounted after it (express.urlencoded)', async () => {
    const client = await serve(factory.urlencoded({ extended: false }));
    const res = await client.request(post('k2', 'application/x-www-form-urlencoded', 'amount=100&currency=EUR'));
    expect(res.status).toBe(201);
    expect(JSON.parse(res.body.toString('utf8'))).toEqual({ body: { amount: '100', currency: 'EUR' }, raw: 'amount=100&currency=EUR' });
  });

  it('hands on a body larger than a stream buffer whole', async () => {
    const text = 'x'.repeat(200_000);
    const client = await serve(factory.text({ limit: '1mb' }));
    const res = await client.request(post('k3', 'text/plain', text));
    expect(res.status).toBe(201);
    const seen = JSON.parse(res.body.toString('utf8')) as { body: string; raw: string };
    expect(seen.body.length).toBe(text.length);
    expect(seen.raw === text).toBe(true);
  });

  it('hands on an empty body (Content-Length: 0) without failing the parser', async () => {
    const client = await serve(factory.json());
    const res = await client.request(post('k4', 'application/json', ''));
    expect(res.status).toBe(201);
    expect(res.header('idempotent-replayed')).toBeUndefined();
  });

  it('hands on a chunked body that is still arriving when the middleware reads it', async () => {
    const res = await postChunked([factory.text()], 'k5', ['first ', 'second ', 'third']);
    expect(res.status).toBe(201);
    expect(JSON.parse(res.body)).toEqual({ body: 'first second third', raw: 'first second third' });
  });

  it('hands on a body with a Content-Length that is still arriving when the middleware reads it', async () => {
    const res = await postParts(app(factory.text()), { 'idempotency-key': 'k7', 'content-type': 'text/plain', 'content-length': '18' }, [
      'first ',
      'second ',
      'third',
    ]);
    expect(res.status).toBe(201);
    expect(JSON.parse(res.body)).toEqual({ body: 'first second third', raw: 'first second third' });
  });

  it('hands on a body received whole before the middleware reads it, with or without a Content-Length', async () => {
    const served = appWith({ delayMs: 150 }, factory.text());
    const chunked = await postParts(served, { 'idempotency-key': 'k8', 'content-type': 'text/plain', 'transfer-encoding': 'chunked' }, ['one ', 'two']);
    const sized = await postParts(served, { 'idempotency-key': 'k9', 'content-type': 'text/plain', 'content-length': '7' }, ['one ', 'two']);
    expect([chunked.status, JSON.parse(chunked.body)]).toEqual([201, { body: 'one two', raw: 'one two' }]);
    expect([sized.status, JSON.parse(sized.body)]).toEqual([201, { body: 'one two', raw: 'one two' }]);
  });

  it('answers 413 to a chunked body over maxBodyBytes received whole before the middleware reads it', async () => {
    const served = appWith({ delayMs: 150, maxBodyBytes: 8 }, factory.text());
    const res = await postParts(served, { 'idempotency-key': 'k10', 'content-type': 'text/plain', 'transfer-encoding': 'chunked' }, ['12345', '67890']);
    expect(res.status).toBe(413);
    expect(JSON.parse(res.body)).toMatchObject({ type: expect.stringContaining('idempotency-request-too-large') as unknown, status: 413 });
  });

  it('hands on an empty chunked body without failing the parser', async () => {
    const res = await postChunked([factory.text()], 'k6', []);
    expect(res.status).toBe(201);
    expect(JSON.parse(res.body)).toEqual({ body: '', raw: '' });
  });
});
