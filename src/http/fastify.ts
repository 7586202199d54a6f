/**
 * Idempotency-Key plugin for Fastify 5, built with `fastify-plugin` so its hooks apply to every route of
 * the instance it is registered on. Behaviour: see {@link HttpPipeline.handle}.
 *
 * The plugin puts its own `application/json` parser in place of Fastify's default one: the same parser
 * (Fastify's `getDefaultJsonParser`, with the instance's `onProtoPoisoning`, `onConstructorPoisoning` and
 * `bodyLimit`), which also keeps the body text it read, so a JSON request is fingerprinted over that text
 * without being read twice. An application with a JSON parser of its own registers it before the plugin
 * (after `removeContentTypeParser('application/json')`); the plugin then peeks at the bytes as it does for
 * other bodies. A JSON parser swapped in after the plugin makes the fingerprint hash the parsed body
 * (object keys sorted) instead.
 *
 * Hooks:
 * - `preParsing` keeps the raw body bytes for the fingerprint (only on requests that carry a key, on
 *   methods the plugin acts on, and not on a JSON body its parser reads; a body over `maxBodyBytes` is
 *   answered there with a 413 problem, before any claim, and the request goes no further; a chunked JSON
 *   body over it is answered so from `preHandler`). On a Node `IncomingMessage` that no earlier hook
 *   replaced, the bytes are peeked and pushed back onto it, so Fastify's parser reads the request itself;
 *   any other payload stream is read to its end and handed on as a new stream over the same bytes.
 * - `preHandler` claims the key and either answers (replay, problem) or lets the handler run.
 * - `onError` marks a handler that threw.
 * - `onSend` captures the serialized response, holds it until the receiver has saved it (in transactional
 *   mode: until COMMIT), then lets it go. A streamed payload is buffered to be saved, so it is sent once it
 *   has ended.
 *
 * Fastify's own `bodyLimit` still applies after `preParsing`, answered by Fastify's error handler: keep
 * `maxBodyBytes` at or below it (both default to 1 MiB) so an oversized request with a key always gets the
 * 413 problem.
 *
 * @module
 */
import type { FastifyInstance, FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import { fastifyPlugin } from 'fastify-plugin';
import type { Receiver } from '../core/receiver.js';
import { checkHealth, type HealthCheck, type HealthReport } from '../observability/health.js';
import { addIdempotencyHooks } from './fastify-hooks.js';
import { contextOf, createHttpPipeline, type HttpPipeline, type IdempotencyContext, type IdempotencyOptions } from './pipeline.js';

export type { IdempotencyRouteConfig } from './fastify-hooks.js';
export { DEFAULT_METHODS, DEFAULT_REPLAY_HEADERS, type IdempotencyContext, type IdempotencyOptions } from './pipeline.js';

/**
 * Options of the Fastify plugin. The receiver may be transactional; the handler then reads its `tx`, typed
 * by the receiver's store, with {@link idempotencyOf}.
 */
export type FastifyIdempotencyOptions = IdempotencyOptions<FastifyRequest, unknown>;

/**
 * The idempotency context of a request handled by the plugin registered with `receiver`, typed with that
 * receiver's transaction handle: `idempotencyOf(request, receiver)?.tx` is the `pg` `PoolClient` of a
 * transactional PostgreSQL receiver, the better-sqlite3 `Database` of a transactional SQLite one,
 * `undefined` in plain mode. Use it instead of `request.idempotency`, whose type (a request decoration,
 * the same for every route) can only say `IdempotencyContext<unknown>`.
 *
 * @returns the context, or `undefined` when the plugin let the request pass without a key (an optional key
 *   that was absent, a method it does not act on, a route with `enabled: false`)
 * @throws TypeError when the request went through a plugin registered with another receiver
 * @example
 * ```ts
 * const receiver = createReceiver({ store: createPostgresStore({ pool }), transactional: true });
 * await app.register(idempotency, { receiver });
 * app.post('/payments', async (request, reply) => {
 *   const tx = idempotencyOf(request, receiver)?.tx; // pg.PoolClient | undefined
 *   await tx?.query('INSERT INTO payments (amount) VALUES ($1)', [100]);
 *   return reply.code(201).send({ ok: true });
 * });
 * ```
 */
export function idempotencyOf<Tx>(request: FastifyRequest, receiver: Receiver<Tx>): IdempotencyContext<Tx> | undefined {
  return contextOf(request.idempotency, receiver);
}

/**
 * The plugin. Register it once; routes opt out or relax the key with
 * `{ config: { idempotency: { enabled: false } } }` or `{ config: { idempotency: { required: false } } }`.
 * Handlers read `request.idempotency` (`{ key, scope, claim, tx }`), or {@link idempotencyOf} for a `tx`
 * typed by the receiver's store.
 *
 * Statuses the plugin itself answers, as `application/problem+json` (RFC 9457): 400 missing or invalid
 * key, 413 body over `maxBodyBytes`, 422 key reused with another request, 409 request in progress (with
 * `Retry-After`), 410 response not kept (over `maxResponseBytes`), 503 store unavailable. A replay carries `Idempotent-Replayed: true`. An exception in the handler goes through
 * Fastify's error handler as usual; its response is sent and the key released whatever `shouldPersist` says.
 *
 * @throws TypeError at registration, naming the option, when an option is invalid (see `createHttpPipeline`)
 * @example
 * ```ts
 * import Fastify from 'fastify';
 * import { createMemoryStore, createReceiver } from 'retrysafe';
 * import { idempotency } from 'retrysafe/fastify';
 *
 * const app = Fastify();
 * await app.register(idempotency, { receiver: createReceiver({ store: createMemoryStore() }) });
 * app.post('/payments', async (request, reply) => reply.code(201).send({ key: request.idempotency?.key }));
 * app.post('/search', { config: { idempotency: { enabled: false } } }, async () => ({ hits: [] }));
 * ```
 */
export const idempotency: FastifyPluginAsync<FastifyIdempotencyOptions> = fastifyPlugin(registerIdempotency, {
  fastify: '5.x',
  name: 'retrysafe-idempotency',
});

function registerIdempotency(app: FastifyInstance, options: FastifyIdempotencyOptions): Promise<void> {
  let pipeline: HttpPipeline<FastifyRequest, unknown>;
  try {
    pipeline = createHttpPipeline(options);
  } catch (error) {
    // Fastify's plugin loader reports a rejection from register(); a synchronous throw escapes it.
    // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors -- createHttpPipeline throws only TypeErrors
    return Promise.reject(error);
  }
  addIdempotencyHooks(app, pipeline);
  return Promise.resolve();
}

/**
 * A Fastify route handler answering a health check: 200 `{ "status": "ok", "checks": { … } }` when every
 * check is healthy, 503 `{ "status": "unavailable", … }` otherwise (see `checkHealth`). Each check runs at
 * every request; answers carry `cache-control: no-store`.
 *
 * @example
 * ```ts
 * fastify.get('/health', healthRoute({ idempotency: () => receiver.health() }));
 * ```
 */
export function healthRoute(
  checks: Readonly<Record<string, HealthCheck>>,
): (request: FastifyRequest, reply: FastifyReply) => Promise<HealthReport> {
  return async function health(_request, reply) {
    const { status, body } = await checkHealth(checks);
    void reply.code(status).header('cache-control', 'no-store');
    return body;
  };
}
export { createBulkHandler, type BulkHandlerOptions, type BulkItemResult, type BulkRequest, type BulkResponse } from './bulk.js';
