/**
 * Plain-mode completions on a private `redis-server` with `maxmemory` and `noeviction` (the shared suite
 * in ../completion-faults.ts): once every claim is written, ballast keys fill the server to its limit
 * (Redis refuses the next write with OOM), then every handler answers. On Redis 7 and later the completion
 * script carries `allow-oom`, so no completion is refused and every 2xx is saved while the server is over
 * its limit; the ballast is deleted afterwards.
 */
import { afterAll } from 'vitest';
import { createRedisStore } from '../../../src/stores/redis/index.js';
import { startPrivateRedis } from '../../support/redis-server.js';
import { uniqueName } from '../../support/services.js';
import { completionFaultSuite } from '../completion-faults.js';

const server = await startPrivateRedis(['--maxmemory', '8mb', '--maxmemory-policy', 'noeviction']);
afterAll(() => server?.stop());

if (server) {
  completionFaultSuite('Redis at maxmemory under noeviction', async () => {
    const client = await server.connect();
    const store = createRedisStore({ client, prefix: uniqueName('rs:oom') });
    const ballast = uniqueName('ballast');
    let written = 0;
    return {
      store,
      fault: {
        async inject() {
          const chunk = 'x'.repeat(8_192);
          for (;;) {
            const refusal = await client.set(`${ballast}:${written}`, chunk).then(
              () => undefined,
              (error: Error) => error,
            );
            if (refusal === undefined) written++;
            else if (/OOM/.test(refusal.message)) return;
            else throw refusal;
          }
        },
        async lift() {
          for (let i = 0; i < written; i += 500) {
            await client.del(...Array.from({ length: Math.min(500, written - i) }, (_, j) => `${ballast}:${i + j}`));
          }
          written = 0;
        },
      },
      close: () => store.close(),
    };
  }, 'admitted');
}
