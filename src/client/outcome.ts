/**
 * What the retrying fetch reports about its attempts: one {@link AttemptRecord} per attempt, and the
 * {@link RetryExhaustedError} it throws when every attempt it was allowed failed.
 *
 * @module
 */
import { ModuleError } from '../core/errors.js';

/** One attempt of a logical call, as `onAttempt`, `attemptsOf` and {@link RetryExhaustedError} report it. */
export interface AttemptRecord {
  /** 1-based number of the attempt within the logical call. */
  readonly attempt: number;
  /** The Idempotency-Key sent (the same on every attempt of a call), or `undefined` for a keyless method. */
  readonly key: string | undefined;
  /** The response status, when a response arrived. */
  readonly status?: number;
  /**
   * Why no response arrived: the network error fetch rejected with, or a `DOMException` named
   * `TimeoutError` when the attempt outlived `attemptTimeoutMs` or the call's deadline.
   */
  readonly error?: unknown;
  /** `true` when the response carried `Idempotent-Replayed: true`: the server replayed a saved answer. */
  readonly replayed: boolean;
  /** Milliseconds waited before the next attempt; 0 when there is none. */
  readonly delayMs: number;
}

/** Why a logical call gave up. */
export type RetryExhaustedCode =
  /** `maxAttempts` attempts were made and the last one failed retryably. */
  | 'retry-attempts-exhausted'
  /** The overall deadline (`deadlineMs`) passed, or the next wait would run past it. */
  | 'retry-deadline-exceeded';

/**
 * Thrown by the retrying fetch when every attempt it was allowed failed with a retryable outcome
 * (network error, timeout, 408, 409 with `Retry-After`, 429, 5xx). A non-retryable response is returned,
 * never thrown.
 */
export class RetryExhaustedError extends ModuleError<RetryExhaustedCode> {
  override readonly name = 'RetryExhaustedError';
  /** Every attempt, in order; the last one is the failure that ended the call. */
  readonly attempts: readonly AttemptRecord[];
  /**
   * The last attempt's response when it had one (for example the final 503), with its body unread, so the
   * caller can still inspect it; `undefined` when the last attempt ended in an error.
   */
  readonly response: Response | undefined;

  constructor(code: RetryExhaustedCode, attempts: readonly AttemptRecord[], response: Response | undefined) {
    const last = attempts.at(-1);
    const what = last?.status !== undefined ? `status ${last.status}` : describeError(last?.error);
    super(
      code,
      code === 'retry-deadline-exceeded'
        ? `Gave up at the deadline after ${attempts.length} attempt(s); the last one ended with ${what}.`
        : `All ${attempts.length} attempt(s) failed; the last one ended with ${what}.`,
      { cause: last?.error },
    );
    this.attempts = attempts;
    this.response = response;
  }
}

function describeError(error: unknown): string {
  return error instanceof Error ? `${error.name}: ${error.message}` : String(error);
}
