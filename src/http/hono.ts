/**
 * Idempotency-Key middleware for Hono. It works on the fetch `Request`/`Response` pair, so it runs
 * wherever Hono does: Node (`@hono/node-server`), Bun, Deno, Cloudflare Workers, and Next.js route
 * handlers through `hono/vercel`. Behaviour: see {@link HttpPipeline.handle}.
 *
 * The body for the fingerprint is read from a clone of the request (at most `maxBodyBytes`; a longer one
 * is answered with a 413 problem before any claim), so the handler can still call
 * `c.req.json()`. The handler's response is buffered until the receiver has saved it (in transactional
 * mode: until COMMIT); a streamed response is therefore sent only once it has ended.
 *
 * @module
 */
import type { Context, MiddlewareHandler, Next } from 'hono';
import type { Receiver } from '../core/receiver.js';
import { checkHealth, type HealthCheck } from '../observability/health.js';
import { readBody } from './body.js';
import {
  contextOf,
  createHttpPipeline,
  type CapturedResponse,
  type IdempotencyContext,
  type IdempotencyOptions,
  type OutgoingResponse,
} from './pipeline.js';

export { DEFAULT_METHODS, DEFAULT_REPLAY_HEADERS, type IdempotencyContext, type IdempotencyOptions } from './pipeline.js';

declare module 'hono' {
  interface ContextVariableMap {
    /**
     * Set by the retrysafe idempotency middleware while the handler runs under a claimed key; `undefined`
     * on requests it passes through.
     */
    idempotency: IdempotencyContext<unknown> | undefined;
  }
}

/**
 * The Hono environment the middleware sets: its `idempotency` variable typed with the receiver's
 * transaction handle. Handlers chained after the middleware in one route call get it, as does an app
 * created with `new Hono<IdempotencyEnv<Tx>>()`.
 */
export interface IdempotencyEnv<Tx> {
  Variables: {
    /** Set while the handler runs under a claimed key; `undefined` on requests the middleware passes through. */
    idempotency: IdempotencyContext<Tx> | undefined;
  };
}

/**
 * The idempotency context of a request handled by the middleware of `receiver`, typed with that receiver's
 * transaction handle (`tx` is the `pg` `PoolClient` of a transactional PostgreSQL receiver, the
 * better-sqlite3 `Database` of a transactional SQLite one, `undefined` in plain mode). For handlers whose
 * `c` does not carry {@link IdempotencyEnv}, e.g. routes declared apart from `app.use(idempotency(…))`.
 *
 * @returns the context, or `undefined` when the middleware let the request pass without a key
 * @throws TypeError when the request went through the middleware of another receiver
 * @example
 * ```ts
 * app.use('/payments/*', idempotency({ receiver }));
 * app.post('/payments', async (c) => {
 *   const tx = idempotencyOf(c, receiver)?.tx; // pg.PoolClient | undefined
 *   await tx?.query('INSERT INTO payments (amount) VALUES ($1)', [100]);
 *   return c.json({ ok: true }, 201);
 * });
 * ```
 */
export function idempotencyOf<Tx>(c: Context, receiver: Receiver<Tx>): IdempotencyContext<Tx> | undefined {
  return contextOf(c.get('idempotency'), receiver);
}

/**
 * Creates the Hono middleware. The handler reads `c.get('idempotency')` (`{ key, scope, claim, tx }`),
 * typed by the receiver's store in handlers chained after the middleware (see {@link IdempotencyEnv}), or
 * {@link idempotencyOf} elsewhere; in transactional mode it writes its rows through `tx`.
 *
 * Statuses the middleware itself answers, as `application/problem+json` (RFC 9457): 400 missing or
 * invalid key, 413 body over `maxBodyBytes`, 422 key reused with another request, 409 request in progress
 * (with `Retry-After`), 410 response not kept (over `maxResponseBytes`), 503 store unavailable. A replay carries `Idempotent-Replayed: true`. An exception in the handler goes to
 * `app.onError` as usual; its response is sent and the key is released whatever `shouldPersist` says.
 *
 * @throws TypeError at creation, naming the option, when an option is invalid (see `createHttpPipeline`)
 * @example
 * ```ts
 * import { Hono } from 'hono';
 * import { createMemoryStore, createReceiver } from 'retrysafe';
 * import { idempotency } from 'retrysafe/hono';
 *
 * const app = new Hono();
 * const receiver = createReceiver({ store: createMemoryStore() });
 * app.use('/payments/*', idempotency({ receiver, scope: (c) => c.req.header('x-account-id') ?? '' }));
 * app.post('/payments', async (c) => c.json({ id: crypto.randomUUID(), key: c.get('idempotency')?.key }, 201));
 * ```
 */
export function idempotency<Tx = undefined>(options: IdempotencyOptions<Context, Tx>): MiddlewareHandler<IdempotencyEnv<Tx>> {
  const pipeline = createHttpPipeline(options);
  return async function idempotencyMiddleware(c: Context<IdempotencyEnv<Tx>>, next: Next): Promise<Response | undefined> {
    if (!pipeline.applies(c.req.method)) {
      await next();
      return undefined;
    }
    const url = c.req.url;
    const queryAt = url.indexOf('?');
    const outcome = await pipeline.handle(
      {
        request: c,
        method: c.req.method,
        route: c.req.path,
        query: queryAt === -1 ? '' : url.slice(queryAt + 1),
        headers: c.req.raw.headers,
        body: () => fingerprintBody(c, pipeline.maxBodyBytes),
      },
      async (context) => {
        c.set('idempotency', context);
        await next();
        return capture(c);
      },
    );
    if (outcome.kind === 'pass') {
      await next();
      return undefined;
    }
    if (outcome.kind === 'handler') {
      // Clearing first stops Hono's setter from merging the old response's headers into the new one.
      const held = c.res;
      c.res = undefined;
      c.res = new Response(responseBody(held.status, outcome.response.body), {
        status: held.status,
        statusText: held.statusText,
        headers: held.headers,
      });
      return undefined;
    }
    const response = toResponse(outcome.response);
    if (c.finalized) {
      // The handler ran but its result was fenced off: replace its response entirely.
      c.res = undefined;
      c.res = response;
      return undefined;
    }
    return response;
  };
}

/**
 * Reads the body for the fingerprint from a clone of the request, so the handler can still read the
 * original; a body another middleware already read comes from Hono's cache.
 *
 * @throws BodyTooLargeError when the body is longer than `limit` bytes (the pipeline answers 413)
 */
async function fingerprintBody(c: Context, limit: number): Promise<Uint8Array> {
  if (c.req.raw.bodyUsed) return new Uint8Array(await c.req.arrayBuffer());
  const stream = c.req.raw.clone().body;
  if (stream === null) return new Uint8Array();
  // Cancelling one branch of a tee settles only once the other is cancelled too, so stopping early
  // must not cancel this one: the handler may still read the original.
  return readBody(stream.values({ preventCancel: true }), limit, c.req.header('content-length'));
}

/**
 * Buffers the response the rest of the chain produced (the middleware always replaces it afterwards);
 * `c.error` tells a handler that threw.
 */
async function capture(c: Context): Promise<CapturedResponse> {
  const res = c.res;
  const body = new Uint8Array(await res.arrayBuffer());
  const headers: Record<string, string> = {};
  res.headers.forEach((value, name) => {
    headers[name] = value;
  });
  return { status: res.status, headers, body, failed: c.error !== undefined };
}

/**
 * The fetch `Response` of `response`, with a headers object of its own: a runtime may add to the one it is
 * given (@hono/node-server 1.x adds `Content-Length` to it), and a replay's headers are shared by every
 * replay of its record, and frozen.
 */
function toResponse(response: OutgoingResponse): Response {
  return new Response(responseBody(response.status, response.body), { status: response.status, headers: { ...response.headers } });
}

/** A fetch `Response` refuses a body, even an empty one, on a null-body status. */
function responseBody(status: number, body: Uint8Array): Uint8Array | null {
  return status === 204 || status === 205 || status === 304 ? null : body;
}

/**
 * A Hono handler answering a health check: 200 `{ "status": "ok", "checks": { … } }` when every check is
 * healthy, 503 `{ "status": "unavailable", … }` otherwise (see `checkHealth`). Each check runs at every
 * request; answers carry `cache-control: no-store`.
 *
 * @example
 * ```ts
 * app.get('/health', healthRoute({ idempotency: () => receiver.health() }));
 * ```
 */
export function healthRoute(checks: Readonly<Record<string, HealthCheck>>): (c: Context) => Promise<Response> {
  return async function health(c) {
    const { status, body } = await checkHealth(checks);
    c.header('cache-control', 'no-store');
    return c.json(body, status);
  };
}
