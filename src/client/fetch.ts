/**
 * `retrysafe/client`: a `fetch`-compatible function that retries correctly — the client half of the
 * Idempotent Receiver. Each logical call of an unsafe method gets ONE Idempotency-Key, reused on every
 * retry, so the server can apply the call once and replay its answer to the retries.
 *
 * Sources: IETF draft-ietf-httpapi-idempotency-key-header (the key, sent as an RFC 9651 sf-string,
 * section 2.1), RFC 9110 (`Retry-After`, section 10.2.3; safe methods, section 9.2.1), Marc Brooker,
 * "Exponential Backoff And Jitter" (full jitter) and the AWS Builders' Library on timeouts and retries.
 *
 * @module
 */
import { randomUUID } from 'node:crypto';
import { systemClock, type Clock } from '../core/clock.js';
import { describe, invalidOption, requireAtMost, requireClock, requireCount, requireDurationMs, requireFunction, requireOptions } from '../core/validate.js';
import { IdempotencyKeyInvalidError } from '../core/errors.js';
import { parseIdempotencyKey } from '../core/key.js';
import { fullJitterDelay } from './backoff.js';
import { followSignal } from './follow-signal.js';
import { RetryExhaustedError, type AttemptRecord, type RetryExhaustedCode } from './outcome.js';
import { parseRetryAfter } from './retry-after.js';
import { sleep as timerSleep } from './sleep.js';

export { fullJitterDelay } from './backoff.js';
export { RetryExhaustedError, type AttemptRecord, type RetryExhaustedCode } from './outcome.js';
export { parseRetryAfter } from './retry-after.js';

/** Options of {@link createRetryingFetch}. Every duration is in milliseconds. */
export interface RetryingFetchOptions {
  /** The fetch that makes each attempt (global fetch, undici's, or any compatible one). @defaultValue `globalThis.fetch` */
  readonly fetch?: typeof fetch;
  /**
   * Most attempts per logical call, the first included. The default lets `deadlineMs` be the bound that
   * ends a call during an outage: with the default backoff, ten attempts span about 16 s on average, so a
   * server restart of a few seconds is ridden out rather than spent in the first second. @defaultValue 10
   */
  readonly maxAttempts?: number;
  /**
   * Backoff ceiling after the first attempt; it doubles per attempt (full jitter). The default matches
   * stripe-node's initial network retry delay (0.5 s). @defaultValue 500
   */
  readonly baseDelayMs?: number;
  /** Cap of any wait between attempts, including one asked for by `Retry-After`. @defaultValue 5_000 */
  readonly maxDelayMs?: number;
  /** Longest a single attempt may take to produce response headers before it is aborted and retried. @defaultValue 10_000 */
  readonly attemptTimeoutMs?: number;
  /** Longest a whole logical call may take, waits included, measured on `clock`. @defaultValue 30_000 */
  readonly deadlineMs?: number;
  /**
   * Makes the Idempotency-Key of a call that brings none; called once per logical call. The result must be
   * 1–255 printable ASCII characters. @defaultValue `crypto.randomUUID` (UUID v4)
   */
  readonly generateKey?: () => string;
  /** Jitter source returning numbers in `[0, 1)`; inject a fixed one in tests. @defaultValue `Math.random` */
  readonly random?: () => number;
  /**
   * Waits `ms` milliseconds between attempts; must reject with `signal.reason` when `signal` aborts.
   * Inject one that advances a fake clock in tests. @defaultValue a `setTimeout` timer
   */
  readonly sleep?: (ms: number, signal?: AbortSignal) => Promise<void>;
  /** Time source of the deadline and of `Retry-After` HTTP-dates. @defaultValue the system clock */
  readonly clock?: Clock;
  /** Called after every attempt, before any wait, with what happened and how long the wait will be. */
  readonly onAttempt?: (attempt: AttemptRecord) => void;
  /**
   * The unsafe methods that get an Idempotency-Key. Every other method is retried WITHOUT a key, so leave
   * out only methods that are idempotent by themselves. @defaultValue `['POST', 'PATCH', 'PUT', 'DELETE']`
   */
  readonly methods?: readonly string[];
}

/** `RequestInit` plus the caller's own Idempotency-Key for this logical call. */
export type RetryingRequestInit = RequestInit & {
  /**
   * The key to send on every attempt instead of a generated one (e.g. a key stored with a job, so even a
   * process restart retries under it). Overrides an `Idempotency-Key` header in `headers`.
   */
  idempotencyKey?: string;
};

/**
 * A `fetch` that retries. It resolves with the first non-retryable response — a success, or a 4xx that
 * needs the request corrected (400, 422 …), returned as is — and throws {@link RetryExhaustedError} when
 * every allowed attempt failed retryably. It rejects with the signal's reason when the caller's
 * `AbortSignal` aborts, as fetch does, and with {@link IdempotencyKeyInvalidError} before any attempt
 * when the key is not 1–255 printable ASCII characters.
 */
export type RetryingFetch = (input: string | URL | Request, init?: RetryingRequestInit) => Promise<Response>;

/** The resolved, frozen options of {@link createRetryingFetch}. */
interface ResolvedOptions {
  readonly fetch: typeof fetch;
  readonly maxAttempts: number;
  readonly baseDelayMs: number;
  readonly maxDelayMs: number;
  readonly attemptTimeoutMs: number;
  readonly deadlineMs: number;
  readonly generateKey: () => string;
  readonly random: () => number;
  readonly sleep: (ms: number, signal?: AbortSignal) => Promise<void>;
  readonly clock: Clock;
  readonly onAttempt: ((attempt: AttemptRecord) => void) | undefined;
  readonly methods: ReadonlySet<string>;
}

const histories = new WeakMap<Response, readonly AttemptRecord[]>();

/**
 * The attempts behind a response that a retrying fetch resolved with (a success or a non-retryable
 * status), in order; `undefined` for a response that did not come from one.
 */
export function attemptsOf(response: Response): readonly AttemptRecord[] | undefined {
  return histories.get(response);
}

/**
 * Creates a retrying, key-keeping `fetch`.
 *
 * Per logical call: an unsafe method (see `methods`) gets one Idempotency-Key — the caller's
 * `idempotencyKey`, else an `Idempotency-Key` header already in the request, else `generateKey()` — sent
 * as an sf-string on every attempt. The body is buffered once so each attempt sends the same bytes.
 * Retried: network errors, attempts that time out, 408, 409 carrying `Retry-After` (the in-progress answer
 * of the IETF draft and of retrysafe's server), 429 and every 5xx. Anything else is returned at once.
 * The wait before a retry is `Retry-After` when the response has one (delta-seconds or HTTP-date), else
 * full-jitter backoff; either way at most `maxDelayMs`. A wait that would end past the deadline is not
 * taken: the call gives up with `retry-deadline-exceeded`.
 *
 * @throws TypeError naming the option when an option is invalid (checked here, once)
 * @example
 * ```ts
 * import { attemptsOf, createRetryingFetch } from 'retrysafe/client';
 *
 * const fetchWithRetry = createRetryingFetch({ maxAttempts: 4, deadlineMs: 10_000 });
 * const res = await fetchWithRetry('https://api.example.com/payments', {
 *   method: 'POST',
 *   headers: { 'content-type': 'application/json' },
 *   body: JSON.stringify({ amount: 1000 }),
 * });
 * console.log(res.status, attemptsOf(res)?.length);
 * ```
 */
export function createRetryingFetch(options: RetryingFetchOptions = {}): RetryingFetch {
  const config = resolve(options);
  return (input, init) => call(config, input, init);
}

function resolve(options: RetryingFetchOptions): ResolvedOptions {
  requireOptions('createRetryingFetch', options);
  const maxAttempts = requireCount('maxAttempts', orDefault(options.maxAttempts, 10));
  const baseDelayMs = requireDurationMs('baseDelayMs', orDefault(options.baseDelayMs, 500));
  const maxDelayMs = requireDurationMs('maxDelayMs', orDefault(options.maxDelayMs, 5_000));
  requireAtMost('baseDelayMs', baseDelayMs, 'maxDelayMs', maxDelayMs);
  const clock = requireClock(orDefault(options.clock, systemClock));
  const methods = orDefault(options.methods, ['POST', 'PATCH', 'PUT', 'DELETE']);
  if (!Array.isArray(methods) || !methods.every((m) => typeof m === 'string' && /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(m))) {
    throw invalidOption('methods', 'an array of HTTP method names', methods);
  }
  return Object.freeze({
    fetch: fn('fetch', orDefault(options.fetch, globalThis.fetch)),
    maxAttempts,
    baseDelayMs,
    maxDelayMs,
    attemptTimeoutMs: requireDurationMs('attemptTimeoutMs', orDefault(options.attemptTimeoutMs, 10_000)),
    deadlineMs: requireDurationMs('deadlineMs', orDefault(options.deadlineMs, 30_000)),
    generateKey: fn('generateKey', orDefault(options.generateKey, randomUUID)),
    random: fn('random', orDefault(options.random, Math.random)),
    sleep: fn('sleep', orDefault(options.sleep, timerSleep)),
    clock,
    onAttempt: options.onAttempt === undefined ? undefined : fn('onAttempt', options.onAttempt),
    methods: new Set((methods as readonly string[]).map((m) => m.toUpperCase())),
  });
}

/** The default only for an option left out; `null` or another wrong value is reported, never replaced. */
function orDefault<T>(value: T | undefined, fallback: T): T {
  return value === undefined ? fallback : value;
}

/** {@link requireFunction} keeping the option's own type. */
function fn<F>(name: string, value: F): F {
  requireFunction(name, value);
  return value;
}

/** One logical call, ready to be sent any number of times. */
interface Prepared {
  readonly url: string;
  readonly init: RequestInit;
  readonly key: string | undefined;
  readonly signal: AbortSignal | undefined;
}

type Outcome = { readonly response: Response } | { readonly error: unknown };

const KEY_HEADER = 'idempotency-key';

async function call(config: ResolvedOptions, input: string | URL | Request, init: RetryingRequestInit | undefined): Promise<Response> {
  const start = config.clock.now();
  const prepared = await prepare(config, input, init);
  const { signal } = prepared;
  // The caller's signal may outlive thousands of calls, many in flight at once: the call follows it through
  // one listener shared by every call in flight on it (see follow-signal.ts), and its attempts and waits
  // listen on the call's own signal.
  const linked = new AbortController();
  const unfollow = signal === undefined ? undefined : followSignal(signal, linked);
  try {
    return await attemptAll(config, prepared, start, signal === undefined ? undefined : linked.signal);
  } finally {
    unfollow?.();
  }
}

async function attemptAll(config: ResolvedOptions, prepared: Prepared, start: number, signal: AbortSignal | undefined): Promise<Response> {
  const deadline = start + config.deadlineMs;
  const attempts: AttemptRecord[] = [];
  for (let attempt = 1; ; attempt++) {
    signal?.throwIfAborted();
    const remaining = deadline - config.clock.now();
    const outcome = remaining > 0 ? await send(config, prepared, Math.min(config.attemptTimeoutMs, remaining), signal) : undefined;
    if (signal?.aborted) {
      if (outcome && 'response' in outcome) await discard(outcome.response);
      throw signal.reason;
    }
    const response = outcome && 'response' in outcome ? outcome.response : undefined;
    const retryable = response === undefined || isRetryableStatus(response);
    let delayMs = 0;
    let giveUp: RetryExhaustedCode | undefined;
    if (outcome === undefined) {
      giveUp = 'retry-deadline-exceeded';
    } else if (retryable) {
      const now = config.clock.now();
      const asked = response === undefined ? undefined : parseRetryAfter(response.headers.get('retry-after'), now);
      const wait = Math.min(
        config.maxDelayMs,
        asked ?? fullJitterDelay(attempt, config.baseDelayMs, config.maxDelayMs, config.random),
      );
      if (attempt >= config.maxAttempts) giveUp = 'retry-attempts-exhausted';
      else if (now + wait >= deadline) giveUp = 'retry-deadline-exceeded';
      else delayMs = wait;
    }
    if (outcome !== undefined) {
      const record: AttemptRecord = {
        attempt,
        key: prepared.key,
        ...(response === undefined ? { error: (outcome as { error: unknown }).error } : { status: response.status }),
        replayed: response?.headers.get('idempotent-replayed')?.trim().toLowerCase() === 'true',
        delayMs,
      };
      attempts.push(Object.freeze(record));
      config.onAttempt?.(record);
    }
    if (response !== undefined && !retryable) {
      histories.set(response, Object.freeze(attempts));
      return response;
    }
    if (giveUp !== undefined) throw new RetryExhaustedError(giveUp, Object.freeze(attempts), response);
    if (response !== undefined) await discard(response);
    await config.sleep(delayMs, signal);
  }
}

/** Buffers the request once and settles its key, so every attempt sends the same bytes and key. */
async function prepare(config: ResolvedOptions, input: string | URL | Request, init: RetryingRequestInit | undefined): Promise<Prepared> {
  const { idempotencyKey, ...rest } = init ?? {};
  // `signal: null` keeps the buffering Request off the caller's signal: a Request listens on the signal it
  // is given until it is garbage-collected, and a long-lived signal would pile up one listener per call.
  const request = await toRequest(input, { ...rest, signal: null });
  const headers = new Headers(request.headers);
  const method = request.method.toUpperCase();
  let key: string | undefined;
  if (idempotencyKey !== undefined) key = checkedKey(idempotencyKey);
  else if (headers.has(KEY_HEADER)) key = parseIdempotencyKey(headers.get(KEY_HEADER) ?? '');
  else if (config.methods.has(method)) key = checkedKey(config.generateKey());
  if (key !== undefined) headers.set(KEY_HEADER, toSfString(key));
  const body = request.body === null ? undefined : new Uint8Array(await request.arrayBuffer());
  // Everything else the caller set (redirect, an undici dispatcher …) goes to every attempt unchanged.
  const passThrough: RequestInit = { ...rest };
  delete passThrough.body;
  delete passThrough.headers;
  delete passThrough.method;
  delete passThrough.signal;
  const signal = init?.signal ?? (isRequest(input) ? input.signal : undefined) ?? undefined;
  return {
    url: request.url,
    init: {
      redirect: request.redirect,
      ...passThrough,
      method,
      headers: [...headers],
      ...(body !== undefined && { body }),
    },
    key,
    signal,
  };
}

function isRequest(input: string | URL | Request): input is Request {
  return typeof input === 'object' && !(input instanceof URL);
}

/** A `Request` of this realm; a request object of another fetch implementation is copied field by field. */
async function toRequest(input: string | URL | Request, init: RequestInit): Promise<Request> {
  if (!isRequest(input) || input instanceof Request) return new Request(input, init);
  return copyForeignRequest(input, init);
}

async function copyForeignRequest(input: Request, init: RequestInit): Promise<Request> {
  const body = input.body === null ? undefined : await input.arrayBuffer();
  return new Request(input.url, {
    method: input.method,
    headers: [...input.headers],
    redirect: input.redirect,
    ...(body !== undefined && { body }),
    ...init,
  });
}

/** Checks a key the caller or `generateKey` supplied; throws {@link IdempotencyKeyInvalidError}. */
function checkedKey(key: unknown): string {
  if (typeof key !== 'string') throw new IdempotencyKeyInvalidError(`it is not a string but ${describe(key)}`);
  return parseIdempotencyKey(toSfString(key));
}

/** RFC 9651 section 4.1.6: a String item, quoting `"` and `\`. */
function toSfString(key: string): string {
  return `"${key.replace(/["\\]/g, '\\$&')}"`;
}

/** One attempt: resolves with the response (headers in), or with the error that stopped it. */
async function send(config: ResolvedOptions, prepared: Prepared, timeoutMs: number, signal: AbortSignal | undefined): Promise<Outcome> {
  const timeout = new AbortController();
  const timer = setTimeout(() => {
    timeout.abort(new DOMException(`The attempt took longer than ${timeoutMs} ms.`, 'TimeoutError'));
  }, timeoutMs);
  const unfollow = signal === undefined ? undefined : followSignal(signal, timeout);
  try {
    return { response: await config.fetch(prepared.url, { ...prepared.init, signal: timeout.signal }) };
  } catch (error) {
    return { error: timeout.signal.aborted && signal?.aborted !== true ? timeout.signal.reason : error };
  } finally {
    clearTimeout(timer);
    unfollow?.();
  }
}

/** 408, 409 with `Retry-After`, 429 and 5xx: answers that a later identical request may not get. */
function isRetryableStatus(response: Response): boolean {
  const { status } = response;
  return status === 408 || status === 429 || status >= 500 || (status === 409 && response.headers.has('retry-after'));
}

/** Frees the connection of a response nobody will read. */
async function discard(response: Response): Promise<void> {
  try {
    await response.body?.cancel();
  } catch {
    // The body is being dropped; a failure to cancel it changes nothing for the caller.
  }
}
