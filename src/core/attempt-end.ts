/**
 * How one attempt of the engine ends, apart from the engine itself: the default persistence rule, the
 * signals its transactional and plain paths throw to themselves, and a claim's answer as the result the
 * observer records.
 *
 * @module
 */
import type { ReceiverObserver, StoreCallResult } from './observer.js';
import type { OperationId } from './receiver.js';
import type { IdempotencyRecord, StoredResponse } from './record.js';
import type { ClaimInput, ClaimResult } from './store.js';

/** Saves every status below 500; releases server errors. */
export function persistBelow500(response: StoredResponse): boolean {
  return response.status < 500;
}

/**
 * Whether the response of the work under `id`, which ran, is saved: `shouldPersist`'s answer. A
 * `shouldPersist` that throws saves it, the choice that never runs the work twice, and its throw is
 * reported to `observer` (`shouldPersistThrew`) instead of ending the request.
 */
export function persists(shouldPersist: (response: StoredResponse) => boolean, response: StoredResponse, observer: ReceiverObserver, id: OperationId): boolean {
  try {
    return shouldPersist(response);
  } catch (error) {
    observer.shouldPersistThrew(id.scope, id.key, error);
    return true;
  }
}

/** Thrown inside a transaction to roll it back while still answering with `response`. */
export class Rollback extends Error {
  constructor(readonly response: StoredResponse) {
    super('rolled back: the response is not to be saved');
  }
}

/** Wraps the work's own failure so it is told apart from a store failure. */
export class WorkFailed extends Error {
  constructor(readonly error: unknown) {
    super('the work failed', { cause: error });
  }
}

/** The plain work ran `maxExecutionMs` and was abandoned. */
export class DeadlineReached extends Error {
  constructor() {
    super('the work reached maxExecutionMs');
  }
}

/** The result of a store call that says nothing beyond its success. */
export const NO_RESULT = (): StoreCallResult => undefined;
/** `complete` and `release` report whether they took effect. */
export const TOOK_EFFECT = (done: boolean): StoreCallResult => done;

/** A plain claim's answer as its store call's result. */
export function claimResult(input: ClaimInput, result: ClaimResult): StoreCallResult {
  if (result.acquired) return result.claim.takeover ? 'takeover' : 'acquired';
  return lostResult(input, result.record);
}

/** A lost claim's answer, by the record that stood in the way. */
export function lostResult(input: ClaimInput, record: IdempotencyRecord): StoreCallResult {
  if (record.fingerprint !== input.fingerprint) return 'mismatch';
  return record.state === 'completed' ? 'replay' : 'in_flight';
}

/**
 * Calls `attempt` again after 50 ms, doubling up to 1 s between tries, for `forMs` milliseconds in all: the
 * first value it resolves with, or `undefined` when every try rejected (each rejection is the caller's to report).
 */
export async function retryFor<T>(forMs: number, attempt: () => Promise<T>): Promise<T | undefined> {
  const until = performance.now() + forMs;
  for (let delayMs = 50; performance.now() + delayMs <= until; delayMs = Math.min(delayMs * 2, 1_000)) {
    await new Promise((resolve) => setTimeout(resolve, delayMs));
    try {
      return await attempt();
    } catch {
      // The next try follows the backoff.
    }
  }
  return undefined;
}

/** Starts `work` (after the timer): its result, or a rejection with {@link DeadlineReached} once it has run `maxExecutionMs` milliseconds. */
export function withDeadline<T>(work: () => Promise<T>, maxExecutionMs: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_resolve, reject) => {
    timer = setTimeout(() => reject(new DeadlineReached()), maxExecutionMs);
  });
  return Promise.race([work(), deadline]).finally(() => clearTimeout(timer));
}
