/**
 * Idempotency-Key plugin for Fastify 5, built with `fastify-plugin` so its hooks apply to every route of
 * the instance it is registered on. Behaviour: see {@link HttpPipeline.handle}.
 *
 * Hooks:
 * - `preParsing` keeps the raw body bytes for the fingerprint (only on requests that carry a key, on
 *   methods the plugin acts on; a body over `maxBodyBytes` is answered there with a 413 problem, before any
 *   claim, and the request goes no further). On a Node `IncomingMessage` that no earlier hook replaced, the
 *   bytes are peeked and pushed back onto it, so Fastify's parser reads the request itself; any other
 *   payload stream is read to its end and handed on as a new stream over the same bytes.
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
import { IncomingMessage, type OutgoingHttpHeader } from 'node:http';
import { Readable } from 'node:stream';
import type { FastifyInstance, FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import { fastifyPlugin } from 'fastify-plugin';
import type { Receiver } from '../core/receiver.js';
import { checkHealth, type HealthCheck, type HealthReport } from '../observability/health.js';
import { BodyTooLargeError, canonicalBody, peekBodyThen, readBody, type PeekCallback } from './body.js';
import {
  contextOf,
  createHttpPipeline,
  IDEMPOTENCY_KEY_HEADER,
  type CapturedResponse,
  type HttpPipeline,
  type HttpPipelineOutcome,
  type HttpPipelineRequest,
  type IdempotencyContext,
  type IdempotencyOptions,
  type OutgoingResponse,
} from './pipeline.js';

/** Per-route settings, under `config.idempotency` of a route's options. */
export interface IdempotencyRouteConfig {
  /** Overrides the plugin's `required` on this route. */
  readonly required?: boolean;
  /** `false` turns the plugin off on this route. @defaultValue true */
  readonly enabled?: boolean;
}

export { DEFAULT_METHODS, DEFAULT_REPLAY_HEADERS, type IdempotencyContext, type IdempotencyOptions } from './pipeline.js';

declare module 'fastify' {
  interface FastifyContextConfig {
    /** retrysafe's per-route Idempotency-Key settings. */
    idempotency?: IdempotencyRouteConfig;
  }
  interface FastifyRequest {
    /**
     * Set by the retrysafe idempotency plugin while the handler runs under a claimed key; `undefined` on
     * requests it passes through.
     */
    idempotency: IdempotencyContext<unknown> | undefined;
  }
}

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
 * What one request under the plugin carries between its hooks; it is also the request the pipeline sees
 * (and its own `headers`), so a request costs one object rather than several closures.
 */
class Call implements HttpPipelineRequest<FastifyRequest> {
  readonly method: string;
  readonly route: string;
  readonly query: string;
  readonly required: boolean | undefined;
  readonly headers: this = this;
  /** The raw body bytes kept by `preParsing`. */
  rawBody: Buffer | undefined;
  /** Set by `preParsing` when the body was over the limit; `body()` throws it, so the pipeline answers 413. */
  tooLarge: BodyTooLargeError | undefined;
  /** Hands the captured response to the receiver; set while the handler runs under a claim. */
  deliver: ((response: CapturedResponse) => void) | undefined;
  /** The pipeline's answer, settled once the response is saved (or released). */
  outcome: Promise<HttpPipelineOutcome> | undefined;
  /** Whether the handler runs under the claim (so `onSend`, not `preHandler`, settles the outcome). */
  running = false;
  /** Whether the handler threw (an `onError` hook ran). */
  failed = false;

  constructor(
    readonly request: FastifyRequest,
    settings: IdempotencyRouteConfig | undefined,
  ) {
    this.method = request.method;
    const url = request.url;
    const queryAt = url.indexOf('?');
    this.route = queryAt === -1 ? url : url.slice(0, queryAt);
    this.query = queryAt === -1 ? '' : url.slice(queryAt + 1);
    this.required = settings?.required;
  }

  get(name: string): string | undefined {
    const value = this.request.headers[name];
    return Array.isArray(value) ? value.join(', ') : value;
  }

  body(): Uint8Array | string {
    if (this.tooLarge) throw this.tooLarge;
    return this.rawBody ?? canonicalBody(this.request.body);
  }
}

/** Where a request keeps its {@link Call}: a request decorator, so Fastify's request objects keep one shape. */
type Carrier = Record<symbol, Call | null | undefined>;

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
  // One symbol per registration: two registrations on one instance keep apart.
  const slot = Symbol('retrysafe.idempotency.call');
  app.decorateRequest(slot, null);
  const callOf = (request: FastifyRequest): Call | null | undefined => (request as unknown as Carrier)[slot];
  if (!app.hasRequestDecorator('idempotency')) app.decorateRequest('idempotency', undefined);

  /**
   * A new {@link Call} for `request`, kept on the request for the later hooks, or `undefined` when the plugin
   * does not act on it (its method, or its route's `enabled: false`). Fastify builds `routeOptions` afresh at
   * each read: read once per request.
   */
  const callFor = (request: FastifyRequest): Call | undefined => {
    const settings = request.routeOptions.config.idempotency;
    if (settings?.enabled === false || !pipeline.applies(request.method)) return undefined;
    const call = new Call(request, settings);
    (request as unknown as Carrier)[slot] = call;
    return call;
  };

  // Callback-style hooks: an async hook costs Fastify a promise per request and a microtask per hop.
  app.addHook('preParsing', (request, reply, payload, done) => {
    const call = request.headers[IDEMPOTENCY_KEY_HEADER] === undefined ? undefined : callFor(request);
    if (call === undefined) {
      done(null, payload);
      return;
    }
    // The request itself, untouched so far: peeked, so Fastify reads it as it would without the plugin (a
    // new stream per request costs more than the peek). `app.inject()` and HTTP/2 requests are not one.
    const peeked = payload === request.raw && payload instanceof IncomingMessage;
    const contentLength = request.headers['content-length'];
    const kept: PeekCallback = (error, bytes) => {
      if (error === null) {
        call.rawBody = asBuffer(bytes);
        done(null, peeked ? payload : replayable(call.rawBody));
        return;
      }
      if (!(error instanceof BodyTooLargeError)) {
        done(error);
        return;
      }
      // Answered here, before Fastify parses a body it never got whole: the pipeline checks the key,
      // then answers 413 from `body()` without claiming. A reply sent from a hook ends the request.
      call.tooLarge = error;
      pipeline.handle(call, () => Promise.reject(error)).then(
        (answer) => {
          if (answer.kind === 'replay' || answer.kind === 'problem') send(reply, answer.response);
          else done(error);
        },
        (failure: unknown) => done(toError(failure)),
      );
    };
    if (peeked) {
      peekBodyThen(payload, pipeline.maxBodyBytes, contentLength, kept);
      return;
    }
    readBody(payload, pipeline.maxBodyBytes, contentLength).then(
      (bytes) => kept(null, bytes),
      (error: unknown) => kept(toError(error), undefined),
    );
  });

  app.addHook('preHandler', (request, reply, done) => {
    // A request with a key got its call in `preParsing`; one without gets it here, where the pipeline
    // answers a missing key.
    const current = callOf(request) ?? callFor(request);
    if (current === undefined) {
      done();
      return;
    }
    const outcome = pipeline.handle(current, (context) =>
      new Promise<CapturedResponse>((deliver) => {
        request.idempotency = context;
        current.deliver = deliver;
        current.running = true;
        done();
      }),
    );
    current.outcome = outcome;
    // Either the handler gets to run under the claim (onSend then settles the outcome), or the pipeline
    // answers without it.
    outcome.then(
      (answer) => {
        if (current.running) return;
        if (answer.kind === 'pass' || answer.kind === 'handler') done();
        else send(reply, answer.response);
      },
      (error: unknown) => {
        if (!current.running) done(toError(error));
      },
    );
  });

  app.addHook('onError', (request, _reply, _error, done) => {
    const call = callOf(request);
    if (call) call.failed = true;
    done();
  });

  app.addHook('onSend', (request, reply, payload, done) => {
    const call = callOf(request);
    const deliver = call?.deliver;
    const outcome = call?.outcome;
    if (!outcome || !deliver) {
      done(null, payload);
      return;
    }
    call.deliver = undefined;
    const settle = (body: Buffer): void => {
      deliver({ status: reply.statusCode, headers: snapshotHeaders(reply.getHeaders()), body, failed: call.failed });
      outcome.then(
        (answer) => {
          if (answer.kind !== 'replay' && answer.kind !== 'problem') {
            done(null, typeof payload === 'string' ? payload : body);
            return;
          }
          // The handler ran but its result was fenced off: answer the problem instead, without its headers.
          for (const name of Object.keys(reply.getHeaders())) reply.removeHeader(name);
          reply.code(answer.response.status).headers(answer.response.headers);
          done(null, Buffer.from(answer.response.body));
        },
        (error: unknown) => done(toError(error)),
      );
    };
    let bytes: Buffer | undefined;
    try {
      bytes = bytesOf(payload);
    } catch (error) {
      done(toError(error));
      return;
    }
    if (bytes) settle(bytes);
    else readBody(payload as AsyncIterable<unknown>, Number.MAX_SAFE_INTEGER).then((read) => settle(asBuffer(read)), (error: unknown) => done(toError(error)));
  });

  return Promise.resolve();
}

function send(reply: FastifyReply, response: OutgoingResponse): FastifyReply {
  return reply.code(response.status).headers(response.headers).send(asBuffer(response.body));
}

function snapshotHeaders(headers: Readonly<Record<string, OutgoingHttpHeader | undefined>>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const name in headers) {
    const value = headers[name];
    if (value !== undefined) out[name.toLowerCase()] = Array.isArray(value) ? value.join(', ') : String(value);
  }
  return out;
}

function toError(error: unknown): Error {
  return error instanceof Error ? error : new Error(String(error));
}

function asBuffer(bytes: Uint8Array): Buffer {
  return Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

/**
 * The bytes of a reply payload that is already in memory (a string or bytes; nothing for `null` or
 * `undefined`), or `undefined` for a Node stream or a web `ReadableStream`, which must be read.
 *
 * @throws TypeError for any other payload
 */
function bytesOf(payload: unknown): Buffer | undefined {
  if (payload === null || payload === undefined) return Buffer.alloc(0);
  if (typeof payload === 'string') return Buffer.from(payload);
  if (payload instanceof Uint8Array) return asBuffer(payload);
  if (typeof payload === 'object' && Symbol.asyncIterator in payload) return undefined;
  throw new TypeError(`retrysafe: cannot capture a reply payload of type ${Object.prototype.toString.call(payload)}`);
}

/** A fresh stream over bytes already read, for Fastify's body parser. */
function replayable(bytes: Buffer): Readable {
  const stream = new Readable({ read: noop });
  if (bytes.byteLength > 0) stream.push(bytes);
  stream.push(null);
  return stream;
}

function noop(): void {}

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
