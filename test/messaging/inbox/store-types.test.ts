/**
 * `createInbox` takes an inbox store of either shape at compile time: one implementing `InboxStore` (the
 * built-in stores too), or a store written before the rename that implements only the first names
 * (`LegacyInboxStore`: `requestReplay`, `pendingReplays`, `cleanup`, dead letters with
 * `replayRequestedAt`), as an object literal, a class or a typed value; and the transaction handle is
 * still inferred from the store. `npm run typecheck` fails on these assertions if the types regress; the
 * run checks that such a store really drives the inbox.
 */
import type { Database } from 'better-sqlite3';
import pg from 'pg';
import { describe, expect, expectTypeOf, it } from 'vitest';
import {
  createInbox,
  createPostgresInboxStore,
  createSqliteInboxStore,
  inboxProcessor,
  type DeadLetter,
  type Inbox,
  type InboxOptions,
  type InboxStore,
  type LegacyInboxStore,
} from '../../../src/messaging/inbox/index.js';

/** A store of one's own, written against the first names, over the built-in SQLite store. */
class FirstNamesStore implements LegacyInboxStore<Database> {
  constructor(private readonly inner = createSqliteInboxStore()) {}
  begin(...args: Parameters<InboxStore<Database>['begin']>) {
    return this.inner.begin(...args);
  }
  process(...args: Parameters<InboxStore<Database>['process']>) {
    return this.inner.process(...args);
  }
  fail(...args: Parameters<InboxStore<Database>['fail']>) {
    return this.inner.fail(...args);
  }
  /** Its dead letters carry the field's first name only. */
  async deadLetters(consumer: string | undefined, limit: number): Promise<Omit<DeadLetter, 'redriveRequestedAt'>[]> {
    return (await this.inner.deadLetters(consumer, limit)).map(({ redriveRequestedAt, ...letter }) => ({ ...letter, replayRequestedAt: redriveRequestedAt }));
  }
  requestReplay(consumer: string, messageId: string, now: number): Promise<boolean> {
    return this.inner.requestRedrive(consumer, messageId, now);
  }
  async pendingReplays(consumer: string, limit: number): Promise<Omit<DeadLetter, 'redriveRequestedAt'>[]> {
    return (await this.inner.pendingRedrives(consumer, limit)).map(({ redriveRequestedAt, ...letter }) => ({ ...letter, replayRequestedAt: redriveRequestedAt }));
  }
  cleanup(before: number, limit: number): Promise<number> {
    return this.inner.reap(before, limit);
  }
  close(): Promise<void> {
    return this.inner.close();
  }
}

describe('the store option of createInbox, at compile time', () => {
  it('takes the built-in stores, and infers the handle from them', async () => {
    const sqlite = createSqliteInboxStore();
    expectTypeOf(createInbox({ store: sqlite })).toEqualTypeOf<Inbox<Database>>();
    // The pool connects lazily: typing the inbox needs no server.
    const pool = new pg.Pool({ connectionString: 'postgres://127.0.0.1:1/none' });
    expectTypeOf(createInbox({ store: createPostgresInboxStore({ pool }) })).toEqualTypeOf<Inbox<pg.PoolClient>>();
    await Promise.all([sqlite.close(), pool.end()]);
  });

  it('takes a store of one’s own of either shape: the current names, or only the first names (class, literal or typed value)', async () => {
    const legacy: LegacyInboxStore<Database> = new FirstNamesStore();
    const current: InboxStore<Database> = createSqliteInboxStore();
    const literal = new FirstNamesStore();
    expectTypeOf(createInbox({ store: legacy })).toEqualTypeOf<Inbox<Database>>();
    expectTypeOf(createInbox({ store: current })).toEqualTypeOf<Inbox<Database>>();
    expectTypeOf(
      createInbox({
        store: {
          begin: literal.begin.bind(literal),
          process: literal.process.bind(literal),
          fail: literal.fail.bind(literal),
          deadLetters: literal.deadLetters.bind(literal),
          requestReplay: literal.requestReplay.bind(literal),
          pendingReplays: literal.pendingReplays.bind(literal),
          cleanup: literal.cleanup.bind(literal),
          close: literal.close.bind(literal),
        },
      }),
    ).toEqualTypeOf<Inbox<Database>>();
    expectTypeOf<LegacyInboxStore<Database>>().toMatchTypeOf<InboxOptions<Database>['store']>();
    expectTypeOf<InboxStore<Database>>().toMatchTypeOf<InboxOptions<Database>['store']>();
    await Promise.all([legacy.close(), current.close(), literal.close()]);
  });

  it('refuses a store with neither the current names nor all the first ones', () => {
    const half = { ...new FirstNamesStore(), requestReplay: undefined };
    // @ts-expect-error a store must implement requestRedrive, pendingRedrives and reap, or all of their first names
    expect(() => createInbox({ store: half })).toThrow(/option "store" must be an inbox store/);
  });

  it('drives the inbox through a store with only the first names, handing handlers its handle', async () => {
    const store = new FirstNamesStore();
    const inbox = createInbox({ store, maxAttempts: 1 });
    const processor = inboxProcessor(inbox, 'billing', (_message, tx) => {
      expectTypeOf(tx).toEqualTypeOf<Database>();
      return Promise.reject(new Error('down'));
    });
    expect(await processor({ id: 'm-1', headers: {}, body: new Uint8Array([1]), redelivered: false })).toBe('dead_letter');
    expect(await inbox.redrive('billing', 'm-1')).toBe(true);
    expect((await inbox.pendingRedrives('billing')).map((letter) => [letter.messageId, typeof letter.redriveRequestedAt])).toEqual([['m-1', 'number']]);
    await inbox.close();
  });
});
