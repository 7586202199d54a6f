import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import type { IdempotencyStore, RecordQuery } from '../../src/core/store.js';
import { createPostgresStore, migrate } from '../../src/postgres.js';
import { openRedisStore } from '../../src/stores/redis/index.js';
import { createSqliteStore } from '../../src/stores/sqlite/index.js';
import { POSTGRES_URL, postgresAvailable, REDIS_URL, redisAvailable, uniqueName } from '../support/services.js';
import { startConsole } from './harness.js';

const FP = 'c'.repeat(64);
const [pgUp, redisUp] = await Promise.all([postgresAvailable(), redisAvailable()]);
const cleanups: (() => Promise<void>)[] = [];

afterAll(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup();
});

/** Seeds 2 scopes × 6 keys: even numbers completed, odd ones in progress. */
async function seed(store: IdempotencyStore): Promise<void> {
  for (const scope of ['acme', 'zeta']) {
    for (let i = 0; i < 6; i++) {
      const won = await store.claim({ scope, key: `k-${i}`, fingerprint: FP, leaseMs: 60_000, retentionMs: 3_600_000 });
      if (!won.acquired) throw new Error('expected to acquire');
      if (i % 2 === 0) await store.complete(won.claim, { status: 200, headers: {}, body: new Uint8Array([i]) }, 3_600_000);
    }
  }
  await store.claim({ scope: 'acme', key: 'other', fingerprint: FP, leaseMs: 60_000, retentionMs: 3_600_000 });
}

async function names(store: IdempotencyStore, query: RecordQuery): Promise<string[]> {
  const records = (await store.listRecords?.(query)) ?? [];
  return records.map((r) => `${r.scope}/${r.key}/${r.state}`);
}

/** Walks every page of `query` with the keyset cursor. */
async function walk(store: IdempotencyStore, query: RecordQuery): Promise<string[]> {
  const all: string[] = [];
  let after: RecordQuery['after'];
  for (;;) {
    const records = (await store.listRecords?.({ ...query, ...(after !== undefined && { after }) })) ?? [];
    all.push(...records.map((r) => `${r.scope}/${r.key}`));
    const last = records[records.length - 1];
    if (records.length < query.limit || last === undefined) return all;
    after = { scope: last.scope, key: last.key };
  }
}

const stores: [string, boolean, () => Promise<IdempotencyStore>][] = [
  ['SQLite', true, () => {
    const dir = mkdtempSync(join(tmpdir(), 'retrysafe-list-'));
    cleanups.push(() => Promise.resolve(rmSync(dir, { recursive: true, force: true })));
    return Promise.resolve(createSqliteStore({ path: join(dir, 'records.db') }));
  }],
  ['PostgreSQL', pgUp, async () => {
    const schema = uniqueName('console_list');
    await migrate({ connectionString: POSTGRES_URL, schema });
    cleanups.push(async () => {
      const client = new pg.Client({ connectionString: POSTGRES_URL });
      await client.connect();
      await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
      await client.end();
    });
    return createPostgresStore({ connectionString: POSTGRES_URL, schema });
  }],
  ['Redis', redisUp, () => openRedisStore(REDIS_URL, { prefix: uniqueName('console_list') })],
];

describe.each(stores)('listRecords on %s', (_name, up, open) => {
  it.runIf(up)('filters by state, scope and key prefix, and pages in (scope, key) order without gaps or repeats', async () => {
    const store = await open();
    try {
      await seed(store);
      expect(await names(store, { scope: 'acme', keyPrefix: 'k-', state: 'in_progress', limit: 10 })).toEqual([
        'acme/k-1/in_progress',
        'acme/k-3/in_progress',
        'acme/k-5/in_progress',
      ]);
      expect(await names(store, { state: 'completed', limit: 2 })).toEqual(['acme/k-0/completed', 'acme/k-2/completed']);
      expect(await names(store, { keyPrefix: 'oth', limit: 10 })).toEqual(['acme/other/in_progress']);
      const every = await walk(store, { limit: 5 });
      expect(every).toHaveLength(13);
      expect(every).toEqual([...every].sort());
      expect(new Set(every).size).toBe(13);
      await expect(store.listRecords?.({ limit: 0 })).rejects.toThrow(TypeError);
    } finally {
      await store.close();
    }
  });
});

describe.runIf(redisUp)('console on Redis', () => {
  it('lists keys through the API', async () => {
    const prefix = uniqueName('console_redis');
    const store = await openRedisStore(REDIS_URL, { prefix });
    await seed(store);
    await store.close();
    const running = await startConsole(['--store', `${REDIS_URL}?prefix=${prefix}`]);
    try {
      const page = (await (await fetch(new URL('/api/keys?scope=zeta&state=in_progress', running.url))).json()) as { records: { key: string }[] };
      expect(page.records.map((r) => r.key)).toEqual(['k-1', 'k-3', 'k-5']);
      const info = (await (await fetch(new URL('/api/info', running.url))).json()) as Record<string, unknown>;
      expect(info).toMatchObject({ keys: true, inbox: false, outbox: false, allowActions: false });
    } finally {
      expect(await running.stop()).toBe(0);
    }
  }, 60_000);
});
