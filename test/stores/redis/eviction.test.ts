/**
 * Redis's `maxmemory-policy` against the store, on private `redis-server`s with `--maxmemory`: an evicting
 * policy (`allkeys-lru`, `volatile-lru`) is refused at start with a typed error, also where `CONFIG` is
 * renamed away (read from `INFO memory` then); `allowEvictingPolicy: true` runs with one warning; and under
 * `noeviction` at the memory limit, writes fail closed (503) and no answered success lacks its completion.
 */
import { Hono } from 'hono';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { StoreUnavailableError } from '../../../src/core/errors.js';
import { createReceiver } from '../../../src/receiver.js';
import { idempotency } from '../../../src/http/hono.js';
import { createRedisStore, openRedisStore, RedisEvictionPolicyError } from '../../../src/stores/redis/index.js';
import { REDIS_DRIVERS, startPrivateRedis, type PrivateRedis } from '../../support/redis-server.js';

const CLAIM = { scope: 's', fingerprint: 'f', leaseMs: 10_000, retentionMs: 60_000 };

const servers: PrivateRedis[] = [];
async function server(settings: readonly string[]): Promise<PrivateRedis | undefined> {
  const started = await startPrivateRedis(['--maxmemory', '4mb', ...settings]);
  if (started) servers.push(started);
  return started;
}
afterAll(async () => {
  await Promise.all(servers.map((s) => s.stop()));
});

const probe = await startPrivateRedis([]);
await probe?.stop();

describe.runIf(probe !== undefined)('redis store: maxmemory-policy', () => {
  it.each(['allkeys-lru', 'volatile-lru'])('refuses %s at start: openRedisStore rejects, a store on the client rejects every operation', async (policy) => {
    const redis = (await server(['--maxmemory-policy', policy]))!;
    const opened = await openRedisStore(`redis://127.0.0.1:${redis.port}`).catch((error: unknown) => error);
    expect(opened).toBeInstanceOf(RedisEvictionPolicyError);
    expect((opened as RedisEvictionPolicyError).code).toBe('store-eviction-policy');
    expect((opened as RedisEvictionPolicyError).policy).toBe(policy);

    const client = await redis.connect();
    const store = createRedisStore({ client, prefix: 'ev' });
    await expect(store.claim({ ...CLAIM, key: 'k1' })).rejects.toBeInstanceOf(RedisEvictionPolicyError);
    await expect(store.ping()).rejects.toBeInstanceOf(RedisEvictionPolicyError);
    // Nothing was written.
    expect(await client.dbsize()).toBe(0);

    const receiver = createReceiver({ store });
    let runs = 0;
    const outcome = await receiver.execute({ scope: 's', key: 'k2', fingerprint: 'f' }, () => {
      runs++;
      return Promise.resolve({ status: 201, headers: {}, body: new Uint8Array() });
    }).catch((error: unknown) => error);
    expect(outcome).toBeInstanceOf(StoreUnavailableError);
    expect((outcome as StoreUnavailableError).cause).toBeInstanceOf(RedisEvictionPolicyError);
    expect(runs).toBe(0);
    expect((await receiver.health()).healthy).toBe(false);
    await store.close();
  });

  it.each(REDIS_DRIVERS)('reads the policy from INFO memory where CONFIG is renamed away (%s)', async (driver) => {
    const redis = (await server(['--maxmemory-policy', 'allkeys-lfu', '--rename-command', 'CONFIG', '']))!;
    const client = await redis.connect();
    await expect(client.call('CONFIG', 'GET', 'maxmemory-policy')).rejects.toThrow(/unknown command/i);
    const store = createRedisStore({ client: driver === 'ioredis' ? client : await redis.connectNodeRedis(), prefix: 'ev' });
    const refusal = await store.claim({ ...CLAIM, key: 'k' }).catch((error: unknown) => error);
    expect(refusal).toBeInstanceOf(RedisEvictionPolicyError);
    expect((refusal as RedisEvictionPolicyError).policy).toBe('allkeys-lfu');
    expect((refusal as RedisEvictionPolicyError).server).toBe(`127.0.0.1:${redis.port}`);
    await store.close();
  });

  it('runs on an evicting policy with allowEvictingPolicy: true, warning once', async () => {
    const redis = (await server(['--maxmemory-policy', 'volatile-lru']))!;
    const client = await redis.connect();
    const warnings: string[] = [];
    const store = createRedisStore({ client, prefix: 'ev', allowEvictingPolicy: true, onWarning: (message) => warnings.push(message) });
    const claims = await Promise.all(Array.from({ length: 10 }, (_, i) => store.claim({ ...CLAIM, key: `k${i}` })));
    expect(claims.every((c) => c.acquired)).toBe(true);
    await store.ping();
    // A reconnect reads the policy again, but the warning stays one.
    client.disconnect(true);
    await new Promise<void>((resolve) => client.once('ready', () => resolve()));
    await store.claim({ ...CLAIM, key: 'after' });
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatch(/volatile-lru/);
    await store.close();
  });

  it('reads the policy again while refused: CONFIG SET noeviction lifts the refusal', async () => {
    const redis = (await server(['--maxmemory-policy', 'allkeys-random']))!;
    const client = await redis.connect();
    const store = createRedisStore({ client, prefix: 'ev' });
    await expect(store.claim({ ...CLAIM, key: 'k' })).rejects.toBeInstanceOf(RedisEvictionPolicyError);
    await client.call('CONFIG', 'SET', 'maxmemory-policy', 'noeviction');
    expect((await store.claim({ ...CLAIM, key: 'k' })).acquired).toBe(true);
    await store.close();
  });

  describe('noeviction at the memory limit', () => {
    let redis: PrivateRedis;
    let client: Redis;
    beforeAll(async () => {
      redis = (await server(['--maxmemory-policy', 'noeviction']))!;
      client = await redis.connect();
    });

    /** Writes 8 KB filler keys until Redis refuses with OOM; resolves how many it took. */
    async function fill(): Promise<number> {
      const chunk = 'x'.repeat(8_192);
      for (let i = 0; ; i++) {
        const written = await client.set(`filler:${i}`, chunk).then(
          () => true,
          (error: unknown) => {
            if (!/OOM/.test(String(error))) throw error;
            return false;
          },
        );
        if (!written) return i;
      }
    }

    it('answers 503 without running the handler, and answers no success whose completion was refused', async () => {
      const filled = await fill();
      expect(filled).toBeGreaterThan(0);
      // Room for a few claims only: each completion (a 64 KB response) then goes over the limit.
      await Promise.all(Array.from({ length: 12 }, (_, i) => client.del(`filler:${filled - 1 - i}`)));
      const store = createRedisStore({ client, prefix: 'oom' });
      const receiver = createReceiver({ store });
      let runs = 0;
      const app = new Hono();
      app.use(idempotency({ receiver }));
      app.post('/payments', async () => {
        runs++;
        await new Promise((resolve) => setTimeout(resolve, 20));
        return new Response(new Uint8Array(65_536).fill(7), { status: 201 });
      });
      const post = (key: string): Promise<Response> =>
        Promise.resolve(app.request('/payments', { method: 'POST', headers: { 'idempotency-key': key }, body: '{}' }));
      // Two waves: the first's claims fit and its completions (allowed over the limit on Redis 7) go over it,
      // so the second's claims meet the limit.
      const responses = await Promise.all(Array.from({ length: 30 }, (_, i) => post(`k${i}`)));
      responses.push(...(await Promise.all(Array.from({ length: 30 }, (_, i) => post(`k${30 + i}`)))));
      const statuses = responses.map((r) => r.status);
      expect(statuses.every((s) => s === 201 || s === 503)).toBe(true);
      // The limit was reached: some writes were refused, and the handler ran for none of them.
      expect(statuses.filter((s) => s === 503).length).toBeGreaterThan(0);
      expect(runs).toBe(statuses.filter((s) => s === 201).length);
      // Every answered success is a saved completion: a retry replays it rather than running again.
      const answered = statuses.flatMap((s, i) => (s === 201 ? [`k${i}`] : []));
      expect(answered.length).toBeGreaterThan(0);
      const records = await Promise.all(answered.map((key) => store.get('', key)));
      expect(records.map((r, i) => [answered[i], r?.state])).toEqual(answered.map((key) => [key, 'completed']));
      const health = await receiver.health();
      expect(health.healthy).toBe(false);
      await store.close();
    });
  });
});
