/**
 * The transaction handle is typed by the store: a transactional receiver over SQLite hands its work the
 * better-sqlite3 `Database`, over PostgreSQL the `pg` `PoolClient`, and a plain receiver no transaction
 * at all. `npm run typecheck` fails on these assertions if the types regress (to `unknown`, `any`, or a
 * handle on a plain receiver); the run checks the handle is the store's real one.
 */
import type { Database } from 'better-sqlite3';
import type pg from 'pg';
import { describe, expect, expectTypeOf, it } from 'vitest';
import { createMemoryStore } from '../../src/stores/memory.js';
import { type ExecutionContext, type Receiver } from '../../src/core/receiver.js';
import { createReceiver } from '../../src/receiver.js';
import { createPostgresStore } from '../../src/stores/postgres/index.js';
import { createSqliteStore } from '../../src/stores/sqlite/index.js';
import type { IdempotencyStore, TransactionalStore } from '../../src/core/store.js';

const FP = 'd'.repeat(64);

describe('the transaction handle is typed by the store', () => {
  it('SQLite in transactional mode: the work gets a better-sqlite3 Database on the connection the store runs on', async () => {
    const store = createSqliteStore({ path: ':memory:' });
    try {
      const receiver = createReceiver({ store, transactional: true });
      expectTypeOf(receiver).toEqualTypeOf<Receiver<Database>>();
      const inTransaction = await receiver.run({ scope: 's', key: 'k', fingerprint: FP }, (context) => {
        expectTypeOf(context).toEqualTypeOf<ExecutionContext<Database>>();
        expectTypeOf(context.tx).toEqualTypeOf<Database>();
        // A revocable handle on the store's connection (revoked when the lease ends): the same database.
        expect(context.tx.name).toBe(store.database.name);
        expect(context.tx.prepare('PRAGMA database_list').all()).toEqual(store.database.prepare('PRAGMA database_list').all());
        return Promise.resolve(context.tx.inTransaction);
      });
      expect(inTransaction).toBe(true);
    } finally {
      await store.close();
    }
  });

  it('PostgreSQL in transactional mode: the work gets a pg PoolClient', async () => {
    // The pool connects lazily: typing the receiver needs no server.
    const store = createPostgresStore({ connectionString: 'postgres://127.0.0.1:1/none' });
    try {
      const receiver = createReceiver({ store, transactional: true });
      expectTypeOf(receiver).toEqualTypeOf<Receiver<pg.PoolClient>>();
      expectTypeOf<Parameters<typeof receiver.run<number>>[1]>().parameter(0).toEqualTypeOf<ExecutionContext<pg.PoolClient>>();
      expectTypeOf<Parameters<typeof receiver.execute>[1]>().parameter(0).toHaveProperty('tx').toEqualTypeOf<pg.PoolClient>();
    } finally {
      await store.close();
    }
  });

  it('plain mode (a transactional-capable store too): the work gets no transaction', async () => {
    const sqlite = createSqliteStore({ path: ':memory:' });
    try {
      const overSqlite = createReceiver({ store: sqlite });
      const overMemory = createReceiver({ store: createMemoryStore(), transactional: false });
      expectTypeOf(overSqlite).toEqualTypeOf<Receiver<undefined>>();
      expectTypeOf(overMemory).toEqualTypeOf<Receiver<undefined>>();
      const tx = await overSqlite.run({ scope: 's', key: 'k', fingerprint: FP }, (context) => {
        expectTypeOf(context.tx).toEqualTypeOf<undefined>();
        // @ts-expect-error plain mode hands out no transaction to write through
        expectTypeOf(context.tx).toHaveProperty('prepare');
        return Promise.resolve(context.tx === undefined ? 'none' : 'some');
      });
      expect(tx).toBe('none');
    } finally {
      await sqlite.close();
    }
  });

  it('transactional mode needs a store with transactions, at compile time too', () => {
    const store: IdempotencyStore = createMemoryStore();
    // @ts-expect-error a plain store cannot back transactional mode
    expect(() => createReceiver({ store, transactional: true })).toThrow(TypeError);
  });

  it('a store declared through the contract keeps its handle type', () => {
    expectTypeOf<Receiver<Database>>().toMatchTypeOf<Receiver<unknown>>();
    type Handle<S> = S extends TransactionalStore<infer Tx> ? Tx : never;
    expectTypeOf<Handle<ReturnType<typeof createSqliteStore>>>().toEqualTypeOf<Database>();
    expectTypeOf<Handle<ReturnType<typeof createPostgresStore>>>().toEqualTypeOf<pg.PoolClient>();
  });
});
