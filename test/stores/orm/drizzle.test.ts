/**
 * Drizzle over the request's transaction (docs/orm.md): `drizzle(tx)` on the PostgreSQL store's
 * `PoolClient` and on the SQLite store's better-sqlite3 `Database`.
 */
import Database from 'better-sqlite3';
import { count, eq } from 'drizzle-orm';
import { drizzle as drizzlePostgres } from 'drizzle-orm/node-postgres';
import { integer, pgSchema, serial, text } from 'drizzle-orm/pg-core';
import { drizzle as drizzleSqlite } from 'drizzle-orm/better-sqlite3';
import { integer as sqliteInteger, sqliteTable, text as sqliteText } from 'drizzle-orm/sqlite-core';
import type pg from 'pg';
import { describe } from 'vitest';
import { createPostgresStore } from '../../../src/stores/postgres/index.js';
import { postgresAvailable } from '../../support/postgres-schema.js';
import { openSqliteOrders, ormScenarios, useOrdersSchema } from './suite.js';

const sqliteOrders = sqliteTable('orders', {
  id: sqliteInteger('id').primaryKey({ autoIncrement: true }),
  key: sqliteText('key').notNull(),
  amount: sqliteInteger('amount').notNull(),
});

ormScenarios('Drizzle on SQLite (better-sqlite3)', () => {
  const { path, store, remove } = openSqliteOrders('retrysafe-drizzle-');
  // Another connection sees only what was committed.
  const reader = new Database(path, { readonly: true });
  return Promise.resolve({
    store,
    insertOrder(tx: Database.Database, key: string, amount: number) {
      const db = drizzleSqlite(tx);
      const row = db.insert(sqliteOrders).values({ key, amount }).returning({ id: sqliteOrders.id }).get();
      return Promise.resolve(row.id);
    },
    committedOrders(key: string) {
      const [row] = drizzleSqlite(reader).select({ n: count() }).from(sqliteOrders).where(eq(sqliteOrders.key, key)).all();
      return Promise.resolve(row?.n ?? -1);
    },
    async close() {
      reader.close();
      await store.close();
      remove();
    },
  });
});

describe.runIf(await postgresAvailable())('PostgreSQL', () => {
  const ordersSchema = useOrdersSchema('rs_drizzle');
  const ordersOf = (schema: string) =>
    pgSchema(schema).table('orders', { id: serial('id').primaryKey(), key: text('key').notNull(), amount: integer('amount').notNull() });

  ormScenarios('Drizzle on PostgreSQL (node-postgres)', () => {
    const db = ordersSchema();
    const store = createPostgresStore({ pool: db.pool, schema: db.schema });
    const orders = ordersOf(db.schema);
    return Promise.resolve({
      store,
      async insertOrder(tx: pg.PoolClient, key: string, amount: number) {
        const [row] = await drizzlePostgres(tx).insert(orders).values({ key, amount }).returning({ id: orders.id });
        return row?.id ?? -1;
      },
      async committedOrders(key: string) {
        const [row] = await drizzlePostgres(db.pool).select({ n: count() }).from(orders).where(eq(orders.key, key));
        return row?.n ?? -1;
      },
      close: () => store.close(),
    });
  });
});
