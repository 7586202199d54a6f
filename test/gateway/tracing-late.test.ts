/**
 * The gateway's spans when an OpenTelemetry SDK is registered only after the gateway served requests:
 * before, no span is started and the client's trace headers go upstream as they came; from the
 * registration on, each request has its server span and its upstream call's client span, whose context
 * reaches the upstream.
 */
import { once } from 'node:events';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { context, propagation, SpanKind, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { telemetry, type Telemetry } from '../support/telemetry.js';
import { gatewayInProcess, route, send, workDir, writeConfig } from './support.js';

const CLIENT_TRACE = '4bf92f3577b34da6a3ce929d0e0e4736';
const CLIENT_SPAN = '00f067aa0ba902b7';
const TRACEPARENT = `00-${CLIENT_TRACE}-${CLIENT_SPAN}-01`;

describe('gateway traces with an SDK registered after the gateway started', () => {
  let work: Awaited<ReturnType<typeof workDir>>;
  let upstream: Server;
  let gateway: Awaited<ReturnType<typeof gatewayInProcess>>;
  let t: Telemetry | undefined;
  const seen: IncomingHttpHeaders[] = [];

  beforeAll(async () => {
    upstream = createServer((request, response) => {
      seen.push(request.headers);
      request.resume();
      request.on('end', () => {
        response.writeHead(201, { 'content-type': 'application/json' });
        response.end('{"id":"pay_1"}');
      });
    });
    upstream.listen(0, '127.0.0.1');
    await once(upstream, 'listening');
    work = await workDir();
    const path = await writeConfig(work.dir, {
      listen: '127.0.0.1:0',
      store: 'memory:',
      scope: 'global',
      upstreams: { node: { url: `http://127.0.0.1:${(upstream.address() as AddressInfo).port}` } },
      routes: [route('node', '/payments/**')],
    });
    gateway = await gatewayInProcess(path);
  });

  afterAll(async () => {
    await gateway?.close();
    upstream?.close();
    await work?.remove();
    await t?.shutdown();
    trace.disable();
    propagation.disable();
    context.disable();
  });

  it('starts no span before the registration, and both spans from it on', async () => {
    const before = await send(`${gateway.url}/payments/1`, { key: 'late-1', headers: { traceparent: TRACEPARENT } });
    expect(before.status).toBe(201);
    expect(seen.at(-1)?.traceparent).toBe(TRACEPARENT);

    t = telemetry();
    context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
    propagation.setGlobalPropagator(new W3CTraceContextPropagator());
    trace.setGlobalTracerProvider(t.tracerProvider);
    const after = await send(`${gateway.url}/payments/2`, { key: 'late-2', headers: { traceparent: TRACEPARENT } });
    expect(after.status).toBe(201);
    const spans = t.spans.getFinishedSpans();
    const server = spans.find((span) => span.name === 'POST /payments/**');
    const call = spans.find((span) => span.name === 'POST');
    expect(server?.kind).toBe(SpanKind.SERVER);
    expect(server?.spanContext().traceId).toBe(CLIENT_TRACE);
    expect(server?.parentSpanContext?.spanId).toBe(CLIENT_SPAN);
    expect(call?.kind).toBe(SpanKind.CLIENT);
    expect(call?.attributes).toMatchObject({ 'server.address': '127.0.0.1', 'http.response.status_code': 201 });
    expect(seen.at(-1)?.traceparent).toBe(`00-${CLIENT_TRACE}-${call?.spanContext().spanId}-01`);
  });
});
