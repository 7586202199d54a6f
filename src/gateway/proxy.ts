/**
 * One request through the gateway, in the order the checks run:
 * 1. no route takes the method and path → 404 problem `gateway-no-route`;
 * 2. a route with `key: off`, or an optional key that is absent → forwarded as is, nothing stored;
 * 3. no Idempotency-Key → 400 `idempotency-key-missing`; a malformed one → 400 `idempotency-key-invalid`;
 * 4. no verifiable identity for the scope rule → 401 `gateway-identity-refused`;
 * 5. a body over `maxBody` → 413 `idempotency-request-too-large`, before any claim;
 * 6. the engine (`receiver.execute`) over (scope, key, fingerprint of method, path, query and the body's
 *    SHA-256): the upstream is sent the request at most once per key; its response is saved, then sent
 *    (one over `maxResponse` is streamed and saved without its body); a retry replays it byte for byte with `Idempotent-Replayed: true`; another
 *    request under the key → 422, a duplicate in flight → 409 + `Retry-After` (or `wait`), store down →
 *    503 (nothing is sent upstream), upstream unreachable → 502 `gateway-upstream-unreachable` (released);
 *    a timeout or reset after sending → 504/502 `idempotency-outcome-unknown`, the record held until the
 *    reconcile hook or an operator resolves it.
 *
 * A retry that finds its key's lease expired (the gateway that held it stopped mid-request) does not send
 * the request again blindly: it asks the reconcile hook, and without an answer holds the record as
 * indeterminate too.
 *
 * @module
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { performance } from 'node:perf_hooks';
import { IdempotencyError, IdempotencyKeyMissingError, ResponseNotKeptError } from '../core/errors.js';
import { fingerprint } from '../core/fingerprint.js';
import { parseIdempotencyKey } from '../core/key.js';
import { RESPONSE_NOT_KEPT_HEADER, type Claim, type StoredResponse } from '../core/record.js';
import type { OperationId, Receiver } from '../core/receiver.js';
import { keyHash } from '../observability/logging.js';
import type { RouteConfig } from './config.js';
import { forward, holdIndeterminate, writeChunk, type Forwarding, type UnsentAnswer } from './forward.js';
import { clientHeaders, upstreamHeaders } from './headers.js';
import { heldClaimOf, markFor, OUTCOME_UNKNOWN_HEADER, type HoldingStore, type IndeterminateCause } from './indeterminate.js';
import type { GatewayMetrics, GatewayOutcome } from './metrics.js';
import { NoRouteError, OutcomeUnknownError, problemOf, UpstreamUnreachableError } from './problems.js';
import { askUpstream, reconcile } from './reconcile.js';
import type { ScopeResolver } from './scope.js';
import { spoolBody } from './spool.js';
import { endServerSpan, endUpstreamSpan, routeServerSpan, startServerSpan, startUpstreamSpan, withinSpan } from './tracing.js';
import { failedBeforeSending, type Upstream } from './upstream.js';

/** A route with what serves it: its upstream and its engine (lease, TTL, in-flight and 5xx policy). */
export interface RouteRuntime {
  readonly config: RouteConfig;
  readonly upstream: Upstream;
  readonly engine: Receiver;
}

/** What every request is served with; one per configuration, swapped whole on reload. */
export interface ProxyContext {
  readonly routes: readonly RouteRuntime[];
  readonly scope: ScopeResolver;
  readonly store: HoldingStore;
  readonly metrics: GatewayMetrics;
  /** Gets one access-log line per request, or nothing. */
  readonly log: ((line: string) => void) | undefined;
}

/** What the access log says about one request. */
interface AccessEntry {
  route: string | undefined;
  /** The route's path pattern, for the server span's name. */
  routePath: string | undefined;
  /** The key's scope and the key, once parsed (the log line carries their hash, computed only for it). */
  scope: string | undefined;
  key: string | undefined;
  upstreamStatus: number | undefined;
  upstreamMs: number | undefined;
}

const IDEMPOTENCY_KEY = 'idempotency-key';
const REPLAYED = 'idempotent-replayed';

const OUTCOMES: Readonly<Record<string, GatewayOutcome>> = {
  'idempotency-key-missing': 'invalid_key',
  'idempotency-key-invalid': 'invalid_key',
  'idempotency-key-reused': 'mismatch',
  'idempotency-request-in-progress': 'in_flight_rejected',
  'idempotency-lease-lost': 'in_flight_rejected',
  'idempotency-store-unavailable': 'store_unavailable',
  'idempotency-request-too-large': 'too_large',
  'idempotency-response-not-kept': 'not_kept',
  'idempotency-outcome-unknown': 'outcome_unknown',
  'gateway-upstream-unreachable': 'unreachable',
  'gateway-identity-refused': 'identity_refused',
  'gateway-no-route': 'no_route',
};

function send(response: ServerResponse, status: number, headers: Readonly<Record<string, string | string[]>>, body: Uint8Array): void {
  response.writeHead(status, { ...headers, 'content-length': String(body.byteLength) });
  response.end(body);
}

/** Sends the upstream's response held until its record was saved (its headers are its own to amend). */
function sendUnsent(response: ServerResponse, unsent: UnsentAnswer): void {
  unsent.headers['content-length'] = String(unsent.body.byteLength);
  response.writeHead(unsent.status, unsent.headers);
  response.end(unsent.body);
}

/** Sends a saved response as a replay. */
function sendReplay(response: ServerResponse, saved: StoredResponse): void {
  response.writeHead(saved.status, { ...saved.headers, [REPLAYED]: 'true', 'content-length': String(saved.body.byteLength) });
  response.end(saved.body);
}

/** The path of a request target (without its query). */
function pathOf(target: string): string {
  const at = target.indexOf('?');
  return at < 0 ? target : target.slice(0, at);
}

/** The first route that takes `method` and `path`. */
function routeFor(routes: readonly RouteRuntime[], method: string, path: string): RouteRuntime | undefined {
  for (const route of routes) if (route.config.methods.has(method) && route.config.pattern.test(path)) return route;
  return undefined;
}

/**
 * Serves one request; never rejects (a failure is answered as a problem, or ends a response already
 * under way).
 */
export async function handleRequest(context: ProxyContext, request: IncomingMessage, response: ServerResponse): Promise<void> {
  const started = context.log === undefined ? 0 : performance.now();
  const entry: AccessEntry = { route: undefined, routePath: undefined, scope: undefined, key: undefined, upstreamStatus: undefined, upstreamMs: undefined };
  const method = request.method ?? 'GET';
  const span = startServerSpan(method, request.url ?? '/', request.headers);
  let outcome: GatewayOutcome;
  try {
    outcome = await (span === undefined ? dispatch(context, request, response, entry) : withinSpan(span, () => dispatch(context, request, response, entry)));
  } catch (error) {
    outcome = error instanceof IdempotencyError ? (OUTCOMES[error.code] ?? 'error') : 'error';
    answerFailure(response, error);
  }
  if (span !== undefined) {
    if (entry.routePath !== undefined) routeServerSpan(span, method, entry.routePath);
    endServerSpan(span, response.statusCode);
  }
  context.metrics.requests.add({ route: entry.route ?? '', outcome });
  if (context.log === undefined) return;
  context.log(
    JSON.stringify({
      time: new Date().toISOString(),
      method: request.method,
      path: pathOf(request.url ?? '/'),
      route: entry.route,
      status: response.statusCode,
      outcome,
      keyHash: entry.scope === undefined || entry.key === undefined ? undefined : keyHash(entry.scope, entry.key),
      upstreamStatus: entry.upstreamStatus,
      upstreamMs: entry.upstreamMs === undefined ? undefined : Math.round(entry.upstreamMs * 1000) / 1000,
      durationMs: Math.round((performance.now() - started) * 1000) / 1000,
    }),
  );
}

/** Answers `error` as a problem, or cuts a response already under way (its client sees a broken body). */
function answerFailure(response: ServerResponse, error: unknown): void {
  if (response.headersSent) {
    response.destroy();
    return;
  }
  if (error instanceof IdempotencyError) {
    const problem = problemOf(error, error instanceof NotKept ? error.location : undefined);
    send(response, problem.status, problem.headers, problem.body);
    return;
  }
  // A pass-through exchange that broke, or the gateway's own fault: the proxy's usual answer.
  const body = Buffer.from(JSON.stringify({ type: 'about:blank', title: 'Bad gateway', status: 502, detail: 'The exchange with the upstream failed.' }));
  send(response, 502, { 'content-type': 'application/problem+json' }, body);
}

/** A replay of a response saved without its body, with the saved `Location`. */
class NotKept extends ResponseNotKeptError {
  constructor(
    saved: StoredResponse,
    readonly location: string | undefined,
  ) {
    super(saved.status, Number(saved.headers[RESPONSE_NOT_KEPT_HEADER]));
  }
}

// Hot path: docs/hot-path.md#gateway-request
async function dispatch(context: ProxyContext, request: IncomingMessage, response: ServerResponse, entry: AccessEntry): Promise<GatewayOutcome> {
  const method = (request.method ?? 'GET').toUpperCase();
  const target = request.url ?? '/';
  const at = target.indexOf('?');
  const path = at < 0 ? target : target.slice(0, at);
  const route = routeFor(context.routes, method, path);
  if (route === undefined) throw new NoRouteError();
  entry.route = route.config.name;
  entry.routePath = route.config.path;
  const raw = request.headers[IDEMPOTENCY_KEY];
  const client = { address: request.socket.remoteAddress ?? '', host: request.headers.host, proto: 'encrypted' in request.socket ? ('https' as const) : ('http' as const) };
  if (route.config.key === 'off' || (raw === undefined && route.config.key === 'optional')) {
    await passThrough(route, method, target, upstreamHeaders(request.rawHeaders, client), request, response, entry);
    return 'forwarded';
  }
  if (raw === undefined) throw new IdempotencyKeyMissingError();
  const key = parseIdempotencyKey(Array.isArray(raw) ? raw.join(', ') : raw);
  // The request event comes while the HTTP parser is still in the packet that carried the headers: after
  // this await, a body that came with them is buffered whole, and spoolBody takes it without waiting.
  const scope = await context.scope(request);
  entry.scope = scope;
  entry.key = key;
  const spooled = spoolBody(request, route.config.maxBodyBytes);
  const body = spooled instanceof Promise ? await spooled : spooled;
  const headers = upstreamHeaders(request.rawHeaders, client, route.config.forwardKey);
  headers.push('content-length', String(body.length));
  try {
    const id = { scope, key, fingerprint: fingerprint({ method, route: path, query: at < 0 ? '' : target.slice(at + 1), body: body.digest }) };
    const forwarding: Forwarding = { route: route.config, upstream: route.upstream, store: context.store, metrics: context.metrics, method, path: target, headers, body: () => body.body(), response };
    try {
      return await execute(context, route, id, forwarding, true);
    } finally {
      entry.upstreamStatus = forwarding.upstreamStatus;
      entry.upstreamMs = forwarding.upstreamMs;
    }
  } finally {
    const disposed = body.dispose();
    if (disposed !== undefined) await disposed;
  }
}

/** Runs the request through the route's engine and answers whatever it did not stream already. */
async function execute(context: ProxyContext, route: RouteRuntime, id: OperationId, forwarding: Forwarding, mayRunAgain: boolean): Promise<GatewayOutcome> {
  let reconciled: StoredResponse | undefined;
  // Not an `async` function: the usual claim (no takeover) is answered by forward's own promise.
  const execution = await route.engine.execute(id, ({ claim }) => {
    if (!claim.takeover) return forward(forwarding, claim);
    return resumeInterrupted(forwarding, claim).then((original) => {
      reconciled = original;
      return original ?? forward(forwarding, claim);
    });
  });
  if (!execution.replayed) {
    // Sent only now that the engine saved the record (or gave up saving it: see Execution.saved).
    if (reconciled !== undefined) sendReplay(forwarding.response, reconciled);
    else if (forwarding.unsent !== undefined) sendUnsent(forwarding.response, forwarding.unsent);
    return reconciled !== undefined ? 'reconciled' : 'executed';
  }
  const saved = execution.response;
  const held = heldClaimOf(id.scope, id.key, id.fingerprint, saved);
  if (held !== undefined) {
    const answer = await reconcile(route.config, route.upstream, context.store.inner, held);
    if (answer.kind !== 'unknown') context.metrics.resolved.add({ route: route.config.name, resolution: answer.kind === 'completed' ? 'completed' : 'released' });
    if (answer.kind === 'completed') {
      sendReplay(forwarding.response, answer.response);
      return 'reconciled';
    }
    if (answer.kind === 'not-executed' && mayRunAgain) return execute(context, route, id, forwarding, false);
    throw new OutcomeUnknownError(markFor(saved.headers[OUTCOME_UNKNOWN_HEADER] as IndeterminateCause));
  }
  if (saved.headers[RESPONSE_NOT_KEPT_HEADER] !== undefined) throw new NotKept(saved, saved.headers['location']);
  sendReplay(forwarding.response, saved);
  return 'replayed';
}

/**
 * A claim that took over an expired lease: the gateway that held it stopped mid-request, perhaps after
 * the upstream was sent the request. The reconcile hook decides; without it (or without an answer) the
 * record is held as indeterminate.
 *
 * @returns the original response (sent to the client as a replay once the record is saved), or
 *   `undefined` when the upstream never executed it and the request is to be sent now
 * @throws {@link OutcomeUnknownError} when nobody knows
 */
async function resumeInterrupted(forwarding: Forwarding, claim: Claim): Promise<StoredResponse | undefined> {
  const answer = await askUpstream(forwarding.route, forwarding.upstream, claim.key);
  if (answer.kind === 'not-executed') {
    forwarding.metrics.resolved.add({ route: forwarding.route.name, resolution: 'released' });
    return undefined;
  }
  if (answer.kind === 'completed') {
    forwarding.metrics.resolved.add({ route: forwarding.route.name, resolution: 'completed' });
    return answer.response;
  }
  throw await holdIndeterminate(forwarding, claim, 'interrupted');
}

/** A request without idempotency: streamed both ways, nothing stored. */
async function passThrough(
  route: RouteRuntime,
  method: string,
  target: string,
  headers: string[],
  request: IncomingMessage,
  response: ServerResponse,
  entry: AccessEntry,
): Promise<void> {
  const length = request.headers['content-length'];
  if (length !== undefined) headers.push('content-length', length);
  const started = performance.now();
  const hasBody = length !== undefined || request.headers['transfer-encoding'] !== undefined;
  const span = startUpstreamSpan(method, route.upstream.origin, target, headers);
  let answer;
  try {
    answer = await route.upstream.send({ method, path: target, headers, body: hasBody ? request : null, timeoutMs: route.config.timeoutMs });
  } catch (error) {
    endUpstreamSpan(span, undefined, error);
    throw failedBeforeSending(error) ? new UpstreamUnreachableError(error) : error;
  }
  entry.upstreamStatus = answer.statusCode;
  entry.upstreamMs = performance.now() - started;
  response.writeHead(answer.statusCode, clientHeaders(answer.headers));
  try {
    for await (const chunk of answer.body) {
      const full = writeChunk(response, chunk as Buffer);
      if (full !== undefined) await full;
    }
  } catch (error) {
    endUpstreamSpan(span, answer.statusCode, error);
    throw error;
  }
  endUpstreamSpan(span, answer.statusCode);
  response.end();
}
