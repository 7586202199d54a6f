/**
 * NestJS drivers for the shared HTTP scenarios, one per platform (Express, Fastify), over a real socket
 * with `fetch` as the client. The controllers are decorated through Nest's decorator functions called
 * directly, so the test files need no decorator compiler settings.
 */
import 'reflect-metadata';
import type { AddressInfo } from 'node:net';
import type { Server, ServerResponse } from 'node:http';
import { Readable } from 'node:stream';
import { All, Controller, Module, Req, Res, StreamableFile, type INestApplication, type Type } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { ExpressAdapter } from '@nestjs/platform-express';
import { FastifyAdapter, type NestFastifyApplication } from '@nestjs/platform-fastify';
import type { FastifyReply } from 'fastify';
import { Idempotency, IdempotencyModule, type NestRequest } from '../../src/http/nestjs.js';
import type { IdempotencyOptions } from '../../src/http/pipeline.js';
import { headerEntries, type Driver, type HandlerReply, type TestClient, type TestResponse } from '../support/http.js';

export type Platform = 'express' | 'fastify';

/** A platform's response: Express's `res` or Fastify's `reply`. */
export type PlatformResponse = ServerResponse | FastifyReply;

/** Sets a status and headers on either platform's response (`@Res({ passthrough: true })`). */
export function respond(res: PlatformResponse, reply: HandlerReply): unknown {
  if ('raw' in res) {
    res.code(reply.status);
    for (const [name, value] of headerEntries(reply)) res.header(name, value);
  } else {
    res.statusCode = reply.status;
    for (const [name, value] of headerEntries(reply)) res.setHeader(name, value);
  }
  if (reply.chunks) return new StreamableFile(Readable.from(reply.chunks.map((chunk) => Buffer.from(chunk))));
  if (reply.body === undefined) return undefined;
  // A Buffer would be sent as JSON by Nest; a StreamableFile keeps the bytes.
  return typeof reply.body === 'string' ? reply.body : new StreamableFile(Buffer.from(reply.body));
}

/**
 * Decorates `controller` as a Nest controller whose `routes` map method names to decorators (a route
 * decorator first, then any others) and parameter decorators.
 */
export function controller(
  target: Type,
  routes: Record<string, { readonly decorators: readonly MethodDecorator[]; readonly params?: readonly ParameterDecorator[] }>,
  prefix = '',
): Type {
  const prototype = target.prototype as object;
  for (const [method, { decorators, params = [] }] of Object.entries(routes)) {
    const descriptor = Object.getOwnPropertyDescriptor(prototype, method);
    if (!descriptor) throw new Error(`no method ${method}`);
    // Applied bottom-up, as TypeScript applies stacked decorators.
    for (const decorate of [...decorators].reverse()) decorate(prototype, method, descriptor);
    params.forEach((decorate, index) => decorate(prototype, method, index));
  }
  Controller(prefix)(target);
  return target;
}

/** Starts a Nest application of `controllers` with the idempotency module, listening on a free port. */
export async function startNest(
  platform: Platform,
  options: IdempotencyOptions<NestRequest, unknown>,
  controllers: readonly Type[],
  configure: (app: INestApplication) => void = () => undefined,
): Promise<{ app: INestApplication; client: TestClient }> {
  class AppModule {}
  Module({ imports: [IdempotencyModule.forRoot(options)], controllers: [...controllers] })(AppModule);
  let app: INestApplication;
  if (platform === 'express') {
    app = await NestFactory.create(AppModule, new ExpressAdapter(), { rawBody: true, logger: false });
  } else {
    const fastify = await NestFactory.create<NestFastifyApplication>(AppModule, new FastifyAdapter(), { rawBody: true, logger: false });
    fastify.getHttpAdapter().getInstance().addContentTypeParser('*', { parseAs: 'buffer' }, (_request, body, done) => done(null, body));
    app = fastify;
  }
  configure(app);
  return { app, client: await listen(app) };
}

/** Listens on a free port of 127.0.0.1 and returns a client of it that closes the application. */
export async function listen(app: INestApplication): Promise<TestClient> {
  await app.listen(0, '127.0.0.1');
  const server = app.getHttpServer() as Server;
  const { port } = server.address() as AddressInfo;
  return socketClient(`http://127.0.0.1:${port}`, () => app.close());
}

/** A `fetch` client of a listening server. */
function socketClient(base: string, close: () => Promise<void>): TestClient {
  return {
    async request(req): Promise<TestResponse> {
      const res = await fetch(`${base}${req.path}`, {
        method: req.method,
        headers: req.headers ?? {},
        ...(req.body !== undefined && { body: req.body }),
        ...(req.timeoutMs !== undefined && { signal: AbortSignal.timeout(req.timeoutMs) }),
      });
      const body = Buffer.from(await res.arrayBuffer());
      return { status: res.status, header: (name) => res.headers.get(name) ?? undefined, cookies: res.headers.getSetCookie(), body };
    },
    close,
  };
}

export function nestDriver(platform: Platform): Driver {
  return {
    name: `nestjs (${platform})`,
    detectsThrows: true,
    async start(options, handler) {
      class ScenarioController {
        async handle(req: NestRequest, res: PlatformResponse, idempotency: Parameters<typeof handler>[0]['idempotency']): Promise<unknown> {
          const queryAt = req.url.indexOf('?');
          const reply = await handler({ method: req.method, path: queryAt === -1 ? req.url : req.url.slice(0, queryAt), idempotency });
          return respond(res, reply);
        }
      }
      controller(ScenarioController, {
        handle: { decorators: [All(['payments', 'ping', 'refunds'])], params: [Req(), Res({ passthrough: true }), Idempotency()] },
      });
      const scope = (req: NestRequest): string => [req.headers['x-tenant'] ?? ''].flat().join(', ');
      const { client } = await startNest(platform, { ...options, scope }, [ScenarioController]);
      return client;
    },
  };
}
