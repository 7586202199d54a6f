/**
 * Plain-mode completions when the wire between the app and its store is cut (the shared suite in
 * ./completion-faults.ts): a TCP proxy in front of PostgreSQL, and in front of a private `redis-server`,
 * closes its listener and destroys every open connection once every claim is written, and listens again
 * on the same port to end the fault. The app's connections are the ones it would use in production: a
 * `pg.Pool`, and `openRedisStore`'s fail-fast connection that reconnects by itself.
 */
import pg from 'pg';
import { afterAll } from 'vitest';
import { createPostgresStore } from '../../src/stores/postgres/index.js';
import { openRedisStore } from '../../src/stores/redis/index.js';
import { createTestSchema, postgresAvailable, type TestSchema } from '../support/postgres-schema.js';
import { startPrivateRedis } from '../support/redis-server.js';
import { POSTGRES_URL } from '../support/services.js';
import { TcpProxy } from '../support/tcp-proxy.js';
import { completionFaultSuite } from './completion-faults.js';

const db: TestSchema | undefined = (await postgresAvailable()) ? await createTestSchema('rs_tcp_cut') : undefined;
const redis = await startPrivateRedis([]);
const proxies: TcpProxy[] = [];
afterAll(async () => {
  await Promise.all(proxies.map((proxy) => proxy.close()));
  await db?.drop();
  await redis?.stop();
});

async function proxyTo(host: string, port: number): Promise<TcpProxy> {
  const proxy = new TcpProxy(host, port);
  await proxy.start();
  proxies.push(proxy);
  return proxy;
}

if (db) {
  completionFaultSuite('the connections to PostgreSQL cut', async () => {
    const target = new URL(POSTGRES_URL);
    const proxy = await proxyTo(target.hostname, Number(target.port || 5432));
    const url = new URL(POSTGRES_URL);
    url.hostname = '127.0.0.1';
    url.port = String(proxy.port);
    const pool = new pg.Pool({ connectionString: url.href, max: 4 });
    // The cut kills pooled connections: they must not crash the run.
    pool.on('error', () => undefined);
    const store = createPostgresStore({ pool, schema: db.schema });
    return {
      store,
      fault: { inject: () => proxy.cut(), lift: () => proxy.restore() },
      close: async () => {
        await store.close();
        await pool.end();
        await proxy.close();
      },
    };
  });
}

if (redis) {
  completionFaultSuite('the connection to Redis cut', async () => {
    const proxy = await proxyTo('127.0.0.1', redis.port);
    const store = await openRedisStore(`redis://127.0.0.1:${proxy.port}`, { prefix: 'cut' });
    return {
      store,
      fault: {
        inject: () => proxy.cut(),
        async lift() {
          await proxy.restore();
          // Over once the connection is back: it fails fast (no offline queue) until it has reconnected.
          while (!(await store.ping().then(() => true, () => false))) await new Promise((resolve) => setTimeout(resolve, 20));
        },
      },
      close: async () => {
        await store.close();
        await proxy.close();
      },
    };
  });
}
