/**
 * The gateway's spans, through `@opentelemetry/api` (non-recording unless an SDK's tracer provider is
 * registered, as `node --import` of an OpenTelemetry setup file does; its OTLP exporter sends them on):
 * - one `SERVER` span per request, named `{method} {route path}` once a route took it (the HTTP server
 *   span of the OpenTelemetry semantic conventions), continuing the client's trace when the request
 *   carries a W3C `traceparent`; the receiver's spans (`retrysafe.execute`, `retrysafe.claim`, …) are its
 *   children;
 * - one `CLIENT` span per call to the upstream, named `{method}`, a child of `retrysafe.execute`, whose
 *   context goes upstream in `traceparent` (and `tracestate`), so the upstream's own spans nest under it.
 *
 * Attributes follow the semantic conventions' HTTP spans: `http.request.method`, `http.route`,
 * `url.path`, `http.response.status_code`, `server.address`, `server.port`, `url.full`.
 *
 * @module
 */
import type { IncomingHttpHeaders } from 'node:http';
import type { Span, SpanOptions, Tracer } from '@opentelemetry/api';
import { otel } from '../observability/api.js';
import { INSTRUMENTATION_SCOPE, INSTRUMENTATION_VERSION } from '../observability/scope.js';
import { endFailed } from '../observability/traces.js';

const SERVER: SpanOptions = Object.freeze(otel === undefined ? {} : { kind: otel.SpanKind.SERVER });
const CLIENT: SpanOptions = Object.freeze(otel === undefined ? {} : { kind: otel.SpanKind.CLIENT });

let tracer: Tracer | undefined;

/** The API's global provider before any SDK registered: a proxy without a delegate. */
interface DelegatingProvider {
  getDelegateTracer?(name: string, version?: string): Tracer | undefined;
}

// Hot path: docs/hot-path.md#gateway-request
/**
 * The tracer of the global provider, or `undefined` while no SDK's provider is registered: the API's
 * proxy provider then has no delegate, every span would be a non-recording one, and a request costs no
 * span (nor the attributes of one: the upstream span's URL is parsed). Asked again at each request until
 * a provider is registered, so a later registration is followed.
 */
function gatewayTracer(): Tracer | undefined {
  if (otel === undefined) return undefined;
  if (tracer !== undefined) return tracer;
  const provider = otel.trace.getTracerProvider() as DelegatingProvider;
  if (typeof provider.getDelegateTracer === 'function' && provider.getDelegateTracer(INSTRUMENTATION_SCOPE, INSTRUMENTATION_VERSION) === undefined) return undefined;
  tracer = otel.trace.getTracer(INSTRUMENTATION_SCOPE, INSTRUMENTATION_VERSION);
  return tracer;
}

/** A span that records, or `undefined` (no API, no SDK, or sampled out: nothing is set on it). */
function recording(span: Span): Span | undefined {
  if (span.isRecording()) return span;
  span.end();
  return undefined;
}

/** Starts the request's server span, continuing the trace its headers carry; `target` is the request's path and query. */
export function startServerSpan(method: string, target: string, headers: IncomingHttpHeaders): Span | undefined {
  const api = otel;
  const found = gatewayTracer();
  if (api === undefined || found === undefined) return undefined;
  const parent = api.propagation.extract(api.context.active(), headers);
  const at = target.indexOf('?');
  const path = at < 0 ? target : target.slice(0, at);
  return recording(found.startSpan(method, { ...SERVER, attributes: { 'http.request.method': method, 'url.path': path } }, parent));
}

/** Names the server span after the route that took the request. */
export function routeServerSpan(span: Span | undefined, method: string, routePath: string): void {
  if (span === undefined) return;
  span.updateName(`${method} ${routePath}`);
  span.setAttribute('http.route', routePath);
}

/** Ends the server span with the status the client was answered. */
export function endServerSpan(span: Span | undefined, status: number): void {
  if (span === undefined) return;
  span.setAttribute('http.response.status_code', status);
  if (status >= 500 && otel !== undefined) span.setStatus({ code: otel.SpanStatusCode.ERROR });
  span.end();
}

/** Runs `fn` with `span` active, so the receiver's spans are its children. */
export function withinSpan<T>(span: Span | undefined, fn: () => T): T {
  if (span === undefined || otel === undefined) return fn();
  return otel.context.with(otel.trace.setSpan(otel.context.active(), span), fn);
}

/**
 * Starts the client span of an upstream call under the active span, and appends its propagation headers
 * (`traceparent`, `tracestate`) to `headers` (a flat name/value list, as undici takes it).
 */
export function startUpstreamSpan(method: string, origin: string, path: string, headers: string[]): Span | undefined {
  const api = otel;
  const found = gatewayTracer();
  if (api === undefined || found === undefined) return undefined;
  const url = new URL(path, origin);
  const span = recording(
    found.startSpan(method, {
      ...CLIENT,
      attributes: { 'http.request.method': method, 'server.address': url.hostname, 'server.port': Number(url.port || (url.protocol === 'https:' ? 443 : 80)), 'url.full': url.href },
    }),
  );
  if (span === undefined) return undefined;
  const carrier: Record<string, string> = {};
  api.propagation.inject(api.trace.setSpan(api.context.active(), span), carrier);
  // The client's own trace headers name the gateway's parent, not the upstream's: replaced.
  for (let i = headers.length - 2; i >= 0; i -= 2) if ((headers[i] as string).toLowerCase() in carrier) headers.splice(i, 2);
  for (const name in carrier) headers.push(name, carrier[name] as string);
  return span;
}

/** Ends the upstream call's span: with the upstream's status, or as failed by `error`. */
export function endUpstreamSpan(span: Span | undefined, status: number | undefined, error?: unknown): void {
  if (span === undefined) return;
  if (status !== undefined) span.setAttribute('http.response.status_code', status);
  if (error !== undefined) {
    endFailed(span, error);
    return;
  }
  if (status !== undefined && status >= 500 && otel !== undefined) span.setStatus({ code: otel.SpanStatusCode.ERROR });
  span.end();
}
