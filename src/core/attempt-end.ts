/**
 * How one attempt of the engine ends, apart from the engine itself: the default persistence rule, the
 * signals its transactional and plain paths throw to themselves, and a claim's answer as the result the
 * observer records.
 *
 * @module
 */
import type { StoreCallResult } from './observer.js';
import type { IdempotencyRecord, StoredResponse } from './record.js';
import type { ClaimInput, ClaimResult } from './store.js';

/** Saves every status below 500; releases server errors. */
export function persistBelow500(response: StoredResponse): boolean {
  return response.status < 500;
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
