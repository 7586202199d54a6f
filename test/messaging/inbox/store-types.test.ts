/**
 * `createInbox` takes an inbox store implementing `InboxStore` (the built-in stores too), as an object
 * literal, a class or a typed value, and the transaction handle is inferred from the store. `npm run
 * typecheck` fails on these assertions if the types regress.
 */
import type { Database } from 'better-sqlite3';
import pg from 'pg';
import { describe, expect, expectTypeOf, it } from 'vitest';
import { createInbox, createPostgresInboxStore, createSqliteInboxStore, type Inbox, type InboxOptions, type InboxStore } from '../../../src/messaging/inbox/index.js';

describe('the store option of createInbox, at compile time', () => {
  it('takes the built-in stores, and infers the handle from them', async () => {
    const sqlite = createSqliteInboxStore();
    expectTypeOf(createInbox({ store: sqlite })).toEqualTypeOf<Inbox<Database>>();
    // The pool connects lazily: typing the inbox needs no server.
    const pool = new pg.Pool({ connectionString: 'postgres://127.0.0.1:1/none' });
    expectTypeOf(createInbox({ store: createPostgresInboxStore({ pool }) })).toEqualTypeOf<Inbox<pg.PoolClient>>();
    await Promise.all([sqlite.close(), pool.end()]);
  });

  it('takes a store of one’s own (literal or typed value)', async () => {
    const current: InboxStore<Database> = createSqliteInboxStore();
    const inner = createSqliteInboxStore();
    expectTypeOf(createInbox({ store: current })).toEqualTypeOf<Inbox<Database>>();
    expectTypeOf(
      createInbox({
        store: {
          begin: inner.begin.bind(inner),
          process: inner.process.bind(inner),
          fail: inner.fail.bind(inner),
          deadLetters: inner.deadLetters.bind(inner),
          requestRedrive: inner.requestRedrive.bind(inner),
          pendingRedrives: inner.pendingRedrives.bind(inner),
          reap: inner.reap.bind(inner),
          close: inner.close.bind(inner),
        },
      }),
    ).toEqualTypeOf<Inbox<Database>>();
    expectTypeOf<InboxStore<Database>>().toMatchTypeOf<InboxOptions<Database>['store']>();
    await Promise.all([current.close(), inner.close()]);
  });

  it('refuses a store without every method of InboxStore', async () => {
    const inner = createSqliteInboxStore();
    const half = {
      begin: inner.begin.bind(inner),
      process: inner.process.bind(inner),
      fail: inner.fail.bind(inner),
      deadLetters: inner.deadLetters.bind(inner),
      pendingRedrives: inner.pendingRedrives.bind(inner),
      reap: inner.reap.bind(inner),
      close: inner.close.bind(inner),
    };
    // @ts-expect-error a store must implement requestRedrive
    expect(() => createInbox({ store: half })).toThrow(/option "store" must be an inbox store/);
    await inner.close();
  });
});
