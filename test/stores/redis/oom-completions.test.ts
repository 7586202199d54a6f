/**
 * Plain-mode completions on a private `redis-server` with `maxmemory` and `noeviction` (the shared suite
 * in ../completion-faults.ts): once every claim is written, ballast keys fill the server to its limit
 * (Redis refuses the next write with OOM), then every handler answers. On Redis 7 and later the completion
 * script carries `allow-oom`, so no completion is refused and every 2xx is saved while the server is over
 * its limit; the ballast is deleted afterwards. The lease renewal (keep-alive) of an admitted claim runs over
 * the limit too, while a new claim is refused.
 */
import type { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { createRedisStore } from '../../../src/stores/redis/index.js';
import { startPrivateRedis } from '../../support/redis-server.js';
import { uniqueName } from '../../support/services.js';
import { completionFaultSuite } from '../completion-faults.js';

const server = await startPrivateRedis(['--maxmemory', '8mb', '--maxmemory-policy', 'noeviction']);
afterAll(() => server?.stop());

/** Ballast keys that fill the server until Redis refuses a write with OOM, and delete themselves after. */
function ballast(client: Redis): { fill(): Promise<void>; clear(): Promise<void> } {
  const name = uniqueName('ballast');
  let written = 0;
  return {
    async fill() {
      const chunk = 'x'.repeat(8_192);
      for (;;) {
        const refusal = await client.set(`${name}:${written}`, chunk).then(
          () => undefined,
          (error: Error) => error,
        );
        if (refusal === undefined) written++;
        else if (/OOM/.test(refusal.message)) return;
        else throw refusal;
      }
    },
    async clear() {
      for (let i = 0; i < written; i += 500) {
        await client.del(...Array.from({ length: Math.min(500, written - i) }, (_, j) => `${name}:${i + j}`));
      }
      written = 0;
    },
  };
}

if (server) {
  completionFaultSuite('Redis at maxmemory under noeviction', async () => {
    const client = await server.connect();
    const store = createRedisStore({ client, prefix: uniqueName('rs:oom') });
    const fill = ballast(client);
    return {
      store,
      fault: { inject: () => fill.fill(), lift: () => fill.clear() },
      close: () => store.close(),
    };
  }, 'admitted');

  describe('Redis at maxmemory under noeviction: keep-alive', () => {
    it('renews an admitted claim over the limit, while a new claim is refused', async () => {
      const client = await server.connect();
      const store = createRedisStore({ client, prefix: uniqueName('rs:oom-renew') });
      const fill = ballast(client);
      try {
        const input = { scope: 't', fingerprint: 'f', leaseMs: 2_000, retentionMs: 60_000 };
        const won = await store.claim({ ...input, key: 'held' });
        if (!won.acquired) throw new Error('the first claim of a new key was not acquired');
        await fill.fill();
        const renewed = await store.renew(won.claim, 30_000);
        expect(renewed?.leaseToken).toBe(won.claim.leaseToken);
        expect(renewed!.leaseExpiresAt).toBeGreaterThan(won.claim.leaseExpiresAt);
        await expect(store.claim({ ...input, key: 'new' })).rejects.toThrow(/OOM/);
      } finally {
        await fill.clear();
        await store.close();
      }
    });
  });
}
