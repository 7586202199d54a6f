/**
 * RFC 9457 problem details for the errors retrysafe answers over HTTP. This is the one place where error
 * codes become HTTP statuses.
 *
 * @module
 */
import type { HttpErrorCode, IdempotencyError } from './errors.js';

/** An RFC 9457 `application/problem+json` body. */
export interface ProblemDetails {
  /** URI of the problem type: `${typeBase}${code}`. */
  readonly type: string;
  readonly title: string;
  readonly status: number;
  readonly detail: string;
  /** The retrysafe error code (an RFC 9457 extension member): an `IdempotencyErrorCode` or a module's own. */
  readonly code: string;
}

/** A ready-to-send problem response. */
export interface ProblemResponse {
  readonly status: number;
  /** Lower-case header names; always `content-type: application/problem+json`, plus `retry-after` on 409. */
  readonly headers: Readonly<Record<string, string>>;
  readonly body: ProblemDetails;
}

/** Default base of the problem `type` URIs. */
export const DEFAULT_PROBLEM_TYPE_BASE = 'https://retrysafe.dev/problems/';

const STATUS: Readonly<Record<HttpErrorCode, readonly [number, string]>> = {
  'idempotency-key-missing': [400, 'Idempotency-Key missing'],
  'idempotency-key-invalid': [400, 'Idempotency-Key invalid'],
  'idempotency-key-reused': [422, 'Idempotency-Key reused with another request'],
  'idempotency-request-in-progress': [409, 'Request in progress'],
  'idempotency-lease-lost': [409, 'Idempotency lease lost'],
  'idempotency-store-unavailable': [503, 'Idempotency store unavailable'],
  'idempotency-request-too-large': [413, 'Request body too large'],
  'idempotency-response-not-kept': [410, 'Response not kept'],
};

/**
 * The answer to a code of a component that is not an HTTP handler (inbox, outbox, sessions, retrying
 * fetch, phases, CLI) reaching an HTTP adapter: the server failed, so 500, without `Retry-After`.
 */
const INTERNAL: readonly [number, string] = [500, 'Internal error'];

/** `true` for the codes the HTTP adapters answer with their own status (see {@link problemFor}). */
export function isHttpErrorCode(code: string): code is HttpErrorCode {
  return Object.hasOwn(STATUS, code);
}

/**
 * Maps an {@link IdempotencyError} to its HTTP answer:
 * 400 missing/invalid key, 422 key reused (IETF draft section 2.7), 409 in progress or lease lost (with
 * `Retry-After` in seconds), 413 request body over `maxBodyBytes`, 410 response not kept (over
 * `maxResponseBytes`), 503 store unavailable (also with `Retry-After`). Any other code (one for which
 * {@link isHttpErrorCode} is false, e.g. an inbox or session error) is a server-side failure: 500.
 *
 * @param typeBase - prefix of the `type` URI @defaultValue {@link DEFAULT_PROBLEM_TYPE_BASE}
 * @param retryAfterSeconds - value of `Retry-After` on 409 and 503 answers, in seconds @defaultValue 1
 */
export function problemFor(error: IdempotencyError, typeBase = DEFAULT_PROBLEM_TYPE_BASE, retryAfterSeconds = 1): ProblemResponse {
  const [status, title] = isHttpErrorCode(error.code) ? STATUS[error.code] : INTERNAL;
  const headers: Record<string, string> = { 'content-type': 'application/problem+json' };
  if (status === 409 || status === 503) headers['retry-after'] = String(retryAfterSeconds);
  return { status, headers, body: { type: `${typeBase}${error.code}`, title, status, detail: error.message, code: error.code } };
}
