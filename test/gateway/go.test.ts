/**
 * The gateway in front of the Go upstream (a standard-library binary built here, executions appended to
 * a file): 8 concurrent duplicates of each of 500 keys, a 50 MB streamed upload, a streamed response
 * (kept, and over the cap), and a reset after commit resolved by the reconcile hook. Counted: upstream
 * executions per key, replays byte for byte.
 */
import { createHash } from 'node:crypto';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { Pool } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildGo, gatewayInProcess, goAvailable, route, send, startGo, workDir, writeConfig, type UpstreamProcess } from './support.js';

const available = await goAvailable();
const KEYS = 500;
const DUPLICATES = 8;

describe.runIf(available)('gateway in front of the Go upstream', () => {
  let work: Awaited<ReturnType<typeof workDir>>;
  let upstream: UpstreamProcess;
  let gateway: Awaited<ReturnType<typeof gatewayInProcess>>;
  let pool: Pool;

  beforeAll(async () => {
    work = await workDir();
    upstream = await startGo(await buildGo(work.dir), work.dir);
    const path = await writeConfig(work.dir, {
      listen: '127.0.0.1:0',
      store: `sqlite:${join(work.dir, 'gateway.db')}`,
      scope: 'global',
      accessLog: false,
      upstreams: { go: { url: upstream.url, connections: 32 } },
      defaults: { timeout: '5s', lease: '10s', ttl: '1h' },
      routes: [
        route('go', '/orders', { name: 'orders', reconcile: '/reconcile', maxBody: '64MiB' }),
        route('go', '/stream', { name: 'stream', maxResponse: '8MiB' }),
      ],
    });
    gateway = await gatewayInProcess(path);
    pool = new Pool(gateway.url, { connections: 32 });
  });

  afterAll(async () => {
    await pool?.close();
    await gateway?.close();
    await upstream?.stop();
    await work?.remove();
  });

  it(`runs each of ${KEYS} keys once under ${DUPLICATES} concurrent duplicates, and every retry replays its response`, async () => {
    const keys = Array.from({ length: KEYS }, (_, i) => `load-${i}`);
    const answers = await Promise.all(
      keys.flatMap((key) => Array.from({ length: DUPLICATES }, () => send(`${gateway.url}/orders`, { key, body: JSON.stringify({ key }), dispatcher: pool }).then((answer) => ({ key, answer })))),
    );
    const fresh = new Map<string, Buffer>();
    for (const { key, answer } of answers) {
      expect([201, 409]).toContain(answer.status);
      if (answer.status === 201 && answer.headers['idempotent-replayed'] === undefined) {
        expect(fresh.has(key)).toBe(false);
        fresh.set(key, answer.body);
      }
    }
    const counts = await upstream.perKey();
    for (const key of keys) expect(counts.get(key) ?? 0).toBe(fresh.has(key) ? 1 : 0);
    for (const { key, answer } of answers) {
      if (answer.status === 201 && answer.headers['idempotent-replayed'] === 'true') expect(answer.body.equals(fresh.get(key) as Buffer)).toBe(true);
    }
    const retries = await Promise.all(keys.map((key) => send(`${gateway.url}/orders`, { key, body: JSON.stringify({ key }), dispatcher: pool })));
    retries.forEach((retry, i) => {
      expect(retry.status).toBe(201);
      expect(retry.body.equals(fresh.get(keys[i] as string) as Buffer)).toBe(true);
    });
    expect(await upstream.executions()).toBe(fresh.size);
    expect(fresh.size).toBe(KEYS);
  });

  it('streams a 50 MB upload to the upstream once, and a retry with the same body replays', async () => {
    const chunk = Buffer.alloc(1 << 20, 7);
    const total = 50;
    const digest = createHash('sha256');
    for (let i = 0; i < total; i += 1) digest.update(chunk);
    const upload = () =>
      pool.request({
        method: 'POST',
        path: '/orders',
        headers: { 'idempotency-key': 'upload-1', 'content-type': 'application/octet-stream' },
        body: Readable.from((function* () {
          for (let i = 0; i < total; i += 1) yield chunk;
        })()),
      });
    const first = await upload();
    const body = JSON.parse(await first.body.text()) as { bytes: number; sha256: string };
    expect(first.statusCode).toBe(201);
    expect(body).toMatchObject({ bytes: total << 20, sha256: digest.digest('hex') });
    const retry = await upload();
    expect(retry.statusCode).toBe(201);
    expect(retry.headers['idempotent-replayed']).toBe('true');
    expect(JSON.parse(await retry.body.text())).toEqual(body);
    expect(await upstream.executions('upload-1')).toBe(1);
  });

  it('tees a streamed response to the client and the store; over maxResponse the retry gets 410', async () => {
    const kept = await send(`${gateway.url}/stream?chunks=64&size=65536`, { key: 'stream-1' });
    expect(kept.status).toBe(200);
    expect(kept.body.byteLength).toBe(64 * 65536);
    const replay = await send(`${gateway.url}/stream?chunks=64&size=65536`, { key: 'stream-1' });
    expect(replay.headers['idempotent-replayed']).toBe('true');
    expect(replay.body.equals(kept.body)).toBe(true);
    const large = await send(`${gateway.url}/stream?chunks=160&size=65536`, { key: 'stream-2' });
    expect(large.body.byteLength).toBe(160 * 65536);
    const gone = await send(`${gateway.url}/stream?chunks=160&size=65536`, { key: 'stream-2' });
    expect(gone.status).toBe(410);
    expect(gone.json()).toMatchObject({ code: 'idempotency-response-not-kept', originalStatus: 200 });
    expect(await upstream.executions('stream-1')).toBe(1);
    expect(await upstream.executions('stream-2')).toBe(1);
  });

  it('holds a reset after commit, and the reconcile hook completes it with the original response', async () => {
    const first = await send(`${gateway.url}/orders`, { key: 'reset-go', body: '{"n":1}', headers: { 'x-fault': 'reset' } });
    expect(first.status).toBe(502);
    expect(first.json()['code']).toBe('idempotency-outcome-unknown');
    const retry = await send(`${gateway.url}/orders`, { key: 'reset-go', body: '{"n":1}' });
    expect(retry.status).toBe(201);
    expect(retry.json()['key']).toBe('reset-go');
    expect(await upstream.executions('reset-go')).toBe(1);
  });
});
