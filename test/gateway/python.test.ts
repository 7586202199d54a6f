/**
 * The gateway in front of the Python upstream (stdlib `http.server`, executions counted in its own
 * SQLite database): the behaviour table of docs/semantics.md through a proxy, and the faults of an
 * upstream — a timeout after it committed, a reset after it committed, a timeout before it committed, a
 * 5xx, an upstream that is not there — with the executions per key counted.
 */
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { recordView } from '../../src/cli/inspect.js';
import type { IdempotencyRecord } from '../../src/core/record.js';
import type { IdempotencyStore } from '../../src/core/store.js';
import { parseStoreUrl } from '../../src/store-url.js';
import { freePort } from '../support/services.js';
import { runCli } from '../support/run-cli.js';
import { executed, gatewayInProcess, pythonAvailable, route, send, startPython, workDir, writeConfig, type UpstreamProcess } from './support.js';

const available = await pythonAvailable();

describe.runIf(available)('gateway in front of the Python upstream', () => {
  let work: Awaited<ReturnType<typeof workDir>>;
  let python: UpstreamProcess;
  let gateway: Awaited<ReturnType<typeof gatewayInProcess>>;
  let store: IdempotencyStore;
  let storeUrl: string;
  const lines: string[] = [];

  beforeAll(async () => {
    work = await workDir();
    python = await startPython(work.dir);
    storeUrl = `sqlite:${join(work.dir, 'gateway.db')}`;
    const path = await writeConfig(work.dir, {
      listen: '127.0.0.1:0',
      admin: '127.0.0.1:0',
      store: storeUrl,
      scope: { apiKey: { header: 'x-api-key' } },
      upstreams: { py: { url: python.url, probe: '/healthz' }, gone: { url: `http://127.0.0.1:${await freePort()}`, connectTimeout: '1s' } },
      defaults: { timeout: '1s', lease: '5s', ttl: '1h' },
      routes: [
        route('py', '/payments'),
        route('py', '/reconciled/**', { name: 'reconciled', reconcile: '/reconcile' }),
        route('py', '/keep', { name: 'keep', serverErrors: 'keep' }),
        route('py', '/wait', { name: 'wait', inFlight: 'wait', wait: '5s' }),
        route('py', '/small', { name: 'small', maxBody: 100, maxResponse: 10 }),
        route('py', '/optional', { name: 'optional', key: 'optional' }),
        route('gone', '/gone', { name: 'gone' }),
      ],
    });
    gateway = await gatewayInProcess(path, (line) => lines.push(line));
    store = (await parseStoreUrl(storeUrl).open('existing')).store;
  });

  afterAll(async () => {
    await store?.close();
    await gateway?.close();
    await python?.stop();
    await work?.remove();
  });

  const post = (path: string, key: string | undefined, body = '{"amount":100}', headers: Record<string, string> = {}) =>
    send(`${gateway.url}${path}`, { ...(key !== undefined && { key }), body, headers: { 'x-api-key': 'tenant-a', ...headers } });

  it('forwards once and replays byte for byte, without Set-Cookie', async () => {
    const first = await post('/payments?x=1', 'replay-1');
    expect(first.status).toBe(201);
    expect(first.headers['set-cookie']).toBeDefined();
    expect(first.json()['key']).toBe('replay-1');
    const again = await post('/payments?x=1', 'replay-1');
    expect(again.status).toBe(201);
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(again.headers['set-cookie']).toBeUndefined();
    expect(again.headers['location']).toBe(first.headers['location']);
    expect(again.body.equals(first.body)).toBe(true);
    expect(await python.executions('replay-1')).toBe(1);
  });

  it('keeps keys apart per API key (the scope), and refuses a request without one', async () => {
    const a = await post('/payments', 'scoped-1');
    const b = await post('/payments', 'scoped-1', '{"amount":100}', { 'x-api-key': 'tenant-b' });
    expect([a.status, b.status]).toEqual([201, 201]);
    expect(b.headers['idempotent-replayed']).toBeUndefined();
    expect(await python.executions('scoped-1')).toBe(2);
    const anonymous = await send(`${gateway.url}/payments`, { key: 'scoped-2' });
    expect(anonymous.status).toBe(401);
    expect(anonymous.json()['code']).toBe('gateway-identity-refused');
  });

  it('answers 422 to another request under the key, 400 without a key or with a malformed one', async () => {
    expect((await post('/payments', 'reuse-1')).status).toBe(201);
    const reused = await post('/payments', 'reuse-1', '{"amount":999}');
    expect(reused.status).toBe(422);
    expect(reused.headers['content-type']).toBe('application/problem+json');
    expect((await post('/payments', undefined)).json()['code']).toBe('idempotency-key-missing');
    expect((await post('/payments', 'a,b')).json()['code']).toBe('idempotency-key-invalid');
    expect(await python.executions('reuse-1')).toBe(1);
    expect(await python.executions('a,b')).toBe(0);
  });

  it('forwards a request without a key on an optional route, storing nothing', async () => {
    const answer = await post('/optional', undefined);
    expect(answer.status).toBe(201);
    expect(await python.executions('')).toBeGreaterThanOrEqual(1);
  });

  it('answers a duplicate in flight with 409 and Retry-After, or in wait mode with the original response', async () => {
    const first = post('/payments', 'inflight-1', '{}', { 'x-fault': 'sleep=700' });
    await executed(python, 'inflight-1');
    const duplicate = await post('/payments', 'inflight-1', '{}');
    expect(duplicate.status).toBe(409);
    expect(duplicate.headers['retry-after']).toBe('1');
    expect((await first).status).toBe(201);

    const original = post('/wait', 'wait-1', '{}', { 'x-fault': 'sleep=700' });
    await executed(python, 'wait-1');
    const waited = await post('/wait', 'wait-1', '{}');
    const done = await original;
    expect(waited.status).toBe(201);
    expect(waited.body.equals(done.body)).toBe(true);
    expect(await python.executions('inflight-1')).toBe(1);
    expect(await python.executions('wait-1')).toBe(1);
  });

  it('holds the record after a timeout once the upstream committed: 504 outcome-unknown on every retry, resolved by the CLI', async () => {
    const first = await post('/payments', 'timeout-1', '{}', { 'x-fault': 'sleep=1500' });
    expect(first.status).toBe(504);
    expect(first.json()).toMatchObject({ code: 'idempotency-outcome-unknown', cause: 'upstream-timeout', newKeySafe: false });
    const retry = await post('/payments', 'timeout-1', '{}');
    expect(retry.status).toBe(504);
    expect(retry.json()['code']).toBe('idempotency-outcome-unknown');
    expect((await post('/payments', 'timeout-1', '{"other":1}')).status).toBe(422);
    // Held for the TTL, not the lease: no retry can take it over and send it again.
    const scope = (await store.listRecords?.({ keyPrefix: 'timeout-1', limit: 1 }))?.[0]?.scope as string;
    const record = await store.get(scope, 'timeout-1');
    expect(record?.state).toBe('in_progress');
    expect(record?.recoveryPoint).toContain('indeterminate');
    expect(record?.leaseExpiresAt ?? 0).toBeGreaterThan(Date.now() + 50 * 60_000);
    expect(recordView(record as IdempotencyRecord)).toMatchObject({ state: 'indeterminate', recoveryPoint: '{"indeterminate":"upstream-timeout"}' });
    await new Promise((resolve) => setTimeout(resolve, 600));
    expect(await python.executions('timeout-1')).toBe(1);

    const bodyFile = join(work.dir, 'resolved.json');
    await writeFile(bodyFile, '{"resolved":true}');
    const resolved = await runCli(['gateway', 'resolve', '--store', storeUrl, '--scope', scope, '--key', 'timeout-1', '--status', '201', '--body-file', bodyFile, '--header', 'content-type:application/json']);
    expect(resolved.stderr).toBe('');
    expect(resolved.code).toBe(0);
    const replay = await post('/payments', 'timeout-1', '{}');
    expect(replay.status).toBe(201);
    expect(replay.body.toString()).toBe(await readFile(bodyFile, 'utf8'));
    expect(replay.headers['idempotent-replayed']).toBe('true');
    const again = await runCli(['gateway', 'resolve', '--store', storeUrl, '--scope', scope, '--key', 'timeout-1', '--release']);
    expect(again.code).toBe(1);
    expect(await python.executions('timeout-1')).toBe(1);
  });

  it('resolves a reset after the upstream committed through the reconcile hook: the original response replays', async () => {
    const first = await post('/reconciled/a', 'reset-1', '{}', { 'x-fault': 'reset' });
    expect(first.status).toBe(502);
    expect(first.json()).toMatchObject({ code: 'idempotency-outcome-unknown', cause: 'upstream-reset', newKeySafe: false });
    const retry = await post('/reconciled/a', 'reset-1', '{}');
    expect(retry.status).toBe(201);
    expect(retry.headers['idempotent-replayed']).toBe('true');
    expect(retry.json()['key']).toBe('reset-1');
    const again = await post('/reconciled/a', 'reset-1', '{}');
    expect(again.body.equals(retry.body)).toBe(true);
    expect(await python.executions('reset-1')).toBe(1);
  });

  it('releases through the reconcile hook when the upstream never executed the request, and sends it once more', async () => {
    const first = await post('/reconciled/b', 'hang-1', '{}', { 'x-fault': 'hang=4000' });
    expect(first.status).toBe(504);
    await new Promise((resolve) => setTimeout(resolve, 700));
    const retry = await post('/reconciled/b', 'hang-1', '{}');
    expect(retry.status).toBe(201);
    expect(retry.headers['idempotent-replayed']).toBeUndefined();
    expect(await python.executions('hang-1')).toBe(1);
  });

  it('releases the key on an upstream 5xx by default, and keeps it with serverErrors: keep', async () => {
    expect((await post('/payments', 'error-1', '{}', { 'x-fault': '500' })).status).toBe(500);
    const retry = await post('/payments', 'error-1', '{}');
    expect(retry.status).toBe(201);
    expect(retry.headers['idempotent-replayed']).toBeUndefined();
    expect((await post('/keep', 'error-2', '{}', { 'x-fault': '500' })).status).toBe(500);
    const kept = await post('/keep', 'error-2', '{}');
    expect(kept.status).toBe(500);
    expect(kept.headers['idempotent-replayed']).toBe('true');
    expect(await python.executions('error-1')).toBe(1);
    expect(await python.executions('error-2')).toBe(0);
  });

  it('releases at once when the upstream refuses the connection: 502 with newKeySafe, and the key is free', async () => {
    const answer = await post('/gone', 'gone-1');
    expect(answer.status).toBe(502);
    expect(answer.json()).toMatchObject({ code: 'gateway-upstream-unreachable', newKeySafe: true });
    const scope = `api-key:${(await import('node:crypto')).createHash('sha256').update('tenant-a').digest('hex')}`;
    expect(await store.get(scope, 'gone-1')).toBeUndefined();
  });

  it('answers 413 before any claim, and 410 to a retry of a response over maxResponse', async () => {
    const large = await post('/small', 'small-1', JSON.stringify({ pad: 'x'.repeat(200) }));
    expect(large.status).toBe(413);
    expect(large.json()['code']).toBe('idempotency-request-too-large');
    expect(await python.executions('small-1')).toBe(0);
    const first = await post('/small', 'small-2', '{}');
    expect(first.status).toBe(201);
    expect(first.body.byteLength).toBeGreaterThan(10);
    const retry = await post('/small', 'small-2', '{}');
    expect(retry.status).toBe(410);
    expect(retry.json()).toMatchObject({ code: 'idempotency-response-not-kept', originalStatus: 201 });
    expect(retry.headers['location']).toBe(first.headers['location']);
    expect(await python.executions('small-2')).toBe(1);
  });

  it('answers 404 for a path no route takes', async () => {
    expect((await post('/nowhere', 'k')).status).toBe(404);
  });

  it('serves /healthz, /readyz and /metrics on the admin listener, and logs each request with the key hashed', async () => {
    const admin = `http://127.0.0.1:${gateway.adminAddress?.port}`;
    expect((await send(`${admin}/healthz`, { method: 'GET', body: '' })).status).toBe(200);
    const ready = await send(`${admin}/readyz`, { method: 'GET', body: '' });
    expect(ready.json()['checks']).toMatchObject({ store: 'ok', 'upstream:py': 'ok' });
    expect(ready.status).toBe(503);
    const metrics = (await send(`${admin}/metrics`, { method: 'GET', body: '' })).body.toString();
    expect(metrics).toMatch(/retrysafe_gateway_requests_total\{route="POST,PATCH \/payments",outcome="replayed"\} \d+/);
    expect(metrics).toMatch(/retrysafe_gateway_indeterminate_total\{route="POST,PATCH \/payments"\} [1-9]/);
    expect(metrics).toMatch(/retrysafe_gateway_upstream_failures_total\{upstream="py",kind="timeout"\} [1-9]/);
    const line = lines.find((text) => text.includes('"outcome":"replayed"'));
    expect(line).toBeDefined();
    expect(JSON.parse(line as string)).toMatchObject({ status: 201, keyHash: expect.stringMatching(/^[0-9a-f]{16}$/) as unknown });
    expect(lines.join('\n')).not.toContain('replay-1');
  });
});
