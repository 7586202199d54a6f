import { once } from 'node:events';
import { createServer, request, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import express, { type Express, type NextFunction, type Request, type Response } from 'express';
import { afterEach, describe, expect, it } from 'vitest';
import { type Receiver } from '../../src/core/receiver.js';
import { createReceiver } from '../../src/receiver.js';
import { idempotency } from '../../src/http/express.js';
import { createMemoryStore } from '../../src/stores/memory.js';
import { express4Factory, expressDriver, supertestClient } from './express-driver.js';
import { BINARY, httpScenarios, transactionalScenarios } from './scenarios.js';
import type { TestClient, TestRequest } from '../support/http.js';

httpScenarios(expressDriver('express 5', express));
httpScenarios(expressDriver('express 4', express4Factory));
transactionalScenarios(expressDriver('express 5', express));
transactionalScenarios(expressDriver('express 4', express4Factory));

describe('express adapter', () => {
  const clients: TestClient[] = [];
  afterEach(async () => {
    await Promise.all(clients.splice(0).map((client) => client.close()));
  });

  async function serve(configure: (app: Express, receiver: Receiver) => void): Promise<TestClient> {
    const app = express();
    configure(app, createReceiver({ store: createMemoryStore() }));
    app.use((error: Error & { status?: number }, _req: Request, res: Response, _next: NextFunction) => {
      res.status(error.status ?? 500).json({ error: error.message });
    });
    const client = await supertestClient(app);
    clients.push(client);
    return client;
  }

  const withKey = (key: string, body = '{"b":2,"a":1}'): TestRequest => ({
    method: 'POST',
    path: '/x',
    headers: { 'idempotency-key': key, 'content-type': 'application/json' },
    body,
  });

  it.each<[string, (res: Response) => void]>([
    ['res.json', (res) => res.status(201).json({ ok: true })],
    ['res.send(Buffer)', (res) => res.status(201).type('application/octet-stream').send(Buffer.from(BINARY))],
    ['res.end()', (res) => res.status(202).end()],
    ['res.write() + res.end()', (res) => {
      res.status(201).setHeader('content-type', 'text/plain');
      res.write('part one, ');
      res.write(Buffer.from('part two, '));
      res.end('end');
    }],
    ['res.writeHead', (res) => {
      res.writeHead(201, { 'content-type': 'text/plain', location: '/x/1' });
      res.end('written');
    }],
    ['res.writeHead with a reason phrase', (res) => {
      res.writeHead(201, 'Made', ['content-type', 'text/plain']);
      res.end('reasoned');
    }],
  ])('captures and replays a response sent with %s', async (_label, send) => {
    let calls = 0;
    const client = await serve((app, receiver) => {
      app.post('/x', idempotency({ receiver }), (_req, res) => {
        calls++;
        send(res);
      });
    });
    const first = await client.request(withKey('k'));
    const retry = await client.request(withKey('k'));
    expect(calls).toBe(1);
    expect(retry.status).toBe(first.status);
    expect(retry.header('content-type')).toBe(first.header('content-type'));
    expect(retry.header('idempotent-replayed')).toBe('true');
    expect(retry.body.equals(first.body)).toBe(true);
    expect(first.header('content-length')).toBe(String(first.body.byteLength));
  });

  it("sends through an earlier middleware's own res.end, and leaves no stand-in writer on a response it held", async () => {
    let ends = 0;
    const leftOwn: string[][] = [];
    const client = await serve((app, receiver) => {
      app.use('/wrapped', (_req, res, next) => {
        // As compression or on-headers do: the middleware's own `end`, set on this response object.
        const end = res.end.bind(res) as (...args: unknown[]) => unknown;
        (res as unknown as { end: (...args: unknown[]) => unknown }).end = (...args: unknown[]) => {
          ends++;
          return end(...args);
        };
        next();
      });
      const handler = (_req: Request, res: Response): void => {
        res.once('finish', () => leftOwn.push(['writeHead', 'flushHeaders', 'write', 'end'].filter((name) => Object.hasOwn(res, name))));
        res.status(201).json({ ok: true });
      };
      app.post('/wrapped', idempotency({ receiver }), handler);
      app.post('/plain', idempotency({ receiver }), handler);
    });
    const first = await client.request({ ...withKey('k'), path: '/wrapped' });
    const retry = await client.request({ ...withKey('k'), path: '/wrapped' });
    expect([first.status, retry.status]).toEqual([201, 201]);
    expect(retry.header('idempotent-replayed')).toBe('true');
    // Once for the held response, once for the replay: the middleware's wrapper was put back, not dropped.
    expect(ends).toBe(2);
    expect((await client.request({ ...withKey('k2'), path: '/plain' })).status).toBe(201);
    // The held responses keep only what they had of their own before the hold.
    expect(leftOwn).toEqual([['end'], []]);
  });

  it('leaves no property of its own on req or res from turning them into dictionaries', async () => {
    const seen: (string | undefined)[][] = [];
    const client = await serve((app, receiver) => {
      app.post('/x', idempotency({ receiver }), (req, res) => {
        seen.push([...Object.getOwnPropertySymbols(req), ...Object.getOwnPropertySymbols(res)].map((symbol) => symbol.description));
        res.status(201).json({ ok: true });
      });
    });
    expect((await client.request(withKey('k'))).status).toBe(201);
    expect(seen).toHaveLength(1);
    expect(seen[0]).not.toContain('retrysafe.scratch');
  });

  it('holds and saves a response sent from a mounted sub-app, which sets its own prototype on res', async () => {
    // A sub-app swaps the response's prototype for its own (Express's mounted-app handling): the capture
    // must survive that, or the response would go out unsaved and the retry meet a key still in progress.
    let calls = 0;
    const client = await serve((app, receiver) => {
      const sub = express();
      sub.post('/x', (_req, res) => {
        calls++;
        res.status(201).json({ n: calls });
      });
      app.use(idempotency({ receiver }));
      app.use(sub);
    });
    const first = await client.request(withKey('k'));
    const retry = await client.request(withKey('k'));
    expect(first.status).toBe(201);
    expect(calls).toBe(1);
    expect(retry.status).toBe(201);
    expect(retry.header('idempotent-replayed')).toBe('true');
    expect(retry.body.equals(first.body)).toBe(true);
  });

  it('sends the error handler output of a synchronous throw and releases the key', async () => {
    let calls = 0;
    const client = await serve((app, receiver) => {
      app.post('/x', idempotency({ receiver }), () => {
        calls++;
        if (calls === 1) throw new Error('sync boom');
        throw Object.assign(new Error('teapot'), { status: 418 });
      });
    });
    const first = await client.request(withKey('k'));
    expect(first.status).toBe(500);
    expect(JSON.parse(first.body.toString('utf8'))).toEqual({ error: 'sync boom' });
    const second = await client.request(withKey('k'));
    expect(calls).toBe(2);
    // The error handler answered 418: a 4xx is saved like any other.
    expect(second.status).toBe(418);
    expect((await client.request(withKey('k'))).header('idempotent-replayed')).toBe('true');
    expect(calls).toBe(2);
  });

  it('releases the key when the handler passes an error to next()', async () => {
    let calls = 0;
    const client = await serve((app, receiver) => {
      app.post('/x', idempotency({ receiver }), (_req, _res, next) => {
        calls++;
        next(new Error('async boom'));
      });
    });
    expect((await client.request(withKey('k'))).status).toBe(500);
    expect((await client.request(withKey('k'))).status).toBe(500);
    expect(calls).toBe(2);
  });

  it('does not leave the key stuck when the handler writes part of a response and then throws', async () => {
    let calls = 0;
    const client = await serve((app, receiver) => {
      app.post('/x', idempotency({ receiver }), (_req, res) => {
        calls++;
        if (calls === 1) {
          res.status(200).write('partial');
          throw new Error('midway');
        }
        res.status(201).json({ ok: true });
      });
    });
    const first = await client.request(withKey('k'));
    expect(first.status).toBe(500);
    expect(first.header('content-length')).toBe(String(first.body.byteLength));
    const retry = await client.request(withKey('k'));
    expect(retry.status).toBe(201);
    expect(calls).toBe(2);
  });

  it('reads an unread body, keeps it as req.rawBody and hands a later express.json() a parsed body', async () => {
    const seen: unknown[] = [];
    const client = await serve((app, receiver) => {
      app.use(idempotency({ receiver }));
      app.use(express.json());
      app.post('/x', (req, res) => {
        seen.push(req.body, req.rawBody?.toString('utf8'));
        res.status(201).json(req.body);
      });
    });
    const res = await client.request(withKey('k'));
    expect(res.status).toBe(201);
    expect(seen).toEqual([{ b: 2, a: 1 }, '{"b":2,"a":1}']);
    // Raw bytes: the same JSON with another key order is another request.
    expect((await client.request(withKey('k', '{"a":1,"b":2}'))).status).toBe(422);
  });

  it('answers invalid JSON it had to parse with 400 through the error handler, before claiming', async () => {
    let calls = 0;
    const client = await serve((app, receiver) => {
      app.post('/x', idempotency({ receiver }), (_req, res) => {
        calls++;
        res.end();
      });
    });
    expect((await client.request(withKey('k', '{"a":'))).status).toBe(400);
    expect(calls).toBe(0);
  });

  it('fingerprints an already-parsed body as canonical JSON, so key order does not matter', async () => {
    let calls = 0;
    const client = await serve((app, receiver) => {
      app.use(express.json());
      app.post('/x', idempotency({ receiver }), (req, res) => {
        calls++;
        res.status(201).json(req.body);
      });
    });
    await client.request(withKey('k'));
    const reordered = await client.request(withKey('k', '{"a":1,"b":2}'));
    expect(reordered.header('idempotent-replayed')).toBe('true');
    expect((await client.request(withKey('k', '{"a":1,"b":3}'))).status).toBe(422);
    expect(calls).toBe(1);
  });

  it('prefers req.rawBody kept by a parser verify hook', async () => {
    let calls = 0;
    const client = await serve((app, receiver) => {
      app.use(express.json({ verify: (req, _res, buf) => void ((req as Request).rawBody = buf) }));
      app.post('/x', idempotency({ receiver }), (_req, res) => {
        calls++;
        res.status(201).end();
      });
    });
    await client.request(withKey('k'));
    expect((await client.request(withKey('k', '{"a":1,"b":2}'))).status).toBe(422);
    expect(calls).toBe(1);
  });

  it.each<[string, (app: Express) => void]>([
    ['canonical JSON of req.body (express.json())', (app) => app.use(express.json())],
    ['req.rawBody (a verify hook)', (app) => app.use(express.json({ verify: (req, _res, buf) => void ((req as Request).rawBody = buf) }))],
  ])('answers 413 to a body a parser before it read, fingerprinted as %s, when over maxBodyBytes, before claiming', async (_label, parser) => {
    let calls = 0;
    const app = express();
    parser(app);
    const store = createMemoryStore();
    app.post('/x', idempotency({ receiver: createReceiver({ store }), maxBodyBytes: 12 }), (_req, res) => {
      calls++;
      res.status(201).end();
    });
    const server = createServer(app).listen(0, '127.0.0.1');
    await once(server, 'listening');
    try {
      const { port } = server.address() as AddressInfo;
      // Chunked, so no Content-Length announces the size: the body the parser read is measured itself.
      const post = async (body: string): Promise<number> => {
        const req = request({ host: '127.0.0.1', port, method: 'POST', path: '/x', headers: { 'idempotency-key': 'k', 'content-type': 'application/json', 'transfer-encoding': 'chunked' } });
        const answered = once(req, 'response') as Promise<[IncomingMessage]>;
        req.end(body);
        const [res] = await answered;
        res.resume();
        return res.statusCode ?? 0;
      };
      expect(await post('{"b":2,"a":100}')).toBe(413);
      expect(await store.get('', 'k')).toBeUndefined();
      expect(calls).toBe(0);
      expect(await post('{"a":1}')).toBe(201);
      expect(calls).toBe(1);
    } finally {
      server.close();
    }
  });

  it('scopes by a function of the request and hands the handler req.idempotency', async () => {
    const seen: unknown[] = [];
    const client = await serve((app, receiver) => {
      app.post('/x', idempotency({ receiver, scope: (req) => `tenant:${req.get('x-tenant') ?? '-'}` }), (req, res) => {
        seen.push({ key: req.idempotency?.key, scope: req.idempotency?.scope, takeover: req.idempotency?.claim.takeover });
        res.status(201).end();
      });
    });
    await client.request({ ...withKey('k'), headers: { ...withKey('k').headers, 'x-tenant': 'acme' } });
    expect(seen).toEqual([{ key: 'k', scope: 'tenant:acme', takeover: false }]);
  });

  it.each<[string, Record<string, unknown>]>([
    ['receiver', { receiver: {} }],
    ['required', { required: 'yes' }],
    ['methods', { methods: [] }],
    ['methods', { methods: ['PO ST'] }],
    ['scope', { scope: 'tenant' }],
    ['route', { route: '/x' }],
    ['replayHeaders', { replayHeaders: ['content-type', 'set-cookie'] }],
    ['replayHeaders', { replayHeaders: ['Content-Type'] }],
    ['problemTypeBase', { problemTypeBase: 3 }],
    ['retryAfterSeconds', { retryAfterSeconds: 1.5 }],
    ['maxBodyBytes', { maxBodyBytes: -1 }],
    ['maxResponseBytes', { maxResponseBytes: 1.5 }],
    ['maxResponseBytes', { maxResponseBytes: '1mb' }],
    ['replayHeaders', { replayHeaders: ['retrysafe-response-not-kept'] }],
  ])('refuses a bad option %s at creation with a TypeError naming it', (name, bad) => {
    const receiver = createReceiver({ store: createMemoryStore() });
    expect(() => idempotency({ receiver, ...bad } as never)).toThrow(new RegExp(`option "${name}"`));
    expect(() => idempotency({ receiver, ...bad } as never)).toThrow(TypeError);
  });
});
