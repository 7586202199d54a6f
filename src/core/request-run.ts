/**
 * One request through the engine: its observation, its work, the time it may still wait for a request in
 * flight, and how it ended.
 *
 * @module
 */
import { IdempotencyKeyReusedError, LeaseLostError, RequestInProgressError, StoreUnavailableError } from './errors.js';
import type { Observation, RequestOutcome } from './observer.js';
import type { Execution, ExecutionContext } from './receiver.js';
import type { StoredResponse } from './record.js';

/**
 * One request through the engine's `execute`: its observation, its work, the time it may still wait for a
 * request in flight, and how it went so far.
 */
export class RequestRun<Tx> {
  /** Milliseconds left of `waitTimeoutMs`, counted in the time actually waited. */
  budgetMs: number;
  /** Whether the request waited for another's response (`wait` mode). */
  waited = false;
  /** The work's own throw, told apart from the receiver's (the work may call another receiver). */
  private thrown: { readonly error: unknown } | undefined;

  constructor(
    readonly observation: Observation,
    readonly work: (context: ExecutionContext<Tx>) => Promise<StoredResponse>,
    waitTimeoutMs: number,
  ) {
    this.budgetMs = waitTimeoutMs;
  }

  /** The work starts under a won claim. */
  workStarted(): void {
    this.observation.workStarted();
  }

  /** The work returned a response. */
  workSucceeded(): void {
    this.observation.workEnded(false);
  }

  /** The work threw `error`. */
  workFailed(error: unknown): void {
    this.thrown = { error };
    this.observation.workEnded(true);
  }

  /** Whether `error` is the work's own throw. */
  threw(error: unknown): boolean {
    return this.thrown !== undefined && this.thrown.error === error;
  }

  /** Ends the observation of a request answered with `execution`, and hands `execution` on. */
  answered(execution: Execution): Execution {
    this.observation.end(execution.replayed ? (this.waited ? 'waited' : 'replayed') : 'executed');
    return execution;
  }

  /** Ends the observation of a request that ended with `error`: the work's own throw, or the engine's refusal. */
  ended(error: unknown): void {
    this.observation.end(this.threw(error) ? 'released_after_error' : outcomeOf(error), error);
  }
}

/** How a request that ended with `error` (not the work's own throw) is reported. */
function outcomeOf(error: unknown): RequestOutcome {
  if (error instanceof IdempotencyKeyReusedError) return 'mismatch';
  if (error instanceof RequestInProgressError) return 'in_flight_rejected';
  if (error instanceof LeaseLostError) return 'lease_lost';
  if (error instanceof StoreUnavailableError) return 'store_unavailable';
  return 'released_after_error';
}
