/**
 * Kysely over the request's transaction (docs/orm.md): a `PostgresDialect` over `poolOf(tx)` on the
 * PostgreSQL store's `PoolClient`, and a `SqliteDialect` over the SQLite store's better-sqlite3 `Database`.
 */
import Database from 'better-sqlite3';
import { Kysely, PostgresDialect, SqliteDialect, type Generated } from 'kysely';
import type pg from 'pg';
import { describe } from 'vitest';
import { createPostgresStore, poolOf } from '../../../src/stores/postgres/index.js';
import { postgresAvailable } from '../../support/postgres-schema.js';
import { openSqliteOrders, ormScenarios, useOrdersSchema } from './suite.js';

interface Tables {
  orders: { id: Generated<number>; key: string; amount: number };
}

ormScenarios('Kysely on SQLite (better-sqlite3)', () => {
  const { path, store, remove } = openSqliteOrders('retrysafe-kysely-');
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
      remove();
    },
  });
});

describe.runIf(await postgresAvailable())('PostgreSQL', () => {
  const ordersSchema = useOrdersSchema('rs_kysely');

  ormScenarios('Kysely on PostgreSQL (node-postgres)', () => {
    const db = ordersSchema();
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
