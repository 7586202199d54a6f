/**
 * The framework-neutral half of the HTTP adapters: everything the Express, Fastify and Hono middleware
 * share — the method filter, Idempotency-Key parsing, required/optional keys, scope, fingerprint, the
 * replay-header allow-list, problem responses, and running the handler through the {@link Receiver}.
 * An adapter only translates its framework's request into an {@link HttpPipelineRequest}, captures the
 * handler's response, and sends the {@link HttpPipelineOutcome}.
 *
 * Behaviour (IETF draft-ietf-httpapi-idempotency-key-header; Stripe's idempotent
 * requests): see {@link HttpPipeline.handle}.
 *
 * @module
 */
import { IdempotencyError, IdempotencyKeyMissingError, ResponseNotKeptError } from '../core/errors.js';
import { fingerprint } from '../core/fingerprint.js';
import { parseIdempotencyKey } from '../core/key.js';
import { describeProblem, encodeProblem, isHttpErrorCode, type ProblemShape } from '../core/problem.js';
import { RESPONSE_NOT_KEPT_HEADER, type Claim, type StoredResponse } from '../core/record.js';
import type { Execution, ExecutionContext, Receiver } from '../core/receiver.js';
import { settled, whenSettled } from '../core/settled.js';
import { describe } from '../core/validate.js';
import { BodyTooLargeError } from './body.js';
import { resolveOptions, type ResolvedOptions } from './pipeline-options.js';

export { DEFAULT_METHODS, DEFAULT_REPLAY_HEADERS } from './pipeline-options.js';

/** Name of the request header carrying the key (IETF draft section 2). */
export const IDEMPOTENCY_KEY_HEADER = 'idempotency-key';

/** Name of the header added to a replayed response (the value is `true`), as Stripe does. */
const REPLAYED_HEADER = 'idempotent-replayed';

/**
 * Options of every HTTP adapter (`retrysafe/express`, `retrysafe/fastify`, `retrysafe/hono`).
 *
 * @typeParam Req - the framework's request type, handed to `scope` and `route`
 * @typeParam Tx - the receiver's transaction handle (`undefined` unless transactional)
 */
export interface IdempotencyOptions<Req, Tx> {
  /** The engine; its store, lease, retention, in-flight policy and `shouldPersist` apply. */
  readonly receiver: Receiver<Tx>;
  /** Whether a request without an Idempotency-Key is refused (400 `idempotency-key-missing`). @defaultValue true */
  readonly required?: boolean;
  /** Methods the middleware acts on (case-insensitive); every other method passes through untouched. @defaultValue ['POST', 'PATCH'] */
  readonly methods?: readonly string[];
  /**
   * The key's namespace, typically tenant and principal, so one tenant's key never replays another's
   * response. Derive it from authenticated state, never from a header the client controls. A throw is
   * passed to the framework's error handler. @defaultValue () => ''
   */
  readonly scope?: (req: Req) => string | Promise<string>;
  /**
   * What the fingerprint calls the route. @defaultValue the request path without the query. Not the
   * route pattern: `/accounts/a/payments` and `/accounts/b/payments` must not share a key's response.
   */
  readonly route?: (req: Req) => string;
  /**
   * Response headers saved and replayed (lower-case). `set-cookie` is refused: a replay must never hand
   * one client's session to another request. @defaultValue {@link DEFAULT_REPLAY_HEADERS}
   */
  readonly replayHeaders?: readonly string[];
  /** Prefix of the problem `type` URIs. @defaultValue `DEFAULT_PROBLEM_TYPE_BASE` (exported by the package root) */
  readonly problemTypeBase?: string;
  /** `Retry-After` on 409 and 503 problems, in seconds. @defaultValue 1 */
  readonly retryAfterSeconds?: number;
  /**
   * Status, headers and body of every problem answered (400, 409, 410, 413, 422, 503), for clients that
   * expect their API's own error shape (`stripeErrorShape`: Stripe's, with `Stripe-Should-Retry`); a shape
   * that throws or answers a status outside 400–599 reaches the framework's error handler (NestJS, after the handler ran: Nest's 500, logged).
   * @defaultValue `problemDetailsShape` (RFC 9457 `application/problem+json`) */
  readonly problem?: ProblemShape;
  /**
   * Longest request body fingerprinted, in bytes. A longer body (by its Content-Length, as it streams in,
   * or as a parser mounted before the middleware kept it) is answered with a 413 problem
   * `idempotency-request-too-large` before anything is claimed: the store is not touched and the handler
   * does not run. On Hono alone, a body another middleware already read is that middleware's to limit.
   * @defaultValue 1_048_576 (1 MiB, Fastify's default `bodyLimit`)
   */
  readonly maxBodyBytes?: number;
  /**
   * Longest response body saved for replay, in bytes; a streamed response counts once it has ended. The
   * first client always gets the whole response. A longer one is saved as its status and allow-listed
   * headers without the body, and every retry with the key is answered with a 410 problem
   * `idempotency-response-not-kept` (members `originalStatus`, plus the saved `Location` header): the
   * handler never runs again for the key, since its effect happened once already (IETF draft
   * section 2.6). @defaultValue 1_048_576 (1 MiB)
   */
  readonly maxResponseBytes?: number;
}

/** What a handler behind the middleware is given (`req.idempotency`, `request.idempotency`, `c.get('idempotency')`). */
export interface IdempotencyContext<Tx> {
  /** The decoded Idempotency-Key. */
  readonly key: string;
  /** The scope the key lives in. */
  readonly scope: string;
  /** The lease this execution holds; `claim.takeover` marks a retry that took over a crashed holder's lease. */
  readonly claim: Claim;
  /** In transactional mode the transaction to write business rows through; otherwise `undefined`. */
  readonly tx: Tx;
}

// Hot path: docs/hot-path.md#pipeline-context
/**
 * A context as the pipeline makes it. The receiver it was made under is kept in a private field, so
 * {@link contextOf} can hand a context back typed with that receiver's transaction handle only when it
 * really came from that receiver (a field, not a weak map entry per request).
 */
class IssuedContext<Tx> implements IdempotencyContext<Tx> {
  readonly #issuer: object;

  constructor(
    readonly key: string,
    readonly scope: string,
    readonly claim: Claim,
    readonly tx: Tx,
    issuer: object,
  ) {
    this.#issuer = issuer;
  }

  /** Whether `context` was made by a pipeline under `receiver`. */
  static issuedBy(context: object, receiver: object): boolean {
    return #issuer in context && context.#issuer === receiver;
  }
}

/**
 * The request's idempotency context, typed with `receiver`'s transaction handle: what the adapters'
 * `idempotencyOf` returns. The framework's request property is global (one type for every route), so it
 * can only say `IdempotencyContext<unknown>`; this checks at run time that the context was made under
 * `receiver`, which makes the narrowing to `Tx` sound.
 *
 * @returns the context, or `undefined` when the middleware let the request pass without a key (an optional
 *   key that was absent, a method it does not act on, a route it is not mounted on)
 * @throws TypeError when the context was made under another receiver (another idempotency middleware
 *   handled the request)
 */
export function contextOf<Tx>(context: IdempotencyContext<unknown> | undefined, receiver: Receiver<Tx>): IdempotencyContext<Tx> | undefined {
  if (context === undefined) return undefined;
  if (!IssuedContext.issuedBy(context, receiver)) {
    throw new TypeError("retrysafe: this request's idempotency context was made under another receiver than the one passed to idempotencyOf");
  }
  return context as IdempotencyContext<Tx>;
}

/** A request as the pipeline sees it. */
export interface HttpPipelineRequest<Req> {
  /** The framework's own request, handed to the `scope` and `route` options. */
  readonly request: Req;
  readonly method: string;
  /** The request path without the query; the `route` option overrides it. */
  readonly route: string;
  /** The raw query string, with or without the leading `?`. */
  readonly query: string;
  /** Request headers; `get` takes a lower-case name and returns `undefined` or `null` when absent. */
  readonly headers: { get(name: string): string | null | undefined };
  /** The body for the fingerprint: raw bytes, or text hashed as UTF-8. Read only when a key is present. */
  readonly body: () => Uint8Array | string | Promise<Uint8Array | string>;
  /** Per-route override of {@link IdempotencyOptions.required}; `undefined` keeps the option. */
  readonly required?: boolean | undefined;
}

/** A response the handler produced, as the adapter captured it. */
export interface CapturedResponse {
  readonly status: number;
  /** Lower-case names; several values of one header joined with `, ` (Set-Cookie is dropped before saving anyway). */
  readonly headers: Readonly<Record<string, string>>;
  readonly body: Uint8Array;
  /**
   * `true` when the adapter saw the handler fail (an exception reached the framework's error handler).
   * The key is then released whatever `shouldPersist` says, and this (error) response is sent.
   */
  readonly failed?: boolean;
}

/** A response to send. Header names are lower case. */
export interface OutgoingResponse {
  readonly status: number;
  readonly headers: Readonly<Record<string, string>>;
  readonly body: Uint8Array;
}

/**
 * What the adapter does with a request:
 * - `pass`: the middleware does not apply (method, optional route without a key); run the handler untouched.
 * - `handler`: the handler ran; send its captured response (all of its headers, Set-Cookie included).
 * - `replay`: send a saved response; its headers include `idempotent-replayed: true`.
 * - `problem`: send a problem answer (400, 409, 410, 413, 422 or 503) in the shape of the `problem` option.
 */
export type HttpPipelineOutcome =
  | { readonly kind: 'pass' }
  | { readonly kind: 'handler'; readonly response: CapturedResponse }
  | { readonly kind: 'replay' | 'problem'; readonly response: OutgoingResponse };

/** The shared request pipeline. Create one per middleware with {@link createHttpPipeline}. */
export interface HttpPipeline<Req, Tx> {
  /** The resolved {@link IdempotencyOptions.maxBodyBytes}. */
  readonly maxBodyBytes: number;
  /** The resolved {@link IdempotencyOptions.maxResponseBytes}. */
  readonly maxResponseBytes: number;
  /** `true` when `method` is one the middleware acts on. */
  applies(method: string): boolean;
  /**
   * Runs one request through the pipeline:
   * 1. a method not in `methods` → `pass`;
   * 2. no Idempotency-Key → 400 problem `idempotency-key-missing` when required, else `pass`;
   * 3. a malformed key → 400 `idempotency-key-invalid`;
   * 4. a body over `maxBodyBytes` (`body` throws a {@link BodyTooLargeError}) → 413
   *    `idempotency-request-too-large`, before any claim;
   * 5. `receiver.execute` over (scope, key, fingerprint of method, route, query and body): `run` is
   *    called at most once, and its response is saved per the receiver's `shouldPersist` (or released when
   *    `failed`); a saved response replays; a reused key → 422, in flight → 409 + `Retry-After`, store
   *    down → 503 (the handler does not run), lease lost → 409; a response body over `maxResponseBytes`
   *    is sent whole but saved without its body, and replays as 410 `idempotency-response-not-kept`.
   *
   * @param run - runs the framework handler with the context and resolves its captured response
   * @throws whatever `scope`, `route`, `body` or `run` throw (not a failed handler: see `failed`)
   */
  handle(
    request: HttpPipelineRequest<Req>,
    run: (context: IdempotencyContext<Tx>) => Promise<CapturedResponse>,
  ): Promise<HttpPipelineOutcome>;
  /**
   * {@link HttpPipeline.handle} without the promise when the outcome is known at once (`pass`, a problem,
   * and on a store that decides in this process a replay, 422 or 409; see `Receiver.executeNow`). `run` may
   * be called before this returns.
   *
   * @throws what `handle` rejects with, when the outcome is known at once
   */
  handleNow(
    request: HttpPipelineRequest<Req>,
    run: (context: IdempotencyContext<Tx>) => Promise<CapturedResponse>,
  ): HttpPipelineOutcome | Promise<HttpPipelineOutcome>;
}

/** Carries a failed handler's response through the receiver, which releases the key on a throw. */
class HandlerFailed extends Error {
  override readonly name = 'HandlerFailed';
  constructor(readonly response: CapturedResponse) {
    super('the handler failed');
  }
}

const PASS: HttpPipelineOutcome = Object.freeze({ kind: 'pass' });
const REPLAYED = Object.freeze({ [REPLAYED_HEADER]: 'true' });

// Hot path: docs/hot-path.md#fastify-memory-path
/**
 * The replay answer of each frozen saved response (the memory store's and the replay cache's records,
 * which never change): built on its first replay, then sent as it is by every later one.
 */
const replays = new WeakMap<StoredResponse, HttpPipelineOutcome>();

/** The replay answer to `saved`: its status, its headers with `idempotent-replayed: true`, its body. */
function replayOutcome(saved: StoredResponse): HttpPipelineOutcome {
  const response = Object.freeze({ status: saved.status, headers: Object.freeze({ ...saved.headers, ...REPLAYED }), body: saved.body });
  const outcome: HttpPipelineOutcome = Object.freeze({ kind: 'replay', response });
  if (Object.isFrozen(saved)) replays.set(saved, outcome);
  return outcome;
}

/**
 * Validates the adapter options once and builds the shared pipeline.
 *
 * @throws TypeError naming the option and value: `receiver` without `execute`, `required` not a boolean,
 *   `methods` not a non-empty array of method names, `scope`/`route` not functions, `replayHeaders` not an
 *   array of header names or listing `set-cookie`, `problemTypeBase` not a string, `problem` not a
 *   function, `retryAfterSeconds`,
 *   `maxBodyBytes` or `maxResponseBytes` not a non-negative integer
 * @example
 * ```ts
 * const pipeline = createHttpPipeline({ receiver, scope: (req: Request) => req.headers.get('x-tenant') ?? '' });
 * const outcome = await pipeline.handle(neutralRequest, async (context) => runHandler(context));
 * ```
 */
export function createHttpPipeline<Req, Tx>(options: IdempotencyOptions<Req, Tx>): HttpPipeline<Req, Tx> {
  return new ReceiverPipeline(resolveOptions(options));
}

class ReceiverPipeline<Req, Tx> implements HttpPipeline<Req, Tx> {
  readonly maxBodyBytes: number;
  readonly maxResponseBytes: number;

  constructor(private readonly options: ResolvedOptions<Req, Tx>) {
    this.maxBodyBytes = options.maxBodyBytes;
    this.maxResponseBytes = options.maxResponseBytes;
  }

  applies(method: string): boolean {
    // Hot path: docs/hot-path.md#fastify-memory-path (Node's parsed method is upper case: no `toUpperCase` call)
    return this.options.methods.has(method) || this.options.methods.has(method.toUpperCase());
  }

  handle(
    request: HttpPipelineRequest<Req>,
    run: (context: IdempotencyContext<Tx>) => Promise<CapturedResponse>,
  ): Promise<HttpPipelineOutcome> {
    let outcome: HttpPipelineOutcome | Promise<HttpPipelineOutcome>;
    try {
      outcome = this.keyed(request, run);
    } catch (error) {
      // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors -- the option's own throw, passed on as an `async` function would
      return Promise.reject(error);
    }
    return outcome instanceof Promise ? outcome : Promise.resolve(outcome);
  }

  // Hot path: docs/hot-path.md#pipeline-context
  // Not `async` functions: each step chains onto the promise it waits for (the receiver's, and `scope`'s
  // or `body`'s only when they return one), where `async` layers cost a promise and a hop each, and an
  // outcome known at once is returned as it is.
  handleNow(
    request: HttpPipelineRequest<Req>,
    run: (context: IdempotencyContext<Tx>) => Promise<CapturedResponse>,
  ): HttpPipelineOutcome | Promise<HttpPipelineOutcome> {
    return this.keyed(request, run);
  }

  /** Steps 1 to 3 of {@link HttpPipeline.handle}: the method, the key, then the scope. */
  private keyed(
    request: HttpPipelineRequest<Req>,
    run: (context: IdempotencyContext<Tx>) => Promise<CapturedResponse>,
  ): HttpPipelineOutcome | Promise<HttpPipelineOutcome> {
    if (!this.applies(request.method)) return PASS;
    const header = request.headers.get(IDEMPOTENCY_KEY_HEADER);
    if (header === null || header === undefined) {
      if (request.required ?? this.options.required) {
        this.options.receiver.observer.invalidKey();
        return this.problemOutcome(new IdempotencyKeyMissingError());
      }
      return PASS;
    }
    let key: string;
    try {
      key = parseIdempotencyKey(header);
    } catch (error) {
      if (error instanceof IdempotencyError) {
        this.options.receiver.observer.invalidKey();
        return this.problemOutcome(error);
      }
      throw error;
    }
    const scoped = this.options.scope(request.request);
    if (typeof scoped === 'string') return this.scoped(request, run, key, scoped);
    return Promise.resolve(scoped).then((scope) => this.scoped(request, run, key, scope));
  }

  /** Step 4 of {@link HttpPipeline.handle}: the body, read once the scope is known. */
  private scoped(
    request: HttpPipelineRequest<Req>,
    run: (context: IdempotencyContext<Tx>) => Promise<CapturedResponse>,
    key: string,
    scope: unknown,
  ): HttpPipelineOutcome | Promise<HttpPipelineOutcome> {
    if (typeof scope !== 'string') {
      throw new TypeError(`retrysafe: the "scope" option must return a string, got ${describe(scope)}`);
    }
    const route = this.options.route ? this.options.route(request.request) : request.route;
    const tooLarge = (error: unknown): HttpPipelineOutcome => {
      if (error instanceof BodyTooLargeError) return this.problemOutcome(error);
      throw error;
    };
    let read: Uint8Array | string | Promise<Uint8Array | string>;
    try {
      read = request.body();
    } catch (error) {
      return tooLarge(error);
    }
    if (typeof read === 'string' || read instanceof Uint8Array) return this.executed(request, run, key, scope, route, read);
    return read.then((body) => this.executed(request, run, key, scope, route, body), tooLarge);
  }

  /** Step 5 of {@link HttpPipeline.handle}: the receiver's execution, answered as an outcome. */
  private executed(
    request: HttpPipelineRequest<Req>,
    run: (context: IdempotencyContext<Tx>) => Promise<CapturedResponse>,
    key: string,
    scope: string,
    route: string,
    body: Uint8Array | string,
  ): HttpPipelineOutcome | Promise<HttpPipelineOutcome> {
    const id = { scope, key, fingerprint: fingerprint({ method: request.method, route, query: request.query, body }) };
    let captured: CapturedResponse | undefined;
    // Hot path: docs/hot-path.md#fastify-same-turn-completion (a response handed over synchronously is saved in that call)
    const work = ({ claim, tx }: ExecutionContext<Tx>): Promise<StoredResponse> => {
      const stored = whenSettled(run(new IssuedContext(key, scope, claim, tx, this.options.receiver)), (response) => {
        captured = response;
        if (response.failed === true) throw new HandlerFailed(response);
        return this.toStored(response);
      });
      return stored instanceof Promise ? stored : settled(stored);
    };
    const answered = (execution: Execution): HttpPipelineOutcome => {
      if (execution.replayed) {
        const saved = execution.response;
        const notKept = saved.headers[RESPONSE_NOT_KEPT_HEADER];
        if (notKept !== undefined) return this.notKeptOutcome(saved, Number(notKept));
        return replays.get(saved) ?? replayOutcome(saved);
      }
      // The receiver hands back what the work returned; the handler's full response (cookies too) is sent.
      return { kind: 'handler', response: captured ?? execution.response };
    };
    let execution: Execution | Promise<Execution>;
    try {
      execution = this.options.receiver.executeNow(id, work);
    } catch (error) {
      return this.refused(error);
    }
    return execution instanceof Promise ? whenSettled(execution, answered, (error: unknown) => this.refused(error)) : answered(execution);
  }

  /** The outcome of an execution that ended with `error`: a failed handler's response, a problem, or the error passed on. */
  private refused(error: unknown): HttpPipelineOutcome {
    if (error instanceof HandlerFailed) return { kind: 'handler', response: error.response };
    // Other retrysafe errors (a handler's own failed retrying fetch, say) are the handler's to answer.
    if (error instanceof IdempotencyError && isHttpErrorCode(error.code)) return this.problemOutcome(error);
    throw error;
  }

  private problemOutcome(error: IdempotencyError): HttpPipelineOutcome {
    const { problem, problemTypeBase, retryAfterSeconds } = this.options;
    return { kind: 'problem', response: encodeProblem(problem, describeProblem(error, problemTypeBase, retryAfterSeconds)) };
  }

  /** The 410 answer to a retry whose first response was saved without its body; it stands for that response, so it is marked replayed. */
  private notKeptOutcome(saved: StoredResponse, bytes: number): HttpPipelineOutcome {
    const { problem, problemTypeBase, retryAfterSeconds } = this.options;
    const described = describeProblem(new ResponseNotKeptError(saved.status, bytes), problemTypeBase, retryAfterSeconds, { originalStatus: saved.status });
    const answer = encodeProblem(problem, described);
    const location = saved.headers['location'];
    const headers = { ...answer.headers, ...REPLAYED, ...(location !== undefined && { location }) };
    return { kind: 'problem', response: { status: answer.status, headers, body: answer.body } };
  }

  /**
   * Keeps only allow-listed headers, so cookies and per-request headers are never replayed; a body over
   * `maxResponseBytes` is replaced by {@link RESPONSE_NOT_KEPT_HEADER}.
   */
  private toStored(response: CapturedResponse): StoredResponse {
    const headers: Record<string, string> = {};
    for (const name in response.headers) {
      const lower = name.toLowerCase();
      const value = response.headers[name];
      if (value !== undefined && this.options.replayHeaders.has(lower)) headers[lower] = value;
    }
    if (response.body.byteLength <= this.options.maxResponseBytes) return { status: response.status, headers, body: response.body };
    headers[RESPONSE_NOT_KEPT_HEADER] = String(response.body.byteLength);
    return { status: response.status, headers, body: new Uint8Array(0) };
  }
}
