/**
 * The refusals of a session receiver (`retrysafe/sessions`), under their own root {@link SessionError},
 * which extends `IdempotencyError`. Each carries a literal `name` and a stable string `code`; an HTTP
 * adapter would answer them as the `status` documented on each class.
 *
 * @module
 */
import { ModuleError } from '../core/errors.js';

/** Stable machine-readable codes of {@link SessionError}. */
export type SessionErrorCode =
  | 'session-unknown'
  | 'session-expired'
  | 'session-request-stale'
  | 'session-request-invalid'
  | 'session-request-in-progress'
  | 'session-lease-lost';

/** Root of the errors a session receiver or client throws on purpose. */
export class SessionError extends ModuleError<SessionErrorCode> {
  override readonly name: string = 'SessionError';
  /** The client id the refusal is about. */
  readonly clientId: string;

  constructor(code: SessionErrorCode, clientId: string, message: string, options?: { cause?: unknown }) {
    super(code, message, options);
    this.clientId = clientId;
  }
}

/**
 * No session has this client id: it was never registered, or it expired and was reaped. Sessions are never
 * re-created implicitly, because a new session could apply again a request the old one already applied
 * (Ongaro, "Consensus: Bridging Theory and Practice", section 6.3). The client must register anew. HTTP: 404.
 */
export class SessionUnknownError extends SessionError {
  override readonly name = 'SessionUnknownError';
  constructor(clientId: string) {
    super('session-unknown', clientId, `No session is registered under client id ${JSON.stringify(clientId)}.`);
  }
}

/**
 * The session's lease ran out: no request or keep-alive renewed it in time. Its saved responses are gone,
 * so it can no longer tell a retry from a new request, and refuses both. HTTP: 410.
 */
export class SessionExpiredError extends SessionError {
  override readonly name = 'SessionExpiredError';
  constructor(clientId: string) {
    super('session-expired', clientId, `The session of client ${JSON.stringify(clientId)} has expired; register a new one.`);
  }
}

/**
 * The request number is at or below the session's low-water mark: the client already received that
 * request's response and the server has discarded it, so this is a late duplicate. It is not applied.
 * HTTP: 409 without `Retry-After`.
 */
export class StaleRequestError extends SessionError {
  override readonly name = 'StaleRequestError';
  constructor(
    clientId: string,
    readonly requestNumber: number,
    readonly lowWaterMark: number,
  ) {
    super(
      'session-request-stale',
      clientId,
      `Request ${requestNumber} of client ${JSON.stringify(clientId)} is at or below the low-water mark ${lowWaterMark}; it is a late duplicate.`,
    );
  }
}

/**
 * The request's session fields are malformed: the client id is not a non-empty string, the request number
 * is not a positive safe integer, or the low-water mark is not an integer in `[0, requestNumber)` (a client
 * cannot have received the response of the request it is sending). HTTP: 400.
 */
export class SessionRequestInvalidError extends SessionError {
  override readonly name = 'SessionRequestInvalidError';
  constructor(clientId: string, readonly reason: string) {
    super('session-request-invalid', clientId, `The session request is invalid: ${reason}.`);
  }
}

/** The same request number is being applied right now by another delivery; retry later. HTTP: 409 with `Retry-After`. */
export class SessionRequestInProgressError extends SessionError {
  override readonly name = 'SessionRequestInProgressError';
  constructor(clientId: string, readonly requestNumber: number) {
    super(
      'session-request-in-progress',
      clientId,
      `Request ${requestNumber} of client ${JSON.stringify(clientId)} is still being applied; retry later.`,
    );
  }
}

/**
 * This execution's hold on the request was lost while it ran — its execution lease expired and a retry took
 * over, the client's low-water mark passed the request (the client gave up on it), or the session expired —
 * so its response was not saved. HTTP: 409.
 */
export class SessionLeaseLostError extends SessionError {
  override readonly name = 'SessionLeaseLostError';
  constructor(clientId: string, readonly requestNumber: number) {
    super(
      'session-lease-lost',
      clientId,
      `The hold on request ${requestNumber} of client ${JSON.stringify(clientId)} was lost while it ran; its response was not saved.`,
    );
  }
}
