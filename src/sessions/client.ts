/**
 * The client half of client sessions: numbers requests, tracks the low-water mark, retries a request under
 * the same number, and sends keep-alives so the session's lease does not run out between requests.
 * Transport-neutral: the caller supplies how a request reaches the server (an in-process
 * `SessionReceiver`, HTTP headers, a message).
 *
 * @module
 */
import { describe, requireAtMost, requireCount, requireDurationMs, requireFunction } from '../core/validate.js';
import { fullJitterDelay } from '../client/backoff.js';
import {
  SessionError,
  SessionExpiredError,
  SessionLeaseLostError,
  SessionRequestInProgressError,
  SessionUnknownError,
} from './errors.js';
import type { SessionRequest } from './store.js';
import { sleep as timerSleep } from '../client/sleep.js';
import { requireOptions } from '../core/validate.js';

/** Options of {@link SessionClient.open}. Durations are in milliseconds. */
export interface SessionClientOptions {
  /** Opens a session on the server and resolves its client id (e.g. `() => receiver.register()`). */
  readonly register: () => Promise<string>;
  /**
   * Sends a keep-alive with the current low-water mark (e.g. `(id, lwm) => receiver.keepAlive(id, lwm)`).
   * Without it no keep-alives are sent and an idle session expires after the server's lease.
   */
  readonly keepAlive?: (clientId: string, lowWaterMark: number) => Promise<void>;
  /**
   * Interval of automatic keep-alives; keep it well under the server's session lease (`leaseMs`).
   * Used only with `keepAlive`. @defaultValue 10_000
   */
  readonly keepAliveIntervalMs?: number;
  /** Most sends of one request number, the first included. @defaultValue 5 */
  readonly maxAttempts?: number;
  /** Full-jitter backoff ceiling after the first attempt; doubles per attempt. @defaultValue 100 */
  readonly baseDelayMs?: number;
  /** Cap of the backoff ceiling. @defaultValue 5_000 */
  readonly maxDelayMs?: number;
  /** Jitter source returning numbers in `[0, 1)`. @defaultValue `Math.random` */
  readonly random?: () => number;
  /** Waits between sends of one request. @defaultValue a `setTimeout` timer */
  readonly sleep?: (ms: number) => Promise<void>;
  /**
   * Whether a failed send is retried under the same request number. @defaultValue retries every error
   * except a {@link SessionError}, and among those retries only `session-request-in-progress` and
   * `session-lease-lost`
   */
  readonly isRetryable?: (error: unknown) => boolean;
}

interface ResolvedClientOptions {
  readonly register: () => Promise<string>;
  readonly keepAlive: ((clientId: string, lowWaterMark: number) => Promise<void>) | undefined;
  readonly keepAliveIntervalMs: number;
  readonly maxAttempts: number;
  readonly baseDelayMs: number;
  readonly maxDelayMs: number;
  readonly random: () => number;
  readonly sleep: (ms: number) => Promise<void>;
  readonly isRetryable: (error: unknown) => boolean;
}

function defaultIsRetryable(error: unknown): boolean {
  return !(error instanceof SessionError) || error instanceof SessionRequestInProgressError || error instanceof SessionLeaseLostError;
}

/**
 * One registered client session. Request numbers start at 1 and rise by one per {@link SessionClient.request};
 * retries of a request reuse its number. The low-water mark is the highest `n` such that every request up to
 * `n` has settled — its response arrived, or the client gave up on it — so the server can discard those
 * responses (and refuse their late duplicates). Once the server answers `session-unknown` or
 * `session-expired`, the session is dead: every later request rejects with that error, and the caller opens
 * a new client (the outcome of requests that were in flight is then unknown, as after any lost reply).
 */
export class SessionClient {
  /** The id the server handed out at registration. */
  readonly clientId: string;
  private readonly config: ResolvedClientOptions;
  private lastNumber = 0;
  private mark = 0;
  private readonly settledAbove = new Set<number>();
  private failure: SessionError | undefined;
  private timer: ReturnType<typeof setInterval> | undefined;

  private constructor(clientId: string, config: ResolvedClientOptions) {
    this.clientId = clientId;
    this.config = config;
    if (config.keepAlive) {
      this.timer = setInterval(() => void this.keepAlive().catch(() => undefined), config.keepAliveIntervalMs);
      // Keep-alives serve the session, not the process: they must not keep Node running.
      this.timer.unref();
    }
  }

  /**
   * Validates the options, registers a session and starts keep-alives.
   *
   * @throws TypeError naming the option when an option is invalid
   * @throws whatever `register` rejects with
   * @example
   * ```ts
   * import { SessionClient } from 'retrysafe/sessions';
   *
   * const client = await SessionClient.open({
   *   register: () => receiver.register(),
   *   keepAlive: (id, lwm) => receiver.keepAlive(id, lwm),
   *   keepAliveIntervalMs: 10_000,
   * });
   * const balance = await client.request((session) => receiver.apply(session, () => debit(account, 100)));
   * client.close();
   * ```
   */
  static async open(options: SessionClientOptions): Promise<SessionClient> {
    const config = resolveClientOptions(options);
    const clientId = await config.register();
    if (typeof clientId !== 'string' || clientId.length === 0) {
      throw new TypeError(`retrysafe: "register" must resolve a non-empty client id, got ${describe(clientId)}`);
    }
    return new SessionClient(clientId, config);
  }

  /** The current low-water mark (0 before any request settled). */
  get lowWaterMark(): number {
    return this.mark;
  }

  /** The highest request number handed out so far. */
  get lastRequestNumber(): number {
    return this.lastNumber;
  }

  /** Why the session is dead (`session-unknown` or `session-expired`), or `undefined` while it lives. */
  get ended(): SessionError | undefined {
    return this.failure;
  }

  /**
   * Sends one logical request: takes the next request number and calls `send` with the session fields
   * (re-reading the low-water mark on each attempt), retrying under the same number with full-jitter
   * backoff while `isRetryable` allows, up to `maxAttempts` sends.
   *
   * @throws the session's end error at once when the session is dead
   * @throws the last error `send` rejected with; the request then counts as settled (given up on)
   */
  async request<T>(send: (request: SessionRequest) => Promise<T>): Promise<T> {
    if (this.failure) throw this.failure;
    const requestNumber = ++this.lastNumber;
    try {
      for (let attempt = 1; ; attempt++) {
        try {
          return await send({ clientId: this.clientId, requestNumber, lowWaterMark: this.mark });
        } catch (error) {
          this.noteEnd(error);
          if (this.failure || attempt >= this.config.maxAttempts || !this.config.isRetryable(error)) throw error;
          const { baseDelayMs, maxDelayMs, random } = this.config;
          await this.config.sleep(fullJitterDelay(attempt, baseDelayMs, maxDelayMs, random));
        }
      }
    } finally {
      this.settle(requestNumber);
    }
  }

  /**
   * Sends one keep-alive now with the current low-water mark (the timer calls this too).
   *
   * @throws the session's end error when the session is dead; whatever `keepAlive` rejects with
   * @throws TypeError when the client was opened without `keepAlive`
   */
  async keepAlive(): Promise<void> {
    if (this.failure) throw this.failure;
    if (!this.config.keepAlive) throw new TypeError('retrysafe: this SessionClient was opened without a "keepAlive" option');
    try {
      await this.config.keepAlive(this.clientId, this.mark);
    } catch (error) {
      this.noteEnd(error);
      throw error;
    }
  }

  /** Stops the keep-alive timer. The server session then lives until its lease runs out. */
  close(): void {
    clearInterval(this.timer);
    this.timer = undefined;
  }

  private noteEnd(error: unknown): void {
    if (error instanceof SessionUnknownError || error instanceof SessionExpiredError) {
      this.failure ??= error;
      this.close();
    }
  }

  private settle(requestNumber: number): void {
    this.settledAbove.add(requestNumber);
    while (this.settledAbove.delete(this.mark + 1)) this.mark++;
  }
}

function resolveClientOptions(options: SessionClientOptions): ResolvedClientOptions {
  requireOptions('SessionClient.open', options);
  // Keeps each option's own type, which requireFunction's generic would have to restate.
  const fn = <F>(name: string, value: F): F => {
    requireFunction(name, value);
    return value;
  };
  const maxAttempts = requireCount('maxAttempts', options.maxAttempts === undefined ? 5 : options.maxAttempts);
  const baseDelayMs = requireDurationMs('baseDelayMs', options.baseDelayMs === undefined ? 100 : options.baseDelayMs);
  const maxDelayMs = requireDurationMs('maxDelayMs', options.maxDelayMs === undefined ? 5_000 : options.maxDelayMs);
  requireAtMost('baseDelayMs', baseDelayMs, 'maxDelayMs', maxDelayMs);
  return Object.freeze({
    register: fn('register', options.register),
    keepAlive: options.keepAlive === undefined ? undefined : fn('keepAlive', options.keepAlive),
    keepAliveIntervalMs: requireDurationMs(
      'keepAliveIntervalMs',
      options.keepAliveIntervalMs === undefined ? 10_000 : options.keepAliveIntervalMs,
    ),
    maxAttempts,
    baseDelayMs,
    maxDelayMs,
    random: fn('random', options.random === undefined ? Math.random : options.random),
    sleep: fn('sleep', options.sleep === undefined ? (ms: number) => timerSleep(ms) : options.sleep),
    isRetryable: fn('isRetryable', options.isRetryable === undefined ? defaultIsRetryable : options.isRetryable),
  });
}
