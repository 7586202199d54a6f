/**
 * Idempotency-Key middleware for Express 5 (and Express 4).
 *
 * The middleware holds the handler's response — whether it is sent with `res.json`, `res.send`,
 * `res.end()`, `res.write()` + `res.end()` or `res.writeHead` — until the receiver has saved it (in
 * transactional mode: until COMMIT), then sends it. Behaviour: see
 * {@link HttpPipeline.handle}.
 *
 * Request body and the fingerprint, under the one rule the NestJS interceptor shares (`nodeRequestBody`
 * in `body.ts`), in order:
 * 1. a Content-Length over `maxBodyBytes` is answered with a 413 problem `idempotency-request-too-large`
 *    before any claim;
 * 2. a body stream no parser read yet (the middleware mounted before the parsers) is read here: the bytes
 *    are kept as `req.rawBody`, `req.body` is set to the parsed JSON (`application/json`, `*+json`), the
 *    text (`text/*`) or the Buffer (any other type), and the bytes are pushed back onto the request
 *    stream, unconsumed: a body parser mounted after the middleware (`express.json()`,
 *    `express.urlencoded()`, …, Express 4 or 5) reads them as if nothing had, under its own options, and
 *    sets `req.body` itself. Invalid JSON goes to `next(error)` with `status: 400`, as `express.json()`
 *    would do; a body over `maxBodyBytes` is answered with the 413 problem. When the client disconnects
 *    while the request waits (for its claim, say), Node destroys the stream and those bytes with it: the
 *    handler then does not run, the claim is released and `next` gets an `ERR_STREAM_PREMATURE_CLOSE`
 *    error, as for a disconnect while the body is read (a later parser would skip or fail the request,
 *    and the handler would see another body than the one fingerprinted);
 * 3. otherwise `req.rawBody` (a Buffer, e.g. set by
 *    `express.json({ verify: (req, _res, buf) => { req.rawBody = buf } })`) is hashed as is, or else the
 *    `req.body` of a parser mounted before the middleware as canonical JSON (object keys sorted; a Buffer
 *    or string body as its bytes); either longer than `maxBodyBytes` is answered with the 413 problem.
 *
 * Errors: an exception in the handler (thrown, or passed to `next(err)`) reaches the app's error handler
 * as usual; the error handler's response is what is sent, and as a 5xx it releases the key (the default
 * `shouldPersist`), so a retry runs the handler again. Express does not tell middleware that a later
 * handler failed, so with a `shouldPersist` that keeps 5xx, the error handler's 5xx is saved too. A failure
 * of the middleware's own after the handler ran (a `problem` shape that throws on the 409 of a fenced-off
 * holder, a receiver observer that throws as the request ends) reaches the error handler as well: the
 * held response is let go first, without the handler's status and headers, so the error handler's answer
 * is what is sent (Express's default: a 500), and a handler still running writes nowhere once that answer
 * has ended. A retry replays a response saved before the failure.
 *
 * @module
 */
import type { IncomingHttpHeaders } from 'node:http';
import type { NextFunction, Request, RequestHandler, Response } from 'express';
import type { Receiver } from '../core/receiver.js';
import { checkHealth, type HealthCheck } from '../observability/health.js';
import { nodeRequestBody, requireBodyHandedOn } from './body.js';
import { toDictionaryMode } from './dictionary-mode.js';
import {
  contextOf,
  createHttpPipeline,
  type CapturedResponse,
  type IdempotencyContext,
  type IdempotencyOptions,
} from './pipeline.js';
import { holdResponse, releaseHeld, sendFresh, sendHeld } from './held-response.js';

export { DEFAULT_METHODS, DEFAULT_REPLAY_HEADERS, type IdempotencyContext, type IdempotencyOptions } from './pipeline.js';

declare global {
  // eslint-disable-next-line @typescript-eslint/no-namespace -- Express types its request through this global namespace
  namespace Express {
    interface Request {
      /** Set by the retrysafe idempotency middleware while the handler runs under a claimed key. */
      idempotency?: IdempotencyContext<unknown>;
      /** The raw request body bytes, when the idempotency middleware (or a parser's `verify`) kept them. */
      rawBody?: Buffer;
    }
  }
}

/**
 * The idempotency context of a request handled by the middleware of `receiver`, typed with that receiver's
 * transaction handle: `idempotencyOf(req, receiver)?.tx` is the better-sqlite3 `Database` of a transactional
 * SQLite receiver, the `pg` `PoolClient` of a transactional PostgreSQL one, `undefined` in plain mode. Use it
 * instead of `req.idempotency`, whose type (a global augmentation, the same for every route) can only say
 * `IdempotencyContext<unknown>`.
 *
 * @returns the context, or `undefined` when the middleware let the request pass without a key (an optional
 *   key that was absent, a method it does not act on)
 * @throws TypeError when the request went through the middleware of another receiver
 * @example
 * ```ts
 * const receiver = createReceiver({ store: createSqliteStore({ path: 'payments.db' }), transactional: true });
 * app.post('/payments', idempotency({ receiver }), (req, res) => {
 *   const tx = idempotencyOf(req, receiver)?.tx; // Database | undefined
 *   res.status(201).json(tx?.prepare('INSERT INTO charges (amount) VALUES (?) RETURNING id').get(req.body.amount));
 * });
 * ```
 */
export function idempotencyOf<Tx>(
  req: { readonly idempotency?: IdempotencyContext<unknown> | undefined },
  receiver: Receiver<Tx>,
): IdempotencyContext<Tx> | undefined {
  return contextOf(req.idempotency, receiver);
}

/**
 * Creates the Express middleware. Mount it on the routes that take an Idempotency-Key (or app-wide: other
 * methods pass through). The handler reads `req.idempotency` (`{ key, scope, claim, tx }`), or
 * {@link idempotencyOf} for a `tx` typed by the receiver's store; in transactional mode it writes its rows
 * through that `tx`.
 *
 * Statuses the middleware itself answers, as `application/problem+json` (RFC 9457): 400 missing or
 * invalid key, 413 body over `maxBodyBytes`, 422 key reused with another request, 409 request in progress
 * (with `Retry-After`), 410 response not kept (over `maxResponseBytes`), 503 store unavailable. A replay carries `Idempotent-Replayed: true`.
 * Any other error, before the handler or after it (see the module's Errors), goes to `next(error)`: the
 * app's error handler answers it.
 *
 * @throws TypeError at creation, naming the option, when an option is invalid (see `createHttpPipeline`)
 * @example
 * ```ts
 * import express from 'express';
 * import { createMemoryStore, createReceiver } from 'retrysafe';
 * import { idempotency } from 'retrysafe/express';
 *
 * const app = express();
 * const receiver = createReceiver({ store: createMemoryStore() });
 * app.post('/payments', idempotency({ receiver, scope: (req) => String(req.get('x-account-id')) }), express.json(), (req, res) => {
 *   res.status(201).json({ id: crypto.randomUUID(), amount: req.body.amount, key: req.idempotency?.key });
 * });
 * ```
 */
export function idempotency<Tx = undefined>(options: IdempotencyOptions<Request, Tx>): RequestHandler {
  const pipeline = createHttpPipeline(options);
  return function idempotencyMiddleware(req: Request, res: Response, next: NextFunction): void {
    if (!pipeline.applies(req.method)) {
      next();
      return;
    }
    toDictionaryMode(req);
    toDictionaryMode(res);
    const url = req.originalUrl;
    const queryAt = url.indexOf('?');
    pipeline
      .handle(
        {
          request: req,
          method: req.method,
          route: `${req.baseUrl}${req.path}`,
          query: queryAt === -1 ? '' : url.slice(queryAt + 1),
          headers: { get: (name) => joinHeader(req.headers, name) },
          body: () => nodeRequestBody(req, req, pipeline.maxBodyBytes),
        },
        (context) => capture(req, res, next, context),
      )
      .then((outcome) => {
        if (outcome.kind === 'pass') next();
        else if (outcome.kind === 'handler') sendHeld(res, outcome.response);
        else sendFresh(res, outcome.response);
      })
      .catch((error: unknown) => {
        // A failure after the handler ran finds its response held: let go, or the error answer never leaves.
        releaseHeld(res);
        next(error);
      });
  };
}

function joinHeader(headers: IncomingHttpHeaders, name: string): string | undefined {
  const value = headers[name];
  return Array.isArray(value) ? value.join(', ') : value;
}

/**
 * Runs the rest of the chain with `req.idempotency` set and resolves the response it produces, which is
 * held back until it is saved. Not when the client left while the request waited and took with it the
 * body a later parser would have read (see `requireBodyHandedOn`): that throws, and the claim is released.
 */
function capture(req: Request, res: Response, next: NextFunction, context: IdempotencyContext<unknown>): Promise<CapturedResponse> {
  requireBodyHandedOn(req);
  const held = holdResponse(res);
  req.idempotency = context;
  next();
  return held;
}

/**
 * An Express route handler answering a health check: 200 `{ "status": "ok", "checks": { … } }` when every
 * check is healthy, 503 `{ "status": "unavailable", … }` otherwise (see `checkHealth`). Each check runs at
 * every request; answers carry `cache-control: no-store`.
 *
 * @example
 * ```ts
 * app.get('/health', healthRoute({ idempotency: () => receiver.health() }));
 * ```
 */
export function healthRoute(checks: Readonly<Record<string, HealthCheck>>): RequestHandler {
  return (_req: Request, res: Response, next: NextFunction) => {
    checkHealth(checks).then(({ status, body }) => {
      res.status(status).set('cache-control', 'no-store').json(body);
    }, next);
  };
}
export { createBulkHandler, type BulkHandlerOptions, type BulkItemResult, type BulkRequest, type BulkResponse } from './bulk.js';
