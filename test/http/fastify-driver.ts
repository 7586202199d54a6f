/**
 * Fastify drivers for the shared HTTP scenarios: `app.inject()` as the client (the plugin reads a payload
 * stream that is not a Node `IncomingMessage`, and hands Fastify a new one), and a listening server with
 * supertest as the client (the plugin peeks at the `IncomingMessage` and Fastify reads it itself).
 */
import { Readable } from 'node:stream';
import Fastify, { type FastifyInstance } from 'fastify';
import { idempotency } from '../../src/http/fastify.js';
import { headerEntries, serverClient, type Driver, type ScenarioOptions, type TestClient, type TestHandler, type TestResponse } from '../support/http.js';

export const fastifyDriver: Driver = {
  name: 'fastify',
  detectsThrows: true,
  async start(options, handler) {
    return injectClient(await scenarioApp(options, handler));
  },
};

export const fastifySocketDriver: Driver = {
  name: 'fastify over a socket',
  detectsThrows: true,
  async start(options, handler) {
    const app = await scenarioApp(options, handler);
    await app.listen({ port: 0, host: '127.0.0.1' });
    return serverClient(app.server, () => app.close());
  },
};

/** The scenarios' app: the plugin in front of `handler` on every path, any content type read as bytes. */
async function scenarioApp(options: ScenarioOptions, handler: TestHandler): Promise<FastifyInstance> {
  const app = Fastify({ logger: false });
  app.addContentTypeParser('*', { parseAs: 'buffer' }, (_request, body, done) => done(null, body));
  await app.register(idempotency, { ...options, scope: (request) => joined(request.headers['x-tenant']) });
  app.all('/*', async (request, reply) => {
    const queryAt = request.url.indexOf('?');
    const reply_ = await handler({
      method: request.method,
      path: queryAt === -1 ? request.url : request.url.slice(0, queryAt),
      idempotency: request.idempotency,
    });
    reply.code(reply_.status);
    for (const [name, value] of headerEntries(reply_)) reply.header(name, value);
    if (reply_.chunks) return reply.send(Readable.from(reply_.chunks.map((chunk) => Buffer.from(chunk))));
    return reply.send(reply_.body === undefined ? undefined : typeof reply_.body === 'string' ? reply_.body : Buffer.from(reply_.body));
  });
  return app;
}

function joined(value: string | string[] | undefined): string {
  return Array.isArray(value) ? value.join(', ') : (value ?? '');
}

export async function injectClient(app: FastifyInstance): Promise<TestClient> {
  await app.ready();
  return {
    async request(req): Promise<TestResponse> {
      const res = await app.inject({
        method: req.method as 'POST',
        url: req.path,
        headers: req.headers ?? {},
        ...(req.body !== undefined && { payload: typeof req.body === 'string' ? req.body : Buffer.from(req.body) }),
      });
      const headers = res.headers as Record<string, string | string[] | number | undefined>;
      return {
        status: res.statusCode,
        header: (name) => {
          const value = headers[name];
          return value === undefined ? undefined : Array.isArray(value) ? value.join(', ') : String(value);
        },
        cookies: [headers['set-cookie'] ?? []].flat().map(String),
        body: res.rawPayload,
      };
    },
    close: () => app.close(),
  };
}
