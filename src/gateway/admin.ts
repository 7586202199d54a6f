/**
 * The admin listener: `/healthz` (the process answers), `/readyz` (the store answers a ping and every
 * upstream its probe, each within 2 s; 503 naming what failed otherwise) and `/metrics` (Prometheus text).
 * It listens apart from the proxy, so it is never exposed where the proxy is.
 *
 * @module
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { HoldingStore } from './indeterminate.js';
import type { GatewayMetrics } from './metrics.js';
import type { Upstream } from './upstream.js';

const PROBE_TIMEOUT_MS = 2_000;

/** What the admin routes look at; `upstreams` is read per request, so a reload is seen at once. */
interface AdminContext {
  readonly store: HoldingStore;
  readonly metrics: GatewayMetrics;
  upstreams(): readonly Upstream[];
  /** `false` once the gateway is draining: readiness fails so a load balancer stops sending. */
  accepting(): boolean;
}

function within<T>(promise: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

async function check(probe: () => Promise<void>): Promise<string> {
  try {
    await within(probe(), PROBE_TIMEOUT_MS);
    return 'ok';
  } catch (error) {
    return error instanceof Error ? error.message : String(error);
  }
}

function json(response: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  response.writeHead(status, { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(text)) });
  response.end(text);
}

/** Serves one admin request. */
export async function handleAdmin(context: AdminContext, request: IncomingMessage, response: ServerResponse): Promise<void> {
  const path = (request.url ?? '/').split('?')[0];
  if (path === '/healthz') return json(response, 200, { status: 'ok' });
  if (path === '/metrics') {
    const text = context.metrics.render();
    response.writeHead(200, { 'content-type': 'text/plain; version=0.0.4; charset=utf-8', 'content-length': String(Buffer.byteLength(text)) });
    response.end(text);
    return;
  }
  if (path !== '/readyz') return json(response, 404, { status: 'not found' });
  const checks: Record<string, string> = { store: await check(() => context.store.ping()) };
  await Promise.all(
    context.upstreams().map(async (upstream) => {
      checks[`upstream:${upstream.name}`] = await check(() => upstream.probe(PROBE_TIMEOUT_MS));
    }),
  );
  if (!context.accepting()) checks['gateway'] = 'draining';
  const ready = Object.values(checks).every((value) => value === 'ok');
  json(response, ready ? 200 : 503, { status: ready ? 'ready' : 'not ready', checks });
}
