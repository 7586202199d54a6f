/**
 * The HTTP behaviour table (`test/http/scenarios.ts`) over the etcd store, through the Hono adapter, on a
 * one-member etcd the file starts itself; plus the rows only a real server shows (duplicates over two
 * clients, a response over the store's size limit answered 410 on replay, etcd gone).
 */
import { Hono } from 'hono';
import { Etcd3 } from 'etcd3';
import { afterAll, describe, expect, it } from 'vitest';
import { createReceiver } from '../../../src/receiver.js';
import { idempotency } from '../../../src/http/hono.js';
import { createEtcdStore } from '../../../src/stores/etcd/index.js';
import { etcdAvailable, etcdScenarioStore, startEtcd } from '../../support/etcd.js';
import { freePort } from '../../support/services.js';
import { honoDriver } from '../../http/hono-driver.js';
import { httpScenarios } from '../../http/scenarios.js';

if (await etcdAvailable()) {
  httpScenarios(honoDriver, etcdScenarioStore());

  describe('etcd store: HTTP behaviour across clients', async () => {
    const cluster = await startEtcd(1);
    const clients: Etcd3[] = [];
    afterAll(async () => {
      for (const client of clients) client.close();
      await cluster.stop();
    });

    /** An app on its own etcd client; `runs` counts handler executions. */
    function app(prefix: string, bodyBytes = 512, maxResponseBytes?: number, client = cluster.client()) {
      clients.push(client);
      const store = createEtcdStore({ client, prefix, ...(maxResponseBytes !== undefined && { maxResponseBytes }) });
      const receiver = createReceiver({ store, inFlight: 'wait', waitTimeoutMs: 5_000 });
      const state = { runs: 0 };
      const hono = new Hono();
      hono.use(idempotency({ receiver }));
      hono.post('/payments', async () => {
        state.runs++;
        await new Promise((resolve) => setTimeout(resolve, 30));
        return new Response(new Uint8Array(bodyBytes).fill(5), { status: 201, headers: { location: `/payments/${state.runs}` } });
      });
      const post = async (key: string): Promise<Response> =>
        await hono.request('/payments', { method: 'POST', headers: { 'idempotency-key': key, 'content-type': 'application/json' }, body: '{"amount":100}' });
      return { state, post };
    }

    it('in wait mode hands 20 parallel duplicates over two clients the one response', async () => {
      const a = app('wait');
      const b = app('wait');
      const responses = await Promise.all(Array.from({ length: 20 }, (_, i) => (i % 2 ? a : b).post('"hot"')));
      expect(a.state.runs + b.state.runs).toBe(1);
      expect(responses.map((res) => res.status)).toEqual(Array.from({ length: 20 }, () => 201));
      expect(responses.filter((res) => res.headers.get('idempotent-replayed') === 'true')).toHaveLength(19);
    });

    it('answers a replay of a response over maxResponseBytes 410, without running the handler again', async () => {
      const { state, post } = app('big', 4_096, 1_024);
      expect((await post('"big-1"')).status).toBe(201);
      const replay = await post('"big-1"');
      expect(replay.status).toBe(410);
      expect(await replay.json()).toMatchObject({ code: 'idempotency-response-not-kept', originalStatus: 201 });
      expect(replay.headers.get('location')).toBe('/payments/1');
      expect(state.runs).toBe(1);
    });

    it('answers 503 without running the handler when etcd is unreachable', async () => {
      // A port nothing listens on: the claim's transaction fails to connect.
      const { state, post } = app('down', 512, undefined, new Etcd3({ hosts: `http://127.0.0.1:${await freePort()}`, dialTimeout: 500 }));
      const res = await post('"k-1"');
      expect(res.status).toBe(503);
      expect(((await res.json()) as { code: string }).code).toBe('idempotency-store-unavailable');
      expect(state.runs).toBe(0);
    });
  });
}
