/**
 * The gateway as `retrysafe gateway` child processes in front of the Python upstream: SIGKILLed while
 * the upstream holds a request, then restarted — the retry that finds the lease expired does not send the
 * request again blindly (the reconcile hook decides, or the record is held as indeterminate) — and two
 * gateway processes on one PostgreSQL or Redis store receiving the same keys at once. Counted: upstream
 * executions per key.
 */
import { once } from 'node:events';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort, POSTGRES_URL, postgresAvailable, REDIS_URL, redisAvailable, uniqueName } from '../support/services.js';
import { TcpProxy } from '../support/tcp-proxy.js';
import { executed, gatewayInProcess, gatewayProcess, held, pythonAvailable, release, route, send, startPython, workDir, writeConfig, type Answer, type UpstreamProcess } from './support.js';

const python = await pythonAvailable();
const postgres = python && (await postgresAvailable());
const redis = python && (await redisAvailable());

/** Retries like a client: again after each 409 (the lease still live), up to `attempts` times. */
async function retryUntilSettled(attempt: () => Promise<Answer>, attempts = 40): Promise<Answer> {
  let answer = await attempt();
  for (let i = 0; i < attempts && answer.status === 409; i += 1) {
    await new Promise((resolve) => setTimeout(resolve, 150));
    answer = await attempt();
  }
  return answer;
}

describe.runIf(python)('gateway processes', () => {
  let work: Awaited<ReturnType<typeof workDir>>;
  let upstream: UpstreamProcess;

  beforeAll(async () => {
    work = await workDir();
    upstream = await startPython(work.dir);
  });

  afterAll(async () => {
    await upstream?.stop();
    await work?.remove();
  });

  it('after a SIGKILL mid-request and a restart, a retry never sends the request a second time', async () => {
    const port = await freePort();
    const path = await writeConfig(work.dir, {
      listen: `127.0.0.1:${port}`,
      store: `sqlite:${join(work.dir, 'crash.db')}`,
      scope: 'global',
      accessLog: false,
      upstreams: { py: { url: upstream.url } },
      defaults: { timeout: '10s', lease: '1s', ttl: '1h' },
      routes: [route('py', '/held'), route('py', '/reconciled', { reconcile: '/reconcile' })],
    }, 'crash.yaml');
    let gateway = await gatewayProcess(path, port);
    const crashed = ['crash-held', 'crash-done', 'crash-never'];
    // The upstream holds each request until released: the first two after executing, the third before it
    // executes anything. The gateway is killed once the upstream holds all three, so each is in flight then.
    const doomed = [
      send(`${gateway.url}/held`, { key: 'crash-held', headers: { 'x-fault': 'sleep=held' } }).catch(() => undefined),
      send(`${gateway.url}/reconciled`, { key: 'crash-done', headers: { 'x-fault': 'sleep=held' } }).catch(() => undefined),
      send(`${gateway.url}/reconciled`, { key: 'crash-never', headers: { 'x-fault': 'hang=held' } }).catch(() => undefined),
    ];
    for (const key of crashed) await held(upstream, key);
    await gateway.stop('SIGKILL');
    expect(await Promise.all(doomed)).toEqual([undefined, undefined, undefined]);
    // Released only now, to a gateway already gone: the first two answer a closed connection, the third
    // answers 503 without executing.
    for (const key of crashed) await release(upstream, key);
    gateway = await gatewayProcess(path, port);
    try {
      // No reconcile hook: the record is held, whatever the upstream did.
      const held = await retryUntilSettled(() => send(`${gateway.url}/held`, { key: 'crash-held' }));
      expect(held.status).toBe(502);
      expect(held.json()).toMatchObject({ code: 'idempotency-outcome-unknown', cause: 'interrupted', newKeySafe: false });
      // The hook knows it ran: its response replays.
      const done = await retryUntilSettled(() => send(`${gateway.url}/reconciled`, { key: 'crash-done' }));
      expect(done.status).toBe(201);
      expect(done.json()['key']).toBe('crash-done');
      // The hook says it never ran: sent now, once.
      await new Promise((resolve) => setTimeout(resolve, 1_200));
      const never = await retryUntilSettled(() => send(`${gateway.url}/reconciled`, { key: 'crash-never' }));
      expect(never.status).toBe(201);
      expect(never.headers['idempotent-replayed']).toBeUndefined();
      expect(await upstream.executions('crash-held')).toBe(1);
      expect(await upstream.executions('crash-done')).toBe(1);
      expect(await upstream.executions('crash-never')).toBe(1);
      expect((await send(`${gateway.url}/held`, { key: 'crash-held' })).status).toBe(502);
    } finally {
      await gateway.stop();
    }
  });

  it('drains on SIGTERM: a request in flight finishes, then the process exits 0', async () => {
    const port = await freePort();
    const path = await writeConfig(work.dir, {
      listen: `127.0.0.1:${port}`,
      store: `sqlite:${join(work.dir, 'drain.db')}`,
      scope: 'global',
      accessLog: false,
      upstreams: { py: { url: upstream.url } },
      routes: [route('py', '/drain')],
    }, 'drain.yaml');
    const gateway = await gatewayProcess(path, port);
    const inFlight = send(`${gateway.url}/drain`, { key: 'drain-1', headers: { 'x-fault': 'sleep=800' } });
    await executed(upstream, 'drain-1');
    gateway.child.kill('SIGTERM');
    const [code] = (await once(gateway.child, 'exit')) as [number | null];
    const answer = await inFlight;
    expect(answer.status).toBe(201);
    expect(answer.json()['key']).toBe('drain-1');
    expect(code).toBe(0);
    await expect(send(`${gateway.url}/drain`, { key: 'drain-2' })).rejects.toThrow();
    expect(await upstream.executions('drain-1')).toBe(1);
  });

  it.runIf(postgres)('fails closed when the store is unreachable: 503, and nothing reaches the upstream', async () => {
    const schema = uniqueName('gateway_down');
    const proxy = new TcpProxy('127.0.0.1', Number(new URL(POSTGRES_URL).port || 5432));
    await proxy.start();
    const url = new URL(POSTGRES_URL);
    url.port = String(proxy.port);
    url.searchParams.set('schema', schema);
    const path = await writeConfig(work.dir, {
      listen: '127.0.0.1:0',
      store: url.toString(),
      scope: 'global',
      accessLog: false,
      upstreams: { py: { url: upstream.url } },
      routes: [route('py', '/down')],
    }, 'down.yaml');
    const gateway = await gatewayInProcess(path);
    try {
      expect((await send(`${gateway.url}/down`, { key: 'down-1' })).status).toBe(201);
      // The response is teed to the client before it is saved: the replay says it was.
      expect((await send(`${gateway.url}/down`, { key: 'down-1' })).headers['idempotent-replayed']).toBe('true');
      await proxy.cut();
      const refused = await send(`${gateway.url}/down`, { key: 'down-2' });
      expect(refused.status).toBe(503);
      expect(refused.json()['code']).toBe('idempotency-store-unavailable');
      expect(refused.headers['retry-after']).toBe('1');
      expect(await upstream.executions('down-2')).toBe(0);
      await proxy.restore();
      // The pool's connections died with the cut: a client retries its 503 as Retry-After says.
      let back = await send(`${gateway.url}/down`, { key: 'down-1' });
      for (let i = 0; i < 20 && back.status === 503; i += 1) back = await send(`${gateway.url}/down`, { key: 'down-1' });
      expect(back.status).toBe(201);
      expect(back.headers['idempotent-replayed']).toBe('true');
      expect(await upstream.executions('down-1')).toBe(1);
    } finally {
      await gateway.close();
      await proxy.close();
      const client = new pg.Client({ connectionString: POSTGRES_URL });
      await client.connect();
      await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
      await client.end();
    }
  });

  async function twoReplicas(store: string, name: string): Promise<void> {
    const ports = [await freePort(), await freePort()];
    const configs = await Promise.all(
      ports.map((port, i) =>
        writeConfig(work.dir, {
          listen: `127.0.0.1:${port}`,
          store,
          scope: { trustedHeader: { name: 'x-tenant' } },
          accessLog: false,
          upstreams: { py: { url: upstream.url } },
          defaults: { timeout: '10s', lease: '10s', ttl: '1h' },
          routes: [route('py', '/replicas')],
        }, `${name}-${i}.yaml`),
      ),
    );
    const gateways = await Promise.all(configs.map((path, i) => gatewayProcess(path, ports[i] as number)));
    try {
      const keys = Array.from({ length: 20 }, (_, i) => `${name}-${i}`);
      const answers = await Promise.all(
        keys.flatMap((key) =>
          gateways.flatMap((gateway) => [0, 1].map(() => send(`${gateway.url}/replicas`, { key, headers: { 'x-tenant': 't1', 'x-fault': 'sleep=100' } }).then((answer) => ({ key, answer })))),
        ),
      );
      const fresh = new Set<string>();
      for (const { key, answer } of answers) {
        expect([201, 409]).toContain(answer.status);
        if (answer.status === 201 && answer.headers['idempotent-replayed'] === undefined) {
          expect(fresh.has(key)).toBe(false);
          fresh.add(key);
        }
      }
      for (const key of keys) expect(await upstream.executions(key)).toBe(fresh.has(key) ? 1 : 0);
      for (const key of keys) {
        const [a, b] = await Promise.all(gateways.map((gateway) => send(`${gateway.url}/replicas`, { key, headers: { 'x-tenant': 't1' } })));
        expect(a?.status).toBe(201);
        expect(a?.body.equals(b?.body ?? Buffer.alloc(0))).toBe(true);
      }
      expect(fresh.size).toBe(keys.length);
    } finally {
      await Promise.all(gateways.map((gateway) => gateway.stop()));
    }
  }

  it.runIf(postgres)('two gateway processes on one PostgreSQL store send each key once', async () => {
    const schema = uniqueName('gateway');
    try {
      await twoReplicas(`${POSTGRES_URL}?schema=${schema}`, 'pg');
    } finally {
      const client = new pg.Client({ connectionString: POSTGRES_URL });
      await client.connect();
      await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
      await client.end();
    }
  });

  it.runIf(redis)('two gateway processes on one Redis store send each key once', async () => {
    await twoReplicas(`${REDIS_URL}?prefix=${uniqueName('gateway')}`, 'redis');
  });
});
