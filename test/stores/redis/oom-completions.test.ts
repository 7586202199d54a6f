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
      // Smaller and smaller values: a refused write's own query buffer counts towards the limit, so after
      // the large values are refused a small write may still fit; the server is full once even 1 byte is not.
      for (const size of [8_192, 512, 32, 1]) {
        const chunk = 'x'.repeat(size);
        for (;;) {
          const refusal = await client.set(`${name}:${written}`, chunk).then(
            () => undefined,
            (error: Error) => error,
          );
          if (refusal === undefined) written++;
          else if (/OOM/.test(refusal.message)) break;
          else throw refusal;
        }
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
      const refusedWrite = (write: Promise<unknown>) => write.then(() => false, (error: Error) => (/OOM/.test(error.message) ? true : Promise.reject(error)));
      try {
        const input = { scope: 't', fingerprint: 'f', leaseMs: 2_000, retentionMs: 60_000 };
        const won = await store.claim({ ...input, key: 'held' });
        if (!won.acquired) throw new Error('the first claim of a new key was not acquired');
        // Memory can fall back under the limit after the ballast's last refused write (buffers freed): a
        // round counts only when a plain write is refused just before the renewal and a claim just after.
        let over = false;
        let renewed: Awaited<ReturnType<typeof store.renew>>;
        for (let round = 0; round < 5 && !over; round++) {
          await fill.fill();
          if (!(await refusedWrite(client.set(uniqueName('probe'), 'x')))) continue;
          renewed = await store.renew(won.claim, 30_000);
          over = await refusedWrite(store.claim({ ...input, key: `new-${round}` }));
        }
        expect(over).toBe(true);
        expect(renewed?.leaseToken).toBe(won.claim.leaseToken);
        expect(renewed?.leaseExpiresAt).toBeGreaterThan(won.claim.leaseExpiresAt);
      } finally {
        await fill.clear();
        await store.close();
      }
    });
  });
}
