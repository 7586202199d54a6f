/**
 * The typed errors retrysafe throws. Every one extends {@link IdempotencyError}, carries a literal
 * `name`, a stable string `code` and, where it wraps another failure, a `cause`. Only the HTTP adapters
 * map codes to statuses (see `problem.ts`).
 *
 * @module
 */
import type { IdempotencyRecord } from './record.js';

/**
 * The codes the HTTP adapters answer; `problem.ts` maps each to a status. Every other
 * {@link IdempotencyErrorCode} belongs to a component that is not an HTTP handler.
 */
export type HttpErrorCode =
  | 'idempotency-key-missing'
  | 'idempotency-key-invalid'
  | 'idempotency-key-reused'
  | 'idempotency-request-in-progress'
  | 'idempotency-store-unavailable'
  | 'idempotency-lease-lost'
  | 'idempotency-request-too-large'
  | 'idempotency-response-not-kept';

/**
 * Stable machine-readable codes of the errors defined here: the receiver's, the store contract's and the
 * recovery point's. Every other module owns its codes (`InboxErrorCode`, `OutboxErrorCode`,
 * `SessionErrorCode`, `RetryExhaustedCode`, `retrysafe/store-url`'s `store-url-invalid` and `store-open-failed`) and passes them as `Code`.
 */
export type IdempotencyErrorCode =
  // HTTP receiver (receiver.ts, key.ts): answered by the HTTP adapters.
  | HttpErrorCode
  // A recovery point a phase plan can no longer resume from.
  | 'phase-recovery-point-unresumable'
  // A saga: a phase that failed for good, and a compensation that gave up (src/phases).
  | 'phase-failed-terminally'
  | 'saga-compensation-failed'
  // Stores used against their contract (stores/*).
  | 'store-closed'
  | 'store-misuse'
  | 'store-transaction-aborted'
  | 'store-schema-too-new';

/**
 * A code of {@link IdempotencyError}: one of {@link IdempotencyErrorCode}, or a code a module owns (the
 * `string & Record<never, never>` keeps the core codes offered by editors while admitting the others).
 */
export type ErrorCode = IdempotencyErrorCode | (string & Record<never, never>);

/**
 * Root of every error retrysafe throws on purpose (a bad option is a `TypeError` instead). Module roots
 * such as `InboxError` or `SessionError` extend it and narrow `code` to the union their module owns.
 */
export class IdempotencyError extends Error {
  override readonly name: string = 'IdempotencyError';
  /** Stable code; safe to switch on. */
  readonly code: ErrorCode;

  constructor(code: ErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
  }
}

/**
 * Root of the errors of a module that owns its codes: an {@link IdempotencyError} whose `code` is one of
 * the module's union `Code`. `InboxError`, `OutboxError` and `SessionError` extend it, as do the errors
 * that stand alone in their module (`RetryExhaustedError`, `StoreUrlError`, `StoreOpenError`).
 */
export class ModuleError<Code extends string> extends IdempotencyError {
  override readonly name: string = 'ModuleError';
  /** Stable code; safe to switch on. */
  declare readonly code: Code;

  constructor(code: Code, message: string, options?: { cause?: unknown }) {
    super(code, message, options);
  }
}

/** The request carried no Idempotency-Key where one is required. HTTP: 400. */
export class IdempotencyKeyMissingError extends IdempotencyError {
  override readonly name = 'IdempotencyKeyMissingError';
  constructor(message = 'This operation requires an Idempotency-Key.') {
    super('idempotency-key-missing', message);
  }
}

/**
 * The Idempotency-Key is malformed: empty, longer than 255 characters, neither an RFC 9651 sf-string Item
 * (parameters allowed and ignored) nor a bare key of printable ASCII without `,` or `;`, or a list of keys.
 * `reason` names the rule broken. HTTP: 400.
 */
export class IdempotencyKeyInvalidError extends IdempotencyError {
  override readonly name = 'IdempotencyKeyInvalidError';
  constructor(readonly reason: string) {
    super('idempotency-key-invalid', `The Idempotency-Key is invalid: ${reason}.`);
  }
}

/**
 * The key was already used with a request whose fingerprint differs (IETF Idempotency-Key draft,
 * section 2.7; Stripe). HTTP: 422. The stored record is untouched.
 */
export class IdempotencyKeyReusedError extends IdempotencyError {
  override readonly name = 'IdempotencyKeyReusedError';
  constructor(readonly record: IdempotencyRecord) {
    super(
      'idempotency-key-reused',
      'This Idempotency-Key was already used with a different request payload.',
    );
  }
}

/**
 * Another request holding the same key is still being processed (IETF draft section 2.7). HTTP: 409 with
 * `Retry-After`.
 */
export class RequestInProgressError extends IdempotencyError {
  override readonly name = 'RequestInProgressError';
  constructor(readonly record: IdempotencyRecord) {
    super(
      'idempotency-request-in-progress',
      'A request with this Idempotency-Key is still being processed; retry later.',
    );
  }
}

/**
 * The request ran once and its response was saved without its body, because the body was larger than
 * the middleware keeps (`maxResponseBytes`); a retry gets this instead of running the handler again.
 * HTTP: 410, with the original status as the problem's `originalStatus` member.
 */
export class ResponseNotKeptError extends IdempotencyError {
  override readonly name = 'ResponseNotKeptError';
  /**
   * @param originalStatus - the status the first request was answered with
   * @param bytes - the length of the body that was not kept
   */
  constructor(
    readonly originalStatus: number,
    readonly bytes: number,
  ) {
    super(
      'idempotency-response-not-kept',
      `The request with this Idempotency-Key was processed (status ${originalStatus}), but its response (${bytes} bytes) was too large to keep for replay; it will not run again with this key.`,
    );
  }
}

/** The store could not be reached or failed; the operation did not run (fail closed). HTTP: 503. */
export class StoreUnavailableError extends IdempotencyError {
  override readonly name = 'StoreUnavailableError';
  constructor(cause: unknown) {
    super('idempotency-store-unavailable', 'The idempotency store is unavailable.', { cause });
  }
}

/**
 * Why a lease was lost: `taken_over` — the holder stopped renewing it (or a renewal failed), it expired
 * and another claim took the record over or completed it; `deadline` — the work outran `maxExecutionMs`
 * (or, in transactional mode, its transaction's bound) and was ended, whatever its lease.
 */
export type LeaseLostReason = 'taken_over' | 'deadline';

/**
 * The caller's lease was lost while the work ran, so its result was fenced off and not saved: it was
 * taken over, or the work reached its deadline (see {@link LeaseLostReason}). The winner's result, if any,
 * stands. HTTP: 409.
 */
export class LeaseLostError extends IdempotencyError {
  override readonly name = 'LeaseLostError';
  constructor(
    readonly scope: string,
    readonly key: string,
    readonly reason: LeaseLostReason = 'taken_over',
  ) {
    super(
      'idempotency-lease-lost',
      reason === 'deadline'
        ? 'The work for this Idempotency-Key reached its deadline (maxExecutionMs) and was ended; this result was not saved.'
        : 'The lease on this Idempotency-Key expired and was taken over; this result was not saved.',
    );
  }
}

/**
 * A record's recovery point names a plan or phase the given plan cannot resume: another plan's id, a phase
 * the plan no longer has, or its last phase. The phase runner refuses it rather than guess where to
 * continue; the record is handed back untouched.
 */
export class RecoveryPointUnresumableError extends IdempotencyError {
  override readonly name = 'RecoveryPointUnresumableError';
  constructor(
    readonly scope: string,
    readonly key: string,
    /** The id of the plan asked to resume the record. */
    readonly plan: string,
    message: string,
  ) {
    super('phase-recovery-point-unresumable', message);
  }
}

/**
 * Thrown by a phase to say that it failed for good (a declined card, a sold-out seat): the phase runner does
 * not retry it, but turns the operation into a saga on its way back — it runs the `compensate` of every
 * committed phase, newest first, and saves the plan's compensated response for replay. Any other error a
 * phase throws is retried (the record waits at its recovery point).
 *
 * Source: Garcia-Molina and Salem, "Sagas" (SIGMOD 1987): a failed step runs the compensating steps of
 * those that committed, in reverse.
 */
export class TerminalPhaseError extends IdempotencyError {
  override readonly name = 'TerminalPhaseError';
  /**
   * @param message - why the phase failed; saved with the saga and handed to the compensated response
   * @param options.details - a small JSON value saved with the saga (e.g. the decline code) and handed to
   *   the plan's `compensated` response builder
   */
  constructor(
    message: string,
    options?: { readonly cause?: unknown; readonly details?: unknown },
  ) {
    super('phase-failed-terminally', message, options);
    this.details = options?.details;
  }

  /** The JSON details given to the constructor, if any. */
  readonly details: unknown;
}

/**
 * A saga's compensation gave up: it threw a {@link TerminalPhaseError}, or failed `maxCompensationAttempts`
 * times. The record stays `in_progress` with the saga status `compensation_failed` and a lease that lasts
 * its retention, so neither retries nor the completer loop on it; an operator resumes it with
 * `retrysafe compensation --retry` or settles it with `retrysafe compensation --mark-compensated`. A client
 * retry of the request meanwhile gets {@link RequestInProgressError} (409).
 */
export class CompensationFailedError extends IdempotencyError {
  override readonly name = 'CompensationFailedError';
  constructor(
    readonly scope: string,
    readonly key: string,
    /** The phase whose compensation gave up. */
    readonly phase: string,
    cause: unknown,
  ) {
    super(
      'saga-compensation-failed',
      `retrysafe: the compensation of phase ${JSON.stringify(phase)} of record ${JSON.stringify([scope, key])} gave up; the saga waits for an operator`,
      { cause },
    );
  }
}

/**
 * A store was called after its `close()`. Through a receiver it surfaces as the `cause` of a
 * {@link StoreUnavailableError} (HTTP: 503).
 */
export class StoreClosedError extends IdempotencyError {
  override readonly name = 'StoreClosedError';
  constructor(readonly store: string) {
    super('store-closed', `retrysafe: the ${store} store is closed`);
  }
}

/**
 * A store or one of its transactions was used in a way its contract forbids; the message says how (for
 * example: the store itself called inside its own transaction instead of the view passed to `fn`, a
 * transaction view used after the transaction ended, or the transaction ended by `fn` itself). A
 * programming error, not a failure of the database.
 */
export class StoreMisuseError extends IdempotencyError {
  override readonly name = 'StoreMisuseError';
  constructor(message: string) {
    super('store-misuse', message);
  }
}

/**
 * A transaction could not commit because an earlier statement in it failed (an error the caller's code
 * caught and swallowed): PostgreSQL rolled it back at COMMIT, so nothing of it was written.
 */
export class TransactionAbortedError extends IdempotencyError {
  override readonly name = 'TransactionAbortedError';
  constructor(message: string) {
    super('store-transaction-aborted', message);
  }
}

/**
 * A store's migrations found a ledger that records a version newer than this release knows: a newer
 * retrysafe migrated the database, and downgrading is not supported. Nothing was applied. Thrown by the
 * SQLite stores when they open and by PostgreSQL `migrate()`.
 */
export class SchemaTooNewError extends IdempotencyError {
  override readonly name = 'SchemaTooNewError';
  constructor(
    /** What was migrated, as the message names it: `table "records"`, `schema "retrysafe"`. */
    readonly target: string,
    /** The highest version the ledger records. */
    readonly version: number,
    /** The highest version this release knows. */
    readonly known: number,
  ) {
    super('store-schema-too-new', `retrysafe: ${target} was migrated to version ${version} by a newer retrysafe; this release knows up to ${known}`);
  }
}
