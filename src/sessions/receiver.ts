/**
 * The server half of client sessions: the session-based Idempotent Receiver of *Patterns of Distributed
 * Systems* (Unmesh Joshi) and Raft (Diego Ongaro, "Consensus: Bridging Theory and Practice", section 6.3).
 * A client registers once, numbers its requests, and reports a low-water mark; the receiver applies each
 * request number once, replays its saved response to retries, and forgets responses the client has
 * received, so memory per client is bounded by its requests in flight.
 *
 * @module
 */
import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import type { MeterProvider } from '@opentelemetry/api';
import { systemClock, type Clock } from '../core/clock.js';
import { describe, invalidOption, requireClock, requireDurationMs, requireGenerateId, requireLimit, requireOptions } from '../core/validate.js';
import { StoreUnavailableError } from '../core/errors.js';
import {
  SessionExpiredError,
  SessionLeaseLostError,
  SessionRequestInProgressError,
  SessionRequestInvalidError,
  SessionUnknownError,
  StaleRequestError,
} from './errors.js';
import { SessionMetrics, type SessionOutcome } from './metrics.js';
import type { SessionRequest, SessionStats, SessionStore } from './store.js';

/** Options of {@link createSessionReceiver}. Durations are in milliseconds. */
export interface SessionReceiverOptions {
  /** Where sessions and saved responses live. */
  readonly store: SessionStore;
  /**
   * How long a session lives without a request or keep-alive. Every accepted request and keep-alive renews
   * it to `now + leaseMs`; clients must send keep-alives more often than this. @defaultValue 60_000
   */
  readonly leaseMs?: number;
  /**
   * How long one execution holds a request number before a retry may take it over (a crashed holder).
   * Must outlast the work. @defaultValue 30_000
   */
  readonly executionLeaseMs?: number;
  /** Time source. @defaultValue the system clock */
  readonly clock?: Clock;
  /** Generator of client ids and fencing tokens; ids must be unguessable and never repeat. @defaultValue `crypto.randomUUID` */
  readonly generateId?: () => string;
  /**
   * Where the receiver's metrics go (see `SESSION_INSTRUMENTS`).
   * @defaultValue the global provider (`metrics.getMeterProvider()`), read at each recording: an SDK
   * registered after the receiver served requests is recorded to from the next one on
   */
  readonly meterProvider?: MeterProvider;
}

/** The outcome of {@link SessionReceiver.apply}. */
export interface Applied<T> {
  /** What the work returned — on a replay, the first execution's value after a JSON round trip. */
  readonly value: T;
  /** `true` when this is the saved response of an earlier execution. */
  readonly replayed: boolean;
  /**
   * `true` when the value is saved for replay. `false` only when the store failed to save it after the
   * work ran: the value is still answered, and the request number stays held until `executionLeaseMs`
   * passes, after which a retry would apply it again (as with the engine's plain mode).
   */
  readonly saved: boolean;
}

/** The server half of client sessions. Create one with {@link createSessionReceiver}. */
export interface SessionReceiver {
  /** The resolved, frozen options. */
  readonly options: Readonly<Required<Omit<SessionReceiverOptions, 'store' | 'meterProvider'>>>;
  readonly store: SessionStore;
  /**
   * Opens a session and resolves its client id: a fresh id from `generateId` (a UUID v4 by default, 122
   * random bits) that the store does not hold — `create` refuses an id taken by a live or expired session
   * and another is drawn — so an id is never handed out twice.
   *
   * @throws {@link StoreUnavailableError} when the store fails, or when `generateId` keeps returning taken ids
   */
  register(): Promise<string>;
  /**
   * Applies request `requestNumber` of a session at most once and returns its value, or replays the saved
   * one. First raises the session's low-water mark to the request's (discarding saved responses at or
   * below it) and renews the session's lease. Out-of-order request numbers are each applied once.
   * The value is saved as JSON; `fn` must return something `JSON.stringify` can encode.
   *
   * @throws {@link SessionRequestInvalidError} — malformed session fields (400)
   * @throws {@link SessionUnknownError} — no such session (404); sessions are never re-created implicitly
   * @throws {@link SessionExpiredError} — the session's lease ran out (410)
   * @throws {@link StaleRequestError} — the request number is at or below the low-water mark (409)
   * @throws {@link SessionRequestInProgressError} — another delivery is applying this number now (409)
   * @throws {@link SessionLeaseLostError} — the hold on the request was lost while `fn` ran; not saved (409)
   * @throws {@link StoreUnavailableError} — the store failed before `fn`, which did not run (503); a failure
   *   to save after `fn` ran is answered with `saved: false` instead
   * @throws whatever `fn` throws; the request number is released first, so a retry applies it again
   */
  apply<T>(request: SessionRequest, fn: () => Promise<T>): Promise<Applied<T>>;
  /**
   * Renews the session's lease and, given the client's low-water mark, discards responses at or below it.
   *
   * @throws {@link SessionUnknownError}, {@link SessionExpiredError}, {@link SessionRequestInvalidError},
   *   {@link StoreUnavailableError}
   */
  keepAlive(clientId: string, lowWaterMark?: number): Promise<void>;
  /** Ends a session at the client's request, deleting it and its responses. Resolves whether it existed. */
  end(clientId: string): Promise<boolean>;
  /** Deletes up to `limit` sessions whose lease has ended, with their responses; resolves how many. */
  reap(limit?: number): Promise<number>;
  /** A session's counters (saved responses, requests in progress, low-water mark, lease end), or `undefined`. */
  stats(clientId: string): Promise<SessionStats | undefined>;
}

/**
 * Creates the session receiver over a {@link SessionStore}.
 *
 * @throws TypeError naming the option when an option is invalid (`leaseMs` not a positive integer, …)
 * @example
 * ```ts
 * import { createMemorySessionStore, createSessionReceiver } from 'retrysafe/sessions';
 *
 * const receiver = createSessionReceiver({ store: createMemorySessionStore(), leaseMs: 30_000 });
 * const clientId = await receiver.register();
 * const { value } = await receiver.apply({ clientId, requestNumber: 1, lowWaterMark: 0 }, async () =>
 *   transfer(from, to, 100),
 * );
 * ```
 */
export function createSessionReceiver(options: SessionReceiverOptions): SessionReceiver {
  return new Receiver(options);
}

/** Attempts at drawing a free client id before `register` gives up on a broken `generateId`. */
const REGISTER_ATTEMPTS = 5;

class Receiver implements SessionReceiver {
  readonly options: SessionReceiver['options'];
  readonly store: SessionStore;
  private readonly metrics: SessionMetrics;

  constructor(options: SessionReceiverOptions) {
    requireOptions('createSessionReceiver', options);
    const store = options.store as unknown;
    if (typeof store !== 'object' || store === null || typeof (store as SessionStore).begin !== 'function') throw invalidOption('store', 'a SessionStore', store);
    this.store = options.store;
    const { meterProvider } = options;
    if (meterProvider !== undefined && (typeof meterProvider !== 'object' || meterProvider === null || typeof meterProvider.getMeter !== 'function')) {
      throw invalidOption('meterProvider', 'an OpenTelemetry MeterProvider', meterProvider);
    }
    this.metrics = new SessionMetrics(meterProvider);
    const clock = requireClock(options.clock === undefined ? systemClock : options.clock);
    const generateId = requireGenerateId(options.generateId === undefined ? randomUUID : options.generateId);
    this.options = Object.freeze({
      leaseMs: requireDurationMs('leaseMs', options.leaseMs === undefined ? 60_000 : options.leaseMs),
      executionLeaseMs: requireDurationMs(
        'executionLeaseMs',
        options.executionLeaseMs === undefined ? 30_000 : options.executionLeaseMs,
      ),
      clock,
      generateId,
    });
  }

  async register(): Promise<string> {
    for (let i = 0; i < REGISTER_ATTEMPTS; i++) {
      const clientId = this.options.generateId();
      if (await this.call(() => this.store.create(clientId, this.options.clock.now(), this.options.leaseMs))) {
        this.metrics.registered();
        return clientId;
      }
    }
    throw new StoreUnavailableError(new Error(`generateId returned ${REGISTER_ATTEMPTS} client ids that were already taken`));
  }

  async apply<T>(request: SessionRequest, fn: () => Promise<T>): Promise<Applied<T>> {
    const work = new TimedWork(fn, this.metrics);
    let applied: Applied<T>;
    try {
      applied = await this.applyOnce(request, work);
    } catch (error) {
      this.metrics.request(work.threw(error) ? 'released_after_error' : outcomeOf(error));
      throw error;
    }
    this.metrics.request(applied.replayed ? 'replayed' : applied.saved ? 'executed' : 'not_saved');
    return applied;
  }

  private async applyOnce<T>(request: SessionRequest, work: TimedWork<T>): Promise<Applied<T>> {
    const { clientId, requestNumber, lowWaterMark } = checkRequest(request);
    const token = this.options.generateId();
    const begun = await this.call(() =>
      this.store.begin({
        clientId,
        requestNumber,
        lowWaterMark,
        token,
        now: this.options.clock.now(),
        sessionLeaseMs: this.options.leaseMs,
        executionLeaseMs: this.options.executionLeaseMs,
      }),
    );
    switch (begun.outcome) {
      case 'unknown':
        throw new SessionUnknownError(clientId);
      case 'expired':
        throw new SessionExpiredError(clientId);
      case 'stale':
        throw new StaleRequestError(clientId, requestNumber, begun.lowWaterMark);
      case 'in_flight':
        throw new SessionRequestInProgressError(clientId, requestNumber);
      case 'replay':
        return { value: decode<T>(begun.response), replayed: true, saved: true };
      case 'execute':
        if (begun.takeover) this.metrics.takeover();
        break;
    }
    let value: T;
    try {
      value = await work.run();
    } catch (error) {
      await this.store.release(clientId, requestNumber, token).catch(() => false);
      throw error;
    }
    const encoded = JSON.stringify(value) as string | undefined;
    // Replays decode what was saved; the first caller gets the same shape.
    const fresh = decode<T>(encoded ?? '');
    let saved: boolean;
    try {
      saved = await this.store.complete(clientId, requestNumber, token, encoded ?? '');
    } catch {
      // The effect happened; answer it. The request stays held until its execution lease expires.
      return { value: fresh, replayed: false, saved: false };
    }
    if (!saved) throw new SessionLeaseLostError(clientId, requestNumber);
    return { value: fresh, replayed: false, saved: true };
  }

  async keepAlive(clientId: string, lowWaterMark = 0): Promise<void> {
    checkClientId(clientId);
    if (typeof lowWaterMark !== 'number' || !Number.isSafeInteger(lowWaterMark) || lowWaterMark < 0) {
      throw new SessionRequestInvalidError(clientId, `the low-water mark must be a non-negative integer, got ${describe(lowWaterMark)}`);
    }
    const result = await this.call(() => this.store.keepAlive(clientId, lowWaterMark, this.options.clock.now(), this.options.leaseMs));
    if (result === 'unknown') throw new SessionUnknownError(clientId);
    if (result === 'expired') throw new SessionExpiredError(clientId);
  }

  end(clientId: string): Promise<boolean> {
    return this.call(() => this.store.end(checkClientId(clientId)));
  }

  reap(limit = 1_000): Promise<number> {
    requireLimit('reap', limit);
    return this.call(async () => {
      const reaped = await this.store.reap(this.options.clock.now(), limit);
      this.metrics.reaped(reaped);
      return reaped;
    });
  }

  stats(clientId: string): Promise<SessionStats | undefined> {
    return this.call(() => this.store.stats(clientId));
  }

  /** Runs a store operation, turning its failure into {@link StoreUnavailableError}. */
  private async call<R>(operation: () => Promise<R>): Promise<R> {
    try {
      return await operation();
    } catch (error) {
      throw new StoreUnavailableError(error);
    }
  }
}

/** The work of one `apply`, timed; remembers its own throw so it is told apart from the receiver's. */
class TimedWork<T> {
  private failed = false;
  private failure: unknown;

  constructor(
    private readonly fn: () => Promise<T>,
    private readonly metrics: SessionMetrics,
  ) {}

  async run(): Promise<T> {
    const started = performance.now();
    try {
      const value = await this.fn();
      this.metrics.handler('executed', (performance.now() - started) / 1000);
      return value;
    } catch (error) {
      this.failed = true;
      this.failure = error;
      this.metrics.handler('released_after_error', (performance.now() - started) / 1000);
      throw error;
    }
  }

  /** Whether `error` is the work's own throw (whatever its class: the work may call another receiver). */
  threw(error: unknown): boolean {
    return this.failed && error === this.failure;
  }
}

/** The outcome of an `apply` the receiver refused. */
function outcomeOf(error: unknown): SessionOutcome {
  if (error instanceof StaleRequestError) return 'stale';
  if (error instanceof SessionRequestInProgressError) return 'in_flight_rejected';
  if (error instanceof SessionLeaseLostError) return 'lease_lost';
  if (error instanceof SessionUnknownError) return 'session_unknown';
  if (error instanceof SessionExpiredError) return 'session_expired';
  if (error instanceof SessionRequestInvalidError) return 'invalid_request';
  return error instanceof StoreUnavailableError ? 'store_unavailable' : 'error';
}

function checkClientId(clientId: unknown): string {
  if (typeof clientId !== 'string' || clientId.length === 0) {
    throw new SessionRequestInvalidError(String(clientId), `the client id must be a non-empty string, got ${describe(clientId)}`);
  }
  return clientId;
}

function checkRequest(request: SessionRequest): SessionRequest {
  if (typeof request !== 'object' || request === null) {
    throw new SessionRequestInvalidError('', `expected { clientId, requestNumber, lowWaterMark }, got ${describe(request)}`);
  }
  const clientId = checkClientId(request.clientId);
  const { requestNumber, lowWaterMark } = request;
  if (typeof requestNumber !== 'number' || !Number.isSafeInteger(requestNumber) || requestNumber < 1) {
    throw new SessionRequestInvalidError(clientId, `the request number must be a positive integer, got ${describe(requestNumber)}`);
  }
  if (typeof lowWaterMark !== 'number' || !Number.isSafeInteger(lowWaterMark) || lowWaterMark < 0 || lowWaterMark >= requestNumber) {
    throw new SessionRequestInvalidError(
      clientId,
      `the low-water mark must be an integer from 0 to ${requestNumber - 1}, got ${describe(lowWaterMark)}`,
    );
  }
  return { clientId, requestNumber, lowWaterMark };
}

function decode<T>(text: string): T {
  return (text === '' ? undefined : JSON.parse(text)) as T;
}

