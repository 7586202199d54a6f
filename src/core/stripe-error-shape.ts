/**
 * The Stripe-style error shape: problems answered as Stripe's API answers errors, for APIs whose clients
 * are modelled on Stripe's (stripe-node and the other official libraries treat a body as an error only
 * when it has an `error` member, and follow `Stripe-Should-Retry` before the status).
 *
 * @module
 */
import type { Problem, ProblemAnswer } from './problem.js';

/** The `type` values of Stripe's error object (Stripe API reference, "Errors") that retrysafe's problems map to. */
export type StripeErrorType = 'api_error' | 'idempotency_error' | 'invalid_request_error';

/** The body {@link stripeErrorShape} answers. */
export interface StripeErrorBody {
  readonly error: {
    readonly type: StripeErrorType;
    /** Stripe's code where Stripe has one for the condition (`idempotency_key_in_use`), else retrysafe's code in snake case. */
    readonly code: string;
    /** The problem's `detail`. */
    readonly message: string;
    /** The problem's `type` URI. */
    readonly doc_url: string;
    /** The problem's extension members, in snake case (`original_status` on a 410). */
    readonly [extension: string]: unknown;
  };
}

/** `[type, code]` by retrysafe code; any other code goes by its status (see {@link stripeErrorShape}). */
const MAPPING: Readonly<Record<string, readonly [StripeErrorType, string]>> = {
  'idempotency-key-missing': ['invalid_request_error', 'idempotency_key_missing'],
  'idempotency-key-invalid': ['invalid_request_error', 'idempotency_key_invalid'],
  'idempotency-request-too-large': ['invalid_request_error', 'idempotency_request_too_large'],
  'idempotency-key-reused': ['idempotency_error', 'idempotency_key_reused'],
  'idempotency-request-in-progress': ['idempotency_error', 'idempotency_key_in_use'],
  'idempotency-lease-lost': ['idempotency_error', 'idempotency_lease_lost'],
  'idempotency-response-not-kept': ['idempotency_error', 'idempotency_response_not_kept'],
  'idempotency-store-unavailable': ['api_error', 'idempotency_store_unavailable'],
};

/**
 * A {@link ProblemShape} answering `{ "error": { "type", "code", "message", "doc_url" } }` as
 * `application/json`, with the problem's status, `Stripe-Should-Retry: true` and `Retry-After` when a
 * retry with the same key can succeed later (409 in progress or lease lost, 503 store unavailable), and
 * `Stripe-Should-Retry: false` otherwise (400, 410, 413, 422, 500: the same request would get the same
 * answer). Sources: Stripe API reference, "Errors" (the error object and its `type` values) and
 * "Idempotent requests"; stripe-node's `RequestSender._shouldRetry` (the header decides before the status).
 *
 * The statuses stay retrysafe's: a key reused with another request is 422 (IETF Idempotency-Key draft
 * section 2.7), where Stripe answers 400; stripe-node then throws a `StripeAPIError` whose `rawType` is
 * `idempotency_error`, not a `StripeIdempotencyError`. Wrap the shape to answer 400 instead.
 *
 * @example
 * ```ts
 * app.post('/v1/charges', idempotency({ receiver, problem: stripeErrorShape }), express.urlencoded(), createCharge);
 * // Stripe's own status for a reused key:
 * const problem: ProblemShape = (p) => ({ ...stripeErrorShape(p), ...(p.status === 422 && { status: 400 }) });
 * ```
 */
export function stripeErrorShape(problem: Problem): ProblemAnswer {
  const [type, code] = MAPPING[problem.code] ?? [problem.status >= 500 ? 'api_error' : 'invalid_request_error', snakeCase(problem.code)];
  const retry = problem.retryAfterSeconds !== undefined;
  const headers: Record<string, string> = { 'content-type': 'application/json', 'stripe-should-retry': String(retry) };
  if (retry) headers['retry-after'] = String(problem.retryAfterSeconds);
  const extensions = Object.fromEntries(Object.entries(problem.extensions).map(([name, value]) => [snakeCase(name), value]));
  const body: StripeErrorBody = { error: { ...extensions, type, code, message: problem.detail, doc_url: problem.type } };
  return { status: problem.status, headers, body };
}

/** `idempotency-key-reused` → `idempotency_key_reused`, `originalStatus` → `original_status`. */
function snakeCase(name: string): string {
  return name.replace(/-/g, '_').replace(/[A-Z]/g, (letter) => `_${letter.toLowerCase()}`);
}
