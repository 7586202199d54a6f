import { Readable } from 'node:stream';
import {
  Body,
  ConflictException,
  HttpCode,
  Module,
  Post,
  Res,
  StreamableFile,
  type INestApplication,
  type Type,
} from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { afterEach, describe, expect, it } from 'vitest';
import { type Receiver } from '../../src/core/receiver.js';
import { createReceiver } from '../../src/receiver.js';
import { Idempotency, Idempotent, IdempotencyModule, type IdempotencyContext } from '../../src/http/nestjs.js';
import { createMemoryStore } from '../../src/stores/memory.js';
import { controller, listen, nestDriver, respond, startNest, type PlatformResponse, type Platform } from './nestjs-driver.js';
import { BINARY, httpScenarios, transactionalScenarios } from './scenarios.js';
import { gate, type TestClient, type TestRequest } from '../support/http.js';

const platforms = ['express', 'fastify'] as const satisfies readonly Platform[];

for (const platform of platforms) {
  httpScenarios(nestDriver(platform));
  transactionalScenarios(nestDriver(platform));
}

describe.each(platforms)('nestjs module (%s)', (platform) => {
  const clients: TestClient[] = [];
  afterEach(async () => {
    await Promise.all(clients.splice(0).map((client) => client.close()));
  });

  const receiver = (): Receiver => createReceiver({ store: createMemoryStore() });

  async function serve(controllers: Parameters<typeof startNest>[2], options: Partial<Parameters<typeof startNest>[1]> = {}): Promise<TestClient> {
    const { client } = await startNest(platform, { receiver: receiver(), ...options }, controllers);
    clients.push(client);
    return client;
  }

  const post = (path: string, key?: string, body = '{"b":2,"a":1}'): TestRequest => ({
    method: 'POST',
    path,
    headers: { 'content-type': 'application/json', ...(key !== undefined && { 'idempotency-key': key }) },
    body,
  });

  it('honours @Idempotent() on routes and controllers; the route wins over its controller', async () => {
    let calls = 0;
    class Routes {
      optional(): unknown {
        return { n: ++calls };
      }
      off(): unknown {
        return { n: ++calls };
      }
      on(): unknown {
        return { n: ++calls };
      }
    }
    controller(Routes, {
      optional: { decorators: [Post('optional'), Idempotent({ required: false })] },
      off: { decorators: [Post('off'), Idempotent({ enabled: false })] },
      on: { decorators: [Post('on')] },
    });
    class Relaxed {
      relaxed(): unknown {
        return { n: ++calls };
      }
      strict(): unknown {
        return { n: ++calls };
      }
    }
    controller(Relaxed, { relaxed: { decorators: [Post('relaxed')] }, strict: { decorators: [Post('strict'), Idempotent({ required: true })] } }, 'c');
    Idempotent({ required: false })(Relaxed);
    const client = await serve([Routes, Relaxed]);

    expect((await client.request(post('/optional'))).status).toBe(201);
    expect((await client.request(post('/optional', 'k1'))).header('idempotent-replayed')).toBeUndefined();
    expect((await client.request(post('/optional', 'k1'))).header('idempotent-replayed')).toBe('true');
    const off = [await client.request(post('/off', 'k2')), await client.request(post('/off', 'k2'))];
    expect(off.map((r) => r.header('idempotent-replayed'))).toEqual([undefined, undefined]);
    expect((await client.request(post('/on'))).status).toBe(400);
    expect((await client.request(post('/c/relaxed'))).status).toBe(201);
    expect((await client.request(post('/c/strict'))).status).toBe(400);
    expect(calls).toBe(5);
  });

  it('runs parallel duplicates exactly once per key: 5 keys × 8 requests', async () => {
    const executions = new Map<string, number>();
    const held = gate();
    class Payments {
      async pay(idempotency: IdempotencyContext<undefined> | undefined): Promise<unknown> {
        const key = idempotency?.key ?? 'none';
        executions.set(key, (executions.get(key) ?? 0) + 1);
        await held.promise;
        return { paid: key };
      }
    }
    controller(Payments, { pay: { decorators: [Post('payments')], params: [Idempotency()] } });
    const client = await serve([Payments], { receiver: createReceiver({ store: createMemoryStore(), inFlight: 'wait' }) });
    const keys = ['a', 'b', 'c', 'd', 'e'];
    const responses = Promise.all(keys.flatMap((key) => Array.from({ length: 8 }, () => client.request(post('/payments', key)))));
    // Each key's first request is running; the other 35 are waiting on it.
    while (executions.size < keys.length) await new Promise((resolve) => setImmediate(resolve));
    held.open();
    const settled = await responses;
    expect(Object.fromEntries(executions)).toEqual({ a: 1, b: 1, c: 1, d: 1, e: 1 });
    expect(settled.map((r) => r.status)).toEqual(Array(40).fill(201));
    for (const [i, key] of keys.entries()) {
      const group = settled.slice(i * 8, i * 8 + 8);
      expect(group.filter((r) => r.header('idempotent-replayed') === undefined)).toHaveLength(1);
      for (const r of group) expect(JSON.parse(r.body.toString('utf8'))).toEqual({ paid: key });
    }
  });

  it('saves a 4xx the handler returns, and releases the key when it throws an HttpException', async () => {
    let calls = 0;
    class Accounts {
      missing(): unknown {
        calls++;
        return { error: 'no such account' };
      }
      conflict(): unknown {
        calls++;
        throw new ConflictException('balance changed');
      }
    }
    controller(Accounts, {
      missing: { decorators: [Post('missing'), HttpCode(404)] },
      conflict: { decorators: [Post('conflict')] },
    });
    const client = await serve([Accounts]);
    const first = await client.request(post('/missing', 'm'));
    const retry = await client.request(post('/missing', 'm'));
    expect([first.status, retry.status]).toEqual([404, 404]);
    expect(retry.header('idempotent-replayed')).toBe('true');
    expect(retry.body.equals(first.body)).toBe(true);
    const thrown = [await client.request(post('/conflict', 'c')), await client.request(post('/conflict', 'c'))];
    expect(thrown.map((r) => r.status)).toEqual([409, 409]);
    expect(thrown.map((r) => r.header('idempotent-replayed'))).toEqual([undefined, undefined]);
    expect(JSON.parse(thrown[1]?.body.toString('utf8') ?? '')).toMatchObject({ message: 'balance changed' });
    expect(calls).toBe(3);
  });

  it('captures what a @Res() handler writes itself, and replays it on that route', async () => {
    let calls = 0;
    class Raw {
      write(res: PlatformResponse): void {
        calls++;
        const send = respond(res, { status: 202, headers: { 'content-type': 'application/octet-stream', etag: '"v1"' } });
        expect(send).toBeUndefined();
        if ('raw' in res) void res.send(Buffer.from(BINARY));
        else res.end(Buffer.from(BINARY));
      }
    }
    controller(Raw, { write: { decorators: [Post('raw')], params: [Res()] } });
    const client = await serve([Raw]);
    const first = await client.request(post('/raw', 'r'));
    const retry = await client.request(post('/raw', 'r'));
    expect(first.status).toBe(202);
    expect(first.body.equals(Buffer.from(BINARY))).toBe(true);
    expect(retry.status).toBe(202);
    expect(retry.header('etag')).toBe('"v1"');
    expect(retry.header('idempotent-replayed')).toBe('true');
    expect(retry.body.equals(first.body)).toBe(true);
    expectProblem(await client.request(post('/raw', 'r', '{}')), 422);
    expectProblem(await client.request(post('/raw')), 400);
    expect(calls).toBe(1);
  });

  it('replays a streamed StreamableFile byte for byte', async () => {
    let calls = 0;
    class Files {
      download(): StreamableFile {
        calls++;
        return new StreamableFile(Readable.from([Buffer.from(BINARY.subarray(0, 100)), Buffer.from(BINARY.subarray(100))]), { type: 'application/x-bin' });
      }
    }
    controller(Files, { download: { decorators: [Post('files')] } });
    const client = await serve([Files]);
    const first = await client.request(post('/files', 'f'));
    const retry = await client.request(post('/files', 'f'));
    expect(first.body.equals(Buffer.from(BINARY))).toBe(true);
    expect(retry.body.equals(Buffer.from(BINARY))).toBe(true);
    expect(retry.header('content-type')).toBe('application/x-bin');
    expect(calls).toBe(1);
  });

  it('fingerprints the raw body (rawBody: true) and still hands the handler the parsed @Body()', async () => {
    const seen: unknown[] = [];
    class Echo {
      echo(body: unknown): unknown {
        seen.push(body);
        return body;
      }
    }
    controller(Echo, { echo: { decorators: [Post('echo')], params: [Body()] } });
    const client = await serve([Echo]);
    expect((await client.request(post('/echo', 'e', '{"b":[1,2],"a":"x"}'))).status).toBe(201);
    expect(seen).toEqual([{ b: [1, 2], a: 'x' }]);
    // Raw bytes: the same JSON with another key order is another request.
    expectProblem(await client.request(post('/echo', 'e', '{"a":"x","b":[1,2]}')), 422);
  });

  it('answers a body over Nest\'s parser limit (100 kB) but under maxBodyBytes as the other adapters do: express a 413 problem, fastify (1 MiB limit) runs it', async () => {
    let runs = 0;
    class Big {
      big(): unknown {
        runs++;
        return { ok: true };
      }
    }
    controller(Big, { big: { decorators: [Post('big')] } });
    const client = await serve([Big], { required: false });
    const body = JSON.stringify({ pad: 'x'.repeat(200_000) });
    const keyed = await client.request(post('/big', 'big-1', body));
    const unkeyed = await client.request(post('/big', undefined, body));
    if (platform === 'express') {
      expect(keyed.status).toBe(413);
      expect(keyed.header('content-type')).toMatch(/^application\/problem\+json/);
      const problem = JSON.parse(keyed.body.toString()) as { status: number; type: string; detail: string };
      expect(problem.status).toBe(413);
      expect(problem.type).toMatch(/idempotency-request-too-large$/);
      expect(problem.detail).toContain('102400');
      // No key on an optional route: the pipeline passes it, and Nest answers its own 413.
      expect(unkeyed.status).toBe(413);
      expect(unkeyed.header('content-type')).toMatch(/^application\/json/);
      expect(runs).toBe(0);
    } else {
      expect([keyed.status, unkeyed.status]).toEqual([201, 201]);
      expect(runs).toBe(2);
    }
    // Over maxBodyBytes (and, on Fastify, over its own 1 MiB bodyLimit, which answers first as before): a 413.
    const over = await client.request(post('/big', 'big-2', JSON.stringify({ pad: 'x'.repeat(1_100_000) })));
    expect(over.status).toBe(413);
    expect(runs).toBe(platform === 'express' ? 0 : 2);
  });

  it('builds its options with forRootAsync from injected providers, and refuses bad ones with a TypeError naming the option', async () => {
    let calls = 0;
    class Ping {
      ping(): unknown {
        return { n: ++calls };
      }
    }
    controller(Ping, { ping: { decorators: [Post('ping')] } });
    const RECEIVER = Symbol('receiver');
    class StoreModule {}
    Module({ providers: [{ provide: RECEIVER, useFactory: receiver }], exports: [RECEIVER] })(StoreModule);
    class AppModule {}
    Module({
      imports: [IdempotencyModule.forRootAsync({ imports: [StoreModule], inject: [RECEIVER], useFactory: (r: Receiver) => ({ receiver: r, required: false }) })],
      controllers: [Ping],
    })(AppModule);
    const client = await listen(await create(AppModule));
    clients.push(client);
    // required: false came from the factory.
    expect((await client.request(post('/ping'))).status).toBe(201);
    await client.request(post('/ping', 'p'));
    expect((await client.request(post('/ping', 'p'))).header('idempotent-replayed')).toBe('true');
    expect(calls).toBe(2);

    expect(() => IdempotencyModule.forRoot({ receiver: receiver(), replayHeaders: ['set-cookie'] })).toThrow(/option "replayHeaders"/);
    expect(() => Idempotent({ required: 'yes' } as never)).toThrow(/option "required"/);
    class BadModule {}
    Module({ imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ receiver: receiver(), methods: [] }) })] })(BadModule);
    await expect(create(BadModule)).rejects.toThrow(TypeError);
  });

  async function create(module: Type): Promise<INestApplication> {
    const { ExpressAdapter } = await import('@nestjs/platform-express');
    const { FastifyAdapter } = await import('@nestjs/platform-fastify');
    return NestFactory.create(module, platform === 'express' ? new ExpressAdapter() : new FastifyAdapter(), { logger: false, abortOnError: false });
  }

  function expectProblem(res: Awaited<ReturnType<TestClient['request']>>, status: number): void {
    expect(res.status).toBe(status);
    expect(res.header('content-type')).toMatch(/^application\/problem\+json/);
  }
});

describe('nestjs module (express, bodyParser: false)', () => {
  it('reads a JSON body no parser read, fingerprints its bytes, hands it on parsed, and answers invalid JSON 400 before claiming', async () => {
    const seen: unknown[] = [];
    class Echo {
      echo(body: unknown): unknown {
        seen.push(body);
        return { ok: true };
      }
    }
    controller(Echo, { echo: { decorators: [Post('echo')], params: [Body()] } });
    const store = createMemoryStore();
    class AppModule {}
    Module({ imports: [IdempotencyModule.forRoot({ receiver: createReceiver({ store }) })], controllers: [Echo] })(AppModule);
    const { ExpressAdapter } = await import('@nestjs/platform-express');
    const client = await listen(await NestFactory.create(AppModule, new ExpressAdapter(), { bodyParser: false, logger: false }));
    try {
      const post = (key: string, body: string): TestRequest => ({ method: 'POST', path: '/echo', headers: { 'content-type': 'application/json', 'idempotency-key': key }, body });
      expect((await client.request(post('e', '{"b":2,"a":1}'))).status).toBe(201);
      expect(seen).toEqual([{ b: 2, a: 1 }]);
      // Raw bytes: the same JSON with another key order is another request.
      expect((await client.request(post('e', '{"a":1,"b":2}'))).status).toBe(422);
      expect((await client.request(post('bad', '{"a":'))).status).toBe(400);
      expect(await store.get('', 'bad')).toBeUndefined();
      expect(seen).toHaveLength(1);
    } finally {
      await client.close();
    }
  });
});
