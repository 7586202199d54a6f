/**
 * The gateway's own errors and every problem it answers (RFC 9457 `application/problem+json`). The
 * engine's codes keep the statuses `problemFor` gives them (400, 409, 410, 413, 422, 503); the gateway
 * adds the outcome it cannot know, the upstream it cannot reach, an identity it cannot verify and a
 * request no route takes.
 *
 * @module
 */
import type { IdempotencyError} from '../core/errors.js';
import { ModuleError, ResponseNotKeptError } from '../core/errors.js';
import { DEFAULT_PROBLEM_TYPE_BASE, problemFor, type ProblemDetails } from '../core/problem.js';
import type { IndeterminateCause, IndeterminateMark } from './indeterminate.js';

/** Codes of the gateway's own errors. */
type GatewayErrorCode = 'idempotency-outcome-unknown' | 'gateway-upstream-unreachable' | 'gateway-identity-refused' | 'gateway-no-route';

const DETAILS: Readonly<Record<IndeterminateCause, string>> = {
  'upstream-timeout': 'The upstream did not answer in time after it was sent this request',
  'upstream-reset': 'The connection to the upstream broke after it was sent this request',
  interrupted: 'The gateway that sent this request to the upstream stopped before the answer arrived',
};

/**
 * The upstream was sent the request and then timed out or broke the exchange, so whether its side effect
 * happened is unknown. The record is held (never released, never sent again) until an operator or the
 * route's reconcile hook resolves it. HTTP: 504 after a timeout, 502 after a reset; `newKeySafe: false`,
 * since a new key would send the request again whether or not the first one took effect.
 */
export class OutcomeUnknownError extends ModuleError<GatewayErrorCode> {
  override readonly name = 'OutcomeUnknownError';
  constructor(readonly mark: IndeterminateMark) {
    super(
      'idempotency-outcome-unknown',
      `${DETAILS[mark.cause]}; whether it took effect is unknown. The key is held until the outcome is resolved; a new key would send the request again.`,
    );
  }
}

/**
 * The upstream could not be reached before anything was sent (connection refused, no route to host,
 * connect timeout): the key was released, and the same key may be retried. HTTP: 502, `newKeySafe: true`.
 */
export class UpstreamUnreachableError extends ModuleError<GatewayErrorCode> {
  override readonly name = 'UpstreamUnreachableError';
  constructor(cause: unknown) {
    super('gateway-upstream-unreachable', 'The upstream could not be reached; nothing was sent, and the request may be retried with the same key.', { cause });
  }
}

/** The request carries no identity the scope rule can verify. HTTP: 401. */
export class IdentityRefusedError extends ModuleError<GatewayErrorCode> {
  override readonly name = 'IdentityRefusedError';
  constructor(detail: string, cause?: unknown) {
    super('gateway-identity-refused', detail, { cause });
  }
}

/** No route of the configuration takes the request's method and path. HTTP: 404. */
export class NoRouteError extends ModuleError<GatewayErrorCode> {
  override readonly name = 'NoRouteError';
  constructor() {
    super('gateway-no-route', 'No route of the gateway takes this method and path.');
  }
}

const GATEWAY_STATUS: Readonly<Record<GatewayErrorCode, readonly [number, string]>> = {
  'idempotency-outcome-unknown': [502, 'Outcome unknown'],
  'gateway-upstream-unreachable': [502, 'Upstream unreachable'],
  'gateway-identity-refused': [401, 'Identity refused'],
  'gateway-no-route': [404, 'No route'],
};

/** A problem ready to send: status, headers (lower case) and the encoded body. */
interface GatewayProblem {
  readonly status: number;
  readonly headers: Record<string, string>;
  readonly body: Buffer;
}

function encoded(status: number, headers: Record<string, string>, body: ProblemDetails & Readonly<Record<string, unknown>> | ProblemDetails): GatewayProblem {
  return { status, headers, body: Buffer.from(JSON.stringify(body)) };
}

/**
 * The problem answering `error`: the gateway's own codes as above, `ResponseNotKeptError` as the 410 the
 * adapters answer (with `originalStatus` and the saved `Location`), every other code by `problemFor`.
 *
 * @param location - the saved `Location` of a response that was not kept
 */
export function problemOf(error: IdempotencyError, location?: string): GatewayProblem {
  const gateway = GATEWAY_STATUS[error.code as GatewayErrorCode] as readonly [number, string] | undefined;
  if (gateway !== undefined) {
    const status = error instanceof OutcomeUnknownError ? error.mark.status : gateway[0];
    const body = { type: `${DEFAULT_PROBLEM_TYPE_BASE}${error.code}`, title: gateway[1], status, detail: error.message, code: error.code, message: error.message };
    const headers = { 'content-type': 'application/problem+json' };
    if (error instanceof OutcomeUnknownError) return encoded(status, headers, { ...body, cause: error.mark.cause, newKeySafe: false });
    if (error instanceof UpstreamUnreachableError) return encoded(status, { ...headers, 'retry-after': '1' }, { ...body, newKeySafe: true });
    return encoded(status, headers, body);
  }
  const problem = problemFor(error);
  if (error instanceof ResponseNotKeptError) {
    const headers = { ...problem.headers, 'idempotent-replayed': 'true', ...(location !== undefined && { location }) };
    return encoded(problem.status, headers, { ...problem.body, originalStatus: error.originalStatus });
  }
  return encoded(problem.status, { ...problem.headers }, problem.body);
}
