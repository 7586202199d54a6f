/**
 * The demo's HTTP client: retrysafe's retrying fetch (one Idempotency-Key per logical call, kept across
 * retries) over undici, instrumented to count what happened on the wire, and the place where a payment's
 * planned fault header is sent until the server reports the fault took effect.
 *
 * @module
 */
import { Agent, fetch as undiciFetch, type RequestInit as UndiciRequestInit } from 'undici';
import { parseIdempotencyKey } from '../../index.js';
import { createRetryingFetch, type AttemptRecord, type RetryingFetch } from '../../client/fetch.js';
import { FAULT_HEADER } from './chaos.js';

/** Per-attempt client timeout, in milliseconds; a `slow` handler outlasts it. */
export const ATTEMPT_TIMEOUT_MS = 400;

/** What the client saw, over every attempt of every call. */
export interface TrafficCounters {
  /** HTTP attempts sent (requests that left, including ones refused or cut off). */
  attempts: number;
  /** Responses carrying `Idempotent-Replayed: true`. */
  replays: number;
  /** 409 answers (a duplicate of a request still in flight). */
  conflicts: number;
  /** Attempts the client abandoned at its per-attempt timeout. */
  timeouts: number;
  /** Attempts that ended in a network error (connection refused, reset, closed without a reply). */
  networkErrors: number;
}

/** Options of {@link createDemoClient}. Durations are in milliseconds. */
interface DemoClientOptions {
  /** Per-attempt timeout; a `slow` handler is made to outlast it. */
  readonly attemptTimeoutMs: number;
  /** Longest a logical call may keep retrying, waits included. */
  readonly deadlineMs: number;
  /** Most attempts per logical call. */
  readonly maxAttempts: number;
  /**
   * Sees each attempt's headers just before it leaves, after a used-up fault header was removed, and may
   * change them (the gateway scenario turns the fault header into its upstream's `x-fault`).
   */
  readonly onHeaders?: (headers: Headers) => void;
}

/** The client and its counters. */
interface DemoClient {
  /** A fetch that retries with the same key; pass the key as `idempotencyKey`. */
  readonly fetch: RetryingFetch;
  readonly counters: Readonly<TrafficCounters>;
  /** Stops sending the fault header of `key`: the server reported the fault took effect. */
  faultApplied(key: string): void;
  /** Closes the connection pool. */
  close(): Promise<void>;
}

/**
 * Creates the client. A request may carry the `x-retrysafe-demo-fault` header; it is sent until the server
 * reports the fault took effect ({@link DemoClient.faultApplied}) — an attempt refused while the server
 * restarts, or cut off when it dies, does not use it up — so the retries of a payment whose reply was
 * lost (or whose server was crashed) go through clean, as a real retry would.
 *
 * @example
 * ```ts
 * const client = createDemoClient({ attemptTimeoutMs: 400, deadlineMs: 20_000, maxAttempts: 40 });
 * const res = await client.fetch(`${origin}/payments`, { method: 'POST', idempotencyKey: 'pay-1', body });
 * ```
 */
export function createDemoClient(options: DemoClientOptions): DemoClient {
  const agent = new Agent({ keepAliveTimeout: 2_000 });
  const counters: TrafficCounters = { attempts: 0, replays: 0, conflicts: 0, timeouts: 0, networkErrors: 0 };
  // Keys whose fault took effect: their later attempts go out clean.
  const applied = new Set<string>();

  const overTheWire = (input: string | URL | Request, init?: RequestInit): Promise<Response> => {
    const headers = new Headers(init?.headers);
    const key = headers.get('idempotency-key');
    if (headers.has(FAULT_HEADER) && key !== null && applied.has(parseIdempotencyKey(key))) headers.delete(FAULT_HEADER);
    options.onHeaders?.(headers);
    // undici's types and Node's global fetch types describe the same classes.
    return undiciFetch(input instanceof Request ? input.url : input, {
      ...(init as unknown as UndiciRequestInit | undefined),
      headers: [...headers],
      dispatcher: agent,
    });
  };

  const onAttempt = (attempt: AttemptRecord): void => {
    counters.attempts++;
    if (attempt.replayed) counters.replays++;
    if (attempt.status === 409) counters.conflicts++;
    if (attempt.status !== undefined) return;
    if (attempt.error instanceof DOMException && attempt.error.name === 'TimeoutError') counters.timeouts++;
    else counters.networkErrors++;
  };

  const fetch = createRetryingFetch({
    fetch: overTheWire,
    attemptTimeoutMs: options.attemptTimeoutMs,
    deadlineMs: options.deadlineMs,
    maxAttempts: options.maxAttempts,
    baseDelayMs: 25,
    // Also caps the server's `Retry-After: 1`, so an in-flight duplicate is retried within a quarter second.
    maxDelayMs: 250,
    onAttempt,
  });
  return { fetch, counters, faultApplied: (key) => applied.add(key), close: () => agent.close() };
}

