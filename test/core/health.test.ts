/**
 * The receiver's health check against stores that answer reads but refuse writes: a SQLite file opened
 * read-only, and a private Redis at `maxmemory` under `noeviction`. Each must be reported unhealthy (the
 * write probe), a healthy store healthy with nothing left behind, and a health route polled often must
 * not write on every call.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import BetterSqlite3 from 'better-sqlite3';
import { Hono } from 'hono';
import { afterAll, describe, expect, it } from 'vitest';
import { HEALTH_PROBE_SCOPE } from '../../src/core/health.js';
import type { IdempotencyStore } from '../../src/core/store.js';
import { healthRoute } from '../../src/http/hono.js';
import { createReceiver } from '../../src/receiver.js';
import { createRedisStore } from '../../src/stores/redis/index.js';
import { createSqliteStore } from '../../src/stores/sqlite/index.js';
import { startPrivateRedis } from '../support/redis-server.js';

const redis = await startPrivateRedis(['--maxmemory', '4mb', '--maxmemory-policy', 'noeviction']);
afterAll(() => redis?.stop());
const dir = mkdtempSync(join(tmpdir(), 'retrysafe-health-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** The status the health route answers for `store`. */
async function routeStatus(store: IdempotencyStore): Promise<number> {
  const receiver = createReceiver({ store });
  const app = new Hono();
  app.get('/health', healthRoute({ idempotency: () => receiver.health() }));
  return (await app.request('/health')).status;
}

describe('receiver.health(): the write probe', () => {
  it('reports a SQLite file opened read-only as unhealthy (503), and the same file writable as healthy', async () => {
    const path = join(dir, 'ro.db');
    const writable = createSqliteStore({ path });
    expect(await createReceiver({ store: writable }).health()).toMatchObject({ healthy: true, writable: true });
    expect(await routeStatus(writable)).toBe(200);
    await writable.close();

    const database = new BetterSqlite3(path, { readonly: true });
    const readOnly = createSqliteStore({ database, migrate: false });
    const health = await createReceiver({ store: readOnly }).health();
    expect(health).toMatchObject({ healthy: false, writable: false, store: 'sqlite' });
    expect(health.error).toMatch(/readonly/i);
    expect(await routeStatus(readOnly)).toBe(503);
    await readOnly.close();
    database.close();
  });

  it('leaves nothing behind on a healthy store, and probes at most once per interval however often it is asked', async () => {
    const store = createSqliteStore();
    let claims = 0;
    const counting: IdempotencyStore = new Proxy(store, {
      get(target, property, receiver) {
        if (property === 'claim') {
          return (...args: Parameters<IdempotencyStore['claim']>) => {
            claims++;
            return target.claim(...args);
          };
        }
        return Reflect.get(target, property, receiver) as unknown;
      },
    });
    const receiver = createReceiver({ store: counting });
    const answers = await Promise.all(Array.from({ length: 20 }, () => receiver.health()));
    for (let i = 0; i < 20; i++) answers.push(await receiver.health());
    expect(answers.every((a) => a.healthy && a.writable === true)).toBe(true);
    expect(claims).toBe(1);
    expect(await store.listRecords({ scope: HEALTH_PROBE_SCOPE, limit: 10 })).toEqual([]);
    await store.close();
  });

  it.runIf(redis !== undefined)('reports Redis at maxmemory under noeviction as unhealthy (503), and healthy before the limit', async () => {
    const client = await redis!.connect();
    const store = createRedisStore({ client, prefix: 'health' });
    expect(await createReceiver({ store }).health()).toMatchObject({ healthy: true, writable: true, store: 'redis' });
    expect(await client.dbsize()).toBe(0);

    // Large values up to the limit, then small ones: a refused large SET's argument sat in the query buffer
    // and counted, so the limit is reached for good only once a small write is refused too.
    for (const size of [8_192, 64]) {
      const chunk = 'x'.repeat(size);
      for (let i = 0; ; i++) {
        const full = await client.set(`filler:${size}:${i}`, chunk).then(
          () => false,
          (error: unknown) => /OOM/.test(String(error)),
        );
        if (full) break;
      }
    }
    const health = await createReceiver({ store }).health();
    expect(health).toMatchObject({ healthy: false, writable: false });
    expect(health.error).toMatch(/OOM/);
    expect(await routeStatus(store)).toBe(503);
    await store.close();
  });
});
