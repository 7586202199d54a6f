/**
 * Kysely over the request's transaction (docs/orm.md): a `PostgresDialect` over `poolOf(tx)` on the
 * PostgreSQL store's `PoolClient`, and a `SqliteDialect` over the SQLite store's better-sqlite3 `Database`.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { Kysely, PostgresDialect, SqliteDialect, type Generated } from 'kysely';
import type pg from 'pg';
import { afterAll, beforeAll, describe } from 'vitest';
import { createPostgresStore, poolOf } from '../../../src/stores/postgres/index.js';
import { createSqliteStore } from '../../../src/stores/sqlite/index.js';
import { postgresAvailable, type TestSchema } from '../../support/postgres-schema.js';
import { createOrdersSchema, ormScenarios } from './suite.js';

interface Tables {
  orders: { id: Generated<number>; key: string; amount: number };
}

ormScenarios('Kysely on SQLite (better-sqlite3)', () => {
  const dir = mkdtempSync(join(tmpdir(), 'retrysafe-kysely-'));
  const path = join(dir, 'orders.db');
  const store = createSqliteStore({ path });
  store.database.exec('CREATE TABLE orders (id INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT NOT NULL, amount INTEGER NOT NULL)');
  // Another connection sees only what was committed.
  const reader = new Kysely<Tables>({ dialect: new SqliteDialect({ database: new Database(path, { readonly: true }) }) });
  return Promise.resolve({
    store,
    async insertOrder(tx: Database.Database, key: string, amount: number) {
      // Never destroy() this instance: that would close the store's own connection.
      const db = new Kysely<Tables>({ dialect: new SqliteDialect({ database: tx }) });
      const row = await db.insertInto('orders').values({ key, amount }).returning('id').executeTakeFirstOrThrow();
      return row.id;
    },
    async committedOrders(key: string) {
      const row = await reader.selectFrom('orders').select((eb) => eb.fn.countAll<number>().as('n')).where('key', '=', key).executeTakeFirstOrThrow();
      return Number(row.n);
    },
    async close() {
      await reader.destroy();
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    },
  });
});

const available = await postgresAvailable();

describe.runIf(available)('PostgreSQL', () => {
  let db: TestSchema;
  beforeAll(async () => {
    db = await createOrdersSchema('rs_kysely');
  });
  afterAll(async () => {
    await db.drop();
  });

  ormScenarios('Kysely on PostgreSQL (node-postgres)', () => {
    const store = createPostgresStore({ pool: db.pool, schema: db.schema });
    const reader = new Kysely<Tables>({ dialect: new PostgresDialect({ pool: db.pool }) }).withSchema(db.schema);
    return Promise.resolve({
      store,
      async insertOrder(tx: pg.PoolClient, key: string, amount: number) {
        const orders = new Kysely<Tables>({ dialect: new PostgresDialect({ pool: poolOf(tx) }) }).withSchema(db.schema);
        const row = await orders.insertInto('orders').values({ key, amount }).returning('id').executeTakeFirstOrThrow();
        return row.id;
      },
      async committedOrders(key: string) {
        const row = await reader.selectFrom('orders').select((eb) => eb.fn.countAll<string>().as('n')).where('key', '=', key).executeTakeFirstOrThrow();
        return Number(row.n);
      },
      close: () => store.close(),
    });
  });
});
