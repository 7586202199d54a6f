/**
 * The hooks of the Fastify plugin (`retrysafe/fastify`), one named function each, and the {@link Call} a
 * request carries between them: `preParsing` keeps the raw body, `preHandler` claims the key and runs or
 * answers, `onError` marks a failed handler, `onSend` holds the response until it is saved.
 *
 * @module
 */
// Hot path: docs/hot-path.md#fastify-memory-path (the global `Buffer` is an accessor, which optimised code reads at each use)
import { Buffer } from 'node:buffer';
import { IncomingMessage, type OutgoingHttpHeader } from 'node:http';
import { Readable } from 'node:stream';
import type {
  DoneFuncWithErrOrRes,
  FastifyInstance,
  FastifyReply,
  FastifyRequest,
  onErrorHookHandler,
  onSendHookHandler,
  preHandlerHookHandler,
  preParsingHookHandler,
} from 'fastify';
import { BodyTooLargeError, canonicalBody, peekBodyThen, readBody, type PeekCallback } from './body.js';
import { listen, Pending } from '../core/settled.js';
import { isJsonType, keepJsonText } from './fastify-json.js';
import {
  IDEMPOTENCY_KEY_HEADER,
  type CapturedResponse,
  type HttpPipeline,
  type HttpPipelineOutcome,
  type HttpPipelineRequest,
  type IdempotencyContext,
  type OutgoingResponse,
} from './pipeline.js';

/** Per-route settings, under `config.idempotency` of a route's options. */
export interface IdempotencyRouteConfig {
  /** Overrides the plugin's `required` on this route. */
  readonly required?: boolean;
  /** `false` turns the plugin off on this route. @defaultValue true */
  readonly enabled?: boolean;
}

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
 * Adds the plugin's hooks for `pipeline` to `app` (see the hook list of `retrysafe/fastify`), and the request
 * decorators they keep their state in.
 */
export function addIdempotencyHooks(app: FastifyInstance, pipeline: HttpPipeline<FastifyRequest, unknown>): void {
  // One symbol per registration: two registrations on one instance keep apart.
  const calls = new Calls(pipeline, Symbol('retrysafe.idempotency.call'));
  // Hot path: docs/hot-path.md#fastify-json-text
  calls.keepsJson = keepJsonText(app, (request, text) => {
    const call = calls.of(request);
    if (call) call.rawText = text;
  });
  app.decorateRequest(calls.slot, null);
  if (!app.hasRequestDecorator('idempotency')) app.decorateRequest('idempotency', undefined);
  // Hot path: docs/hot-path.md#fastify-hooks
  // Callback-style hooks: an async hook costs Fastify a promise per request and a microtask per hop.
  app.addHook('preParsing', preParsingHook(calls));
  app.addHook('preHandler', preHandlerHook(calls));
  app.addHook('onError', onErrorHook(calls));
  app.addHook('onSend', onSendHook(calls));
}

// Hot path: docs/hot-path.md#fastify-hooks
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
  /** The body text of a JSON request, kept by the plugin's JSON parser. */
  rawText: string | undefined;
  /** Set by `preParsing` when the body was over the limit; `body()` throws it, so the pipeline answers 413. */
  tooLarge: BodyTooLargeError | undefined;
  /** Hands the captured response to the receiver; set while the handler runs under a claim. */
  deliver: Pending<CapturedResponse> | undefined;
  /** The pipeline's answer (a promise of it until the response is saved or released). */
  outcome: HttpPipelineOutcome | Promise<HttpPipelineOutcome> | undefined;
  /** Set by an `onSend` that ran before `preHandler` had the outcome (a handler that answered at once). */
  outcomeKnown: ((outcome: HttpPipelineOutcome | Promise<HttpPipelineOutcome>) => void) | undefined;
  /** Whether the handler runs under the claim (so `onSend`, not `preHandler`, settles the outcome). */
  running = false;
  /** Whether the handler threw (an `onError` hook ran). */
  failed = false;

  constructor(
    readonly request: FastifyRequest,
    settings: IdempotencyRouteConfig | undefined,
    private readonly maxBodyBytes: number,
  ) {
    this.method = request.method;
    const url = request.url;
    const queryAt = url.indexOf('?');
    this.route = queryAt === -1 ? url : url.slice(0, queryAt);
    this.query = queryAt === -1 ? '' : url.slice(queryAt + 1);
    this.required = settings?.required;
  }

  /** Keeps the outcome of a request whose handler ran, for `onSend`, or hands it to the `onSend` waiting for it. */
  known(outcome: HttpPipelineOutcome | Promise<HttpPipelineOutcome>): void {
    this.outcome = outcome;
    this.outcomeKnown?.(outcome);
  }

  get(name: string): string | undefined {
    const value = this.request.headers[name];
    return Array.isArray(value) ? value.join(', ') : value;
  }

  body(): Uint8Array | string {
    if (this.tooLarge) throw this.tooLarge;
    const text = this.rawText;
    if (text === undefined) return this.rawBody ?? canonicalBody(this.request.body);
    // A chunked body has no Content-Length to refuse it by in `preParsing`. UTF-8 takes at most three bytes
    // per UTF-16 unit and at least one, so the byte count is needed only in between.
    const limit = this.maxBodyBytes;
    if (text.length > limit || (text.length * 3 > limit && Buffer.byteLength(text) > limit)) throw new BodyTooLargeError(limit);
    return text;
  }
}

/** Where a request keeps its {@link Call}: a request decorator, so Fastify's request objects keep one shape. */
type Carrier = Record<symbol, Call | null | undefined>;

/** One registration's pipeline, and the request decorator its {@link Call}s are kept in. */
class Calls {
  /** Whether the plugin's JSON parser is in place (see `keepJsonText`), so a JSON body needs no peek. */
  keepsJson = false;

  constructor(
    readonly pipeline: HttpPipeline<FastifyRequest, unknown>,
    readonly slot: symbol,
  ) {}

  /** The call an earlier hook kept on `request`, if any. */
  of(request: FastifyRequest): Call | null | undefined {
    return (request as unknown as Carrier)[this.slot];
  }

  /**
   * A new {@link Call} for `request`, kept on the request for the later hooks, or `undefined` when the plugin
   * does not act on it (its method, or its route's `enabled: false`). Fastify builds `routeOptions` afresh at
   * each read: read once per request.
   */
  start(request: FastifyRequest): Call | undefined {
    const settings = request.routeOptions.config.idempotency;
    if (settings?.enabled === false || !this.pipeline.applies(request.method)) return undefined;
    const call = new Call(request, settings, this.pipeline.maxBodyBytes);
    (request as unknown as Carrier)[this.slot] = call;
    return call;
  }
}

/**
 * The `preParsing` hook: on a request with a key, keeps the raw body bytes on its call for the fingerprint
 * and hands Fastify's parser the body; a body over `maxBodyBytes` is answered here (see {@link answerTooLarge}).
 */
function preParsingHook(calls: Calls): preParsingHookHandler {
  const pipeline = calls.pipeline;
  return function preParsing(request, reply, payload, done) {
    const call = request.headers[IDEMPOTENCY_KEY_HEADER] === undefined ? undefined : calls.start(request);
    if (call === undefined) {
      done(null, payload);
      return;
    }
    const contentLength = request.headers['content-length'];
    // Hot path: docs/hot-path.md#fastify-json-text
    // A JSON body is read by the plugin's JSON parser, which keeps its text: only an announced length over
    // the limit is refused here.
    if (calls.keepsJson && isJsonType(request.headers['content-type'])) {
      if (contentLength !== undefined && Number(contentLength) > pipeline.maxBodyBytes) answerTooLarge(pipeline, call, new BodyTooLargeError(pipeline.maxBodyBytes), reply, done);
      else done(null, payload);
      return;
    }
    // Hot path: docs/hot-path.md#fastify-body-peek
    // The request itself, untouched so far: peeked, so Fastify reads it as it would without the plugin (a
    // new stream per request costs more than the peek). `app.inject()` and HTTP/2 requests are not one.
    const peeked = payload === request.raw && payload instanceof IncomingMessage;
    const kept: PeekCallback = (error, bytes) => {
      if (error === null) {
        call.rawBody = asBuffer(bytes);
        done(null, peeked ? payload : replayable(call.rawBody));
      } else if (error instanceof BodyTooLargeError) {
        answerTooLarge(pipeline, call, error, reply, done);
      } else {
        done(error);
      }
    };
    if (peeked) {
      peekBodyThen(payload, pipeline.maxBodyBytes, contentLength, kept);
      return;
    }
    readBody(payload, pipeline.maxBodyBytes, contentLength).then(
      (bytes) => kept(null, bytes),
      (error: unknown) => kept(toError(error), undefined),
    );
  };
}

/**
 * Answers a body over the limit from `preParsing`, before Fastify parses a body it never got whole: the
 * pipeline checks the key, then answers 413 from `body()` without claiming. A reply sent from a hook ends
 * the request.
 */
function answerTooLarge(
  pipeline: HttpPipeline<FastifyRequest, unknown>,
  call: Call,
  error: BodyTooLargeError,
  reply: FastifyReply,
  done: (error?: Error | null) => void,
): void {
  call.tooLarge = error;
  pipeline.handle(call, () => Promise.reject(error)).then(
    (answer) => {
      if (answer.kind === 'replay' || answer.kind === 'problem') send(reply, answer.response);
      else done(error);
    },
    (failure: unknown) => done(toError(failure)),
  );
}

/** The `preHandler` hook: claims the key, then either lets the handler run under the claim or answers (replay, problem). */
function preHandlerHook(calls: Calls): preHandlerHookHandler {
  const pipeline = calls.pipeline;
  return function preHandler(request, reply, done) {
    // A request with a key got its call in `preParsing`; one without gets it here, where the pipeline
    // answers a missing key.
    const current = calls.of(request) ?? calls.start(request);
    if (current === undefined) {
      done();
      return;
    }
    // Hot path: docs/hot-path.md#fastify-answer-in-place
    // An outcome known at once (a replay from the memory store, a problem) is sent in this turn. The handler
    // may run (and even reach `onSend`) before `handleNow` returns: `onSend` then waits for `outcome`.
    let outcome: HttpPipelineOutcome | Promise<HttpPipelineOutcome>;
    try {
      outcome = pipeline.handleNow(current, (context) => {
        // Hot path: docs/hot-path.md#fastify-same-turn-completion
        const delivery = new Pending<CapturedResponse>();
        request.idempotency = context;
        current.deliver = delivery;
        current.running = true;
        done();
        return delivery.promise;
      });
    } catch (error) {
      // Once the handler has run, its response waits in `onSend` for the outcome.
      if (current.running) current.known(failedOutcome(toError(error)));
      else done(toError(error));
      return;
    }
    // The handler runs under the claim (or already ran): `onSend` settles the outcome.
    if (current.running) current.known(outcome);
    else if (!(outcome instanceof Promise)) answer(outcome, reply, done);
    else {
      // The handler may yet get to run under the claim (then `onSend` settles the outcome), or the pipeline
      // answers without it.
      current.known(outcome);
      listen(
        outcome,
        (answered) => {
          if (!current.running) answer(answered, reply, done);
        },
        (error: unknown) => {
          if (!current.running) done(toError(error));
        },
      );
    }
  };
}

/** Sends an outcome the pipeline reached without the handler, or lets the handler run (`pass`). */
function answer(outcome: HttpPipelineOutcome, reply: FastifyReply, done: () => void): void {
  if (outcome.kind === 'pass' || outcome.kind === 'handler') done();
  else send(reply, outcome.response);
}

/** The `onError` hook: marks a handler that threw, so its (error) response releases the key. */
function onErrorHook(calls: Calls): onErrorHookHandler {
  return function onError(request, _reply, _error, done) {
    const call = calls.of(request);
    if (call) call.failed = true;
    done();
  };
}

/**
 * The `onSend` hook: captures the serialized response of a handler that ran under the claim and holds it
 * until the receiver has saved it (see {@link release}); a streamed payload is read to its end first.
 */
function onSendHook(calls: Calls): onSendHookHandler {
  return function onSend(request, reply, payload, done) {
    const call = calls.of(request);
    const deliver = call?.deliver;
    if (!deliver) {
      done(null, payload);
      return;
    }
    call.deliver = undefined;
    let bytes: Buffer | undefined;
    try {
      bytes = bytesOf(payload);
    } catch (error) {
      done(toError(error));
      return;
    }
    if (bytes) {
      release(call, reply, payload, bytes, deliver, done);
      return;
    }
    readBody(payload as AsyncIterable<unknown>, Number.MAX_SAFE_INTEGER).then(
      (read) => release(call, reply, payload, asBuffer(read), deliver, done),
      (error: unknown) => done(toError(error)),
    );
  };
}

/**
 * Hands the captured response (`body`, the reply's status and headers) to the receiver, then lets the
 * payload go once the pipeline's outcome has settled, or sends the outcome's problem in its place.
 */
function release(
  call: Call,
  reply: FastifyReply,
  payload: unknown,
  body: Buffer,
  deliver: Pending<CapturedResponse>,
  done: DoneFuncWithErrOrRes,
): void {
  // Hot path: docs/hot-path.md#fastify-same-turn-completion
  // On the memory store the response is saved within this call, and the outcome is known when it returns.
  deliver.resolve({ status: reply.statusCode, headers: snapshotHeaders(reply.getHeaders()), body, failed: call.failed });
  if (call.outcome === undefined) call.outcomeKnown = (outcome) => settle(reply, payload, body, outcome, done);
  else settle(reply, payload, body, call.outcome, done);
}

/** Lets the payload go once `outcome` has settled, or sends the outcome's problem in its place. */
function settle(
  reply: FastifyReply,
  payload: unknown,
  body: Buffer,
  outcome: HttpPipelineOutcome | Promise<HttpPipelineOutcome>,
  done: DoneFuncWithErrOrRes,
): void {
  const answered = (answer: HttpPipelineOutcome): void => {
    if (answer.kind !== 'replay' && answer.kind !== 'problem') {
      done(null, typeof payload === 'string' ? payload : body);
      return;
    }
    // The handler ran but its result was fenced off: answer the problem instead, without its headers.
    for (const name of Object.keys(reply.getHeaders())) reply.removeHeader(name);
    reply.code(answer.response.status).headers(answer.response.headers);
    done(null, Buffer.from(answer.response.body));
  };
  if (outcome instanceof Promise) listen(outcome, answered, (error: unknown) => done(toError(error)));
  else answered(outcome);
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

/** An outcome rejected with `error`, for an `onSend` that may yet come (unhandled until it does). */
function failedOutcome(error: Error): Promise<HttpPipelineOutcome> {
  const failed = Promise.reject(error);
  failed.catch(noop);
  return failed;
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
