/**
 * The gateway's spans with an OpenTelemetry SDK registered globally (as `node --import` of a setup file
 * does): a server span per request continuing the client's trace, the receiver's spans under it, and the
 * upstream call as a client span whose context reaches the upstream in `traceparent`; a replay makes no
 * upstream span.
 */
import { once } from 'node:events';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { context, propagation, SpanKind, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import type { ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { telemetry, type Telemetry } from '../support/telemetry.js';
import { gatewayInProcess, route, send, workDir, writeConfig } from './support.js';

const CLIENT_TRACE = '0af7651916cd43dd8448eb211c80319c';
const CLIENT_SPAN = 'b7ad6b7169203331';

describe('gateway traces', () => {
  let work: Awaited<ReturnType<typeof workDir>>;
  let upstream: Server;
  let gateway: Awaited<ReturnType<typeof gatewayInProcess>>;
  let t: Telemetry;
  const seen: IncomingHttpHeaders[] = [];

  beforeAll(async () => {
    t = telemetry();
    context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
    propagation.setGlobalPropagator(new W3CTraceContextPropagator());
    trace.setGlobalTracerProvider(t.tracerProvider);
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
      routes: [route('node', '/payments/**'), route('node', '/open', { name: 'open', key: 'off' })],
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

  const byName = (name: string): ReadableSpan[] => t.spans.getFinishedSpans().filter((span) => span.name === name);
  const parentOf = (span: ReadableSpan): string | undefined => span.parentSpanContext?.spanId;

  it('nests the receiver and the upstream call under a server span that continues the client trace', async () => {
    t.spans.reset();
    const answer = await send(`${gateway.url}/payments/1`, { key: 'trace-1', headers: { traceparent: `00-${CLIENT_TRACE}-${CLIENT_SPAN}-01` } });
    expect(answer.status).toBe(201);
    const [server] = byName('POST /payments/**');
    const [execute] = byName('retrysafe.execute');
    const [call] = byName('POST');
    expect(server?.kind).toBe(SpanKind.SERVER);
    expect(server?.spanContext().traceId).toBe(CLIENT_TRACE);
    expect(parentOf(server as ReadableSpan)).toBe(CLIENT_SPAN);
    expect(server?.attributes).toMatchObject({ 'http.request.method': 'POST', 'http.route': '/payments/**', 'http.response.status_code': 201 });
    expect(parentOf(execute as ReadableSpan)).toBe(server?.spanContext().spanId);
    expect(call?.kind).toBe(SpanKind.CLIENT);
    expect(parentOf(call as ReadableSpan)).toBe(execute?.spanContext().spanId);
    expect(call?.attributes).toMatchObject({ 'http.request.method': 'POST', 'http.response.status_code': 201, 'server.address': '127.0.0.1' });
    // The upstream heard of the client span, not of the client's own parent.
    expect(seen.at(-1)?.traceparent).toBe(`00-${CLIENT_TRACE}-${call?.spanContext().spanId}-01`);
  });

  it('makes no upstream span for a replay, and one for a request forwarded without a key', async () => {
    await send(`${gateway.url}/payments/2`, { key: 'trace-2' });
    t.spans.reset();
    const replay = await send(`${gateway.url}/payments/2`, { key: 'trace-2' });
    expect(replay.headers['idempotent-replayed']).toBe('true');
    expect(byName('POST')).toHaveLength(0);
    expect(byName('POST /payments/**')).toHaveLength(1);
    t.spans.reset();
    const open = await send(`${gateway.url}/open`);
    expect(open.status).toBe(201);
    const [server] = byName('POST /open');
    const [call] = byName('POST');
    expect(parentOf(call as ReadableSpan)).toBe(server?.spanContext().spanId);
  });
});
