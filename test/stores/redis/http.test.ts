/**
 * The HTTP behaviour table (`test/http/scenarios.ts`) over the Redis store, through the Hono adapter: the whole
 * shared table, plus the rows only a shared server can show (duplicates spread over two connections, and
 * Redis really gone rather than a failure injected).
 */
import { Hono } from 'hono';
import { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { type ReceiverOptions } from '../../../src/core/receiver.js';
import { createReceiver } from '../../../src/receiver.js';
import { idempotency } from '../../../src/http/hono.js';
import { createRedisStore } from '../../../src/stores/redis/index.js';
import { deleteUnder } from '../../support/redis.js';
import { REDIS_URL, serviceAvailable, uniqueName } from '../../support/services.js';
import { honoDriver } from '../../http/hono-driver.js';
import { redisScenarioStore } from '../../http/scenario-stores.js';
import { httpScenarios } from '../../http/scenarios.js';

const FILE_PREFIX = uniqueName('rs_redis_http');
/** A binary response body (every byte value). */
const BINARY = Uint8Array.from({ length: 512 }, (_, i) => (i * 7 + 3) % 256);

const client = new Redis(REDIS_URL, { lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 1 });
const connections: Redis[] = [];

/** An app on its own Redis connection; `runs` counts handler executions. */
async function app(prefix: string, options: Omit<ReceiverOptions, 'clock'> = {}) {
  const connection = client.duplicate();
  await connection.connect();
  connections.push(connection);
  const receiver = createReceiver({ store: createRedisStore({ client: connection, prefix }), ...options });
  const state = { runs: 0 };
  const hono = new Hono();
  hono.use(idempotency({ receiver }));
  hono.post('/payments', async () => {
    state.runs++;
    await new Promise((resolve) => setTimeout(resolve, 30));
    return new Response(BINARY, {
      status: 201,
      headers: { 'content-type': 'application/octet-stream', location: `/payments/${state.runs}`, 'set-cookie': 'a=b' },
    });
  });
  const post = async (key: string): Promise<Response> =>
    await hono.request('/payments', { method: 'POST', headers: { 'idempotency-key': key, 'content-type': 'application/json' }, body: '{"amount":100}' });
  return { state, post, connection };
}

if (await serviceAvailable('Redis', () => client.connect())) {
  afterAll(async () => {
    await Promise.all(connections.map((connection) => connection.quit().catch(() => undefined)));
    await deleteUnder(client, FILE_PREFIX);
    await client.quit();
  });

  httpScenarios(honoDriver, redisScenarioStore('rs_redis_http_table'));

  describe('redis store: HTTP behaviour across connections', () => {
    it('runs once for 20 parallel duplicates over two connections: the rest get 409 with Retry-After', async () => {
      const prefix = `${FILE_PREFIX}:conflict`;
      const a = await app(prefix);
      const b = await app(prefix);
      const responses = await Promise.all(Array.from({ length: 20 }, (_, i) => (i % 2 ? a : b).post('"hot"')));
      expect(a.state.runs + b.state.runs).toBe(1);
      const statuses = responses.map((res) => res.status).sort();
      expect(statuses.filter((s) => s === 201)).toHaveLength(1);
      expect(statuses.filter((s) => s === 409)).toHaveLength(19);
      for (const res of responses.filter((r) => r.status === 409)) {
        expect(res.headers.get('retry-after')).toBe('1');
        expect(((await res.json()) as { code: string }).code).toBe('idempotency-request-in-progress');
      }
    });

    it('in wait mode hands 20 parallel duplicates over two connections the one response', async () => {
      const prefix = `${FILE_PREFIX}:wait`;
      const a = await app(prefix, { inFlight: 'wait', waitTimeoutMs: 5_000 });
      const b = await app(prefix, { inFlight: 'wait', waitTimeoutMs: 5_000 });
      const responses = await Promise.all(Array.from({ length: 20 }, (_, i) => (i % 2 ? a : b).post('"hot"')));
      expect(a.state.runs + b.state.runs).toBe(1);
      expect(responses.map((res) => res.status)).toEqual(Array.from({ length: 20 }, () => 201));
      expect(responses.filter((res) => res.headers.get('idempotent-replayed') === 'true')).toHaveLength(19);
      const locations = new Set(responses.map((res) => res.headers.get('location')));
      expect(locations).toEqual(new Set(['/payments/1']));
    });

    it('answers 503 without running the handler when Redis is unreachable', async () => {
      const { state, post, connection } = await app(`${FILE_PREFIX}:down`);
      connection.disconnect();
      const res = await post('"k-1"');
      expect(res.status).toBe(503);
      expect(((await res.json()) as { code: string }).code).toBe('idempotency-store-unavailable');
      expect(state.runs).toBe(0);
    });
  });
}
