/**
 * A client that disconnects while its request waits (here: in the `scope` function, between the body read
 * and the claim's outcome) must never change what the handler sees, whichever body parser is mounted
 * before or after the middleware, on Express 4 (body-parser 1) and Express 5 (body-parser 2). Real
 * sockets: the client's socket is destroyed, so Node destroys the server's request stream.
 *
 * What is counted per case: the bodies the handler saw (each must be what the parser makes of the bytes
 * the fingerprint hashed) and whether a response was saved (a retry with the key is then a replay).
 */
import { once } from 'node:events';
import { createServer, request, type ClientRequest, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import express from 'express';
import type { NextFunction, Request, RequestHandler, Response } from 'express';
import { afterEach, describe, expect, it } from 'vitest';
import { idempotency } from '../../src/http/express.js';
import { createReceiver } from '../../src/receiver.js';
import { createMemoryStore } from '../../src/stores/memory.js';
import { express4Factory, type ExpressFactory } from './express-driver.js';

interface BodyType {
  readonly name: string;
  readonly contentType: string;
  readonly body: string;
  readonly parser: (factory: ExpressFactory) => RequestHandler;
  /** What the handler must see as `req.body`, as {@link seen} describes it. */
  readonly expected: string;
}

const BODY_TYPES: readonly BodyType[] = [
  { name: 'JSON', contentType: 'application/json', body: '{"amount":1200,"currency":"usd"}', parser: (f) => f.json(), expected: 'object:{"amount":1200,"currency":"usd"}' },
  {
    name: 'urlencoded',
    contentType: 'application/x-www-form-urlencoded',
    body: 'amount=1200&currency=usd',
    parser: (f) => f.urlencoded({ extended: false }),
    expected: 'object:{"amount":"1200","currency":"usd"}',
  },
  { name: 'text', contentType: 'text/plain', body: 'amount=1200', parser: (f) => f.text(), expected: 'string:amount=1200' },
  { name: 'raw', contentType: 'application/octet-stream', body: 'amount=1200', parser: (f) => f.raw(), expected: 'buffer:amount=1200' },
];

/** `req.body` as a comparable string: its kind, then its content. */
function seen(body: unknown): string {
  if (Buffer.isBuffer(body)) return `buffer:${body.toString('utf8')}`;
  if (typeof body === 'string') return `string:${body}`;
  return `object:${JSON.stringify(body)}`;
}

interface Outcome {
  readonly status: number;
  readonly replayed: boolean;
  readonly body: string;
}

/** POSTs over a fresh connection; `outcome` reads the whole answer, `client` is the client's request. */
function post(port: number, type: BodyType, key: string): { client: ClientRequest; outcome: Promise<Outcome> } {
  const client = request({
    port,
    host: '127.0.0.1',
    method: 'POST',
    path: '/x',
    agent: false,
    headers: { 'idempotency-key': key, 'content-type': type.contentType, 'content-length': Buffer.byteLength(type.body) },
  });
  client.end(type.body);
  return { client, outcome: read(client) };
}

async function read(client: ClientRequest): Promise<Outcome> {
  const [res] = (await once(client, 'response')) as [IncomingMessage];
  const chunks: Buffer[] = [];
  for await (const chunk of res) chunks.push(chunk as Buffer);
  return { status: res.statusCode ?? 0, replayed: res.headers['idempotent-replayed'] === 'true', body: Buffer.concat(chunks).toString('utf8') };
}

describe.each<[string, ExpressFactory]>([
  ['express 5', express],
  ['express 4', express4Factory],
])('%s: a client that leaves while its request waits', (_name, factory) => {
  const servers: Server[] = [];
  afterEach(async () => {
    await Promise.all(servers.splice(0).map((server) => new Promise((resolve) => server.close(resolve))));
  });

  describe.each(BODY_TYPES)('$name body', (type) => {
    it.each<[string, boolean, boolean]>([
      ['parser after the middleware, client stays', false, false],
      ['parser after the middleware, client leaves', false, true],
      ['parser before the middleware, client stays', true, false],
      ['parser before the middleware, client leaves', true, true],
    ])('%s', async (_label, parserBefore, leaves) => {
      const handlerSaw: string[] = [];
      let errors = 0;
      let settle: () => void = () => undefined;
      const settled = new Promise<void>((resolve) => (settle = resolve));
      // The first request's claim waits until the test lets it go (as behind SQLite's write lock); the
      // retry's does not. The store itself is the real memory store.
      let entered: () => void = () => undefined;
      const waiting = new Promise<void>((resolve) => (entered = resolve));
      let release: () => void = () => undefined;
      const released = new Promise<void>((resolve) => (release = resolve));
      const store = createMemoryStore();
      let claims = 0;
      const slowStore = new Proxy(store, {
        get(target, name, receiver) {
          const value: unknown = Reflect.get(target, name, receiver);
          if (name !== 'claim' || typeof value !== 'function') return typeof value === 'function' ? (value.bind(target) as unknown) : value;
          return async (...args: unknown[]) => {
            if (claims++ === 0) {
              entered();
              await released;
            }
            return (value as (...a: unknown[]) => unknown).apply(target, args);
          };
        },
      });
      let serverRequest: IncomingMessage | undefined;

      const app = factory();
      app.use((req: Request, _res: Response, next: NextFunction) => {
        serverRequest ??= req;
        next();
      });
      if (parserBefore) app.use(type.parser(factory));
      app.use(idempotency({ receiver: createReceiver({ store: slowStore }) }));
      if (!parserBefore) app.use(type.parser(factory));
      app.post('/x', (req: Request, res: Response) => {
        handlerSaw.push(seen(req.body));
        res.status(201).json({ saw: seen(req.body) });
        settle();
      });
      app.use((error: Error & { status?: number }, _req: Request, res: Response, _next: NextFunction) => {
        errors++;
        res.status(error.status ?? 500).json({ error: error.message });
        settle();
      });
      const server = createServer(app).listen(0, '127.0.0.1');
      servers.push(server);
      await once(server, 'listening');
      const { port } = server.address() as AddressInfo;

      const first = post(port, type, 'k');
      await waiting;
      if (leaves) {
        const socket = serverRequest?.socket;
        const closed = new Promise((resolve) => socket?.once('close', resolve));
        first.outcome.catch(() => undefined);
        first.client.destroy();
        await closed;
      }
      release();
      await settled;
      const firstOutcome = leaves ? undefined : await first.outcome;
      const retry = await post(port, type, 'k').outcome;

      // Whatever the handler saw is the parsed form of the bytes the fingerprint hashed.
      for (const body of handlerSaw) expect(body).toBe(type.expected);
      expect(retry.status).toBe(201);
      expect(JSON.parse(retry.body)).toEqual({ saw: type.expected });
      expect(handlerSaw).toHaveLength(1);
      // With the parser after the middleware and the client gone, the handler would no longer get the
      // bytes: it does not run, nothing is saved, and the retry runs it. Otherwise the first run is saved.
      const savedByFirst = !(leaves && !parserBefore);
      expect(retry.replayed).toBe(savedByFirst);
      expect(errors).toBe(savedByFirst ? 0 : 1);
      if (firstOutcome) expect(firstOutcome.status).toBe(201);
    });
  });
});
