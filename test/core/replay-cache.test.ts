/**
 * The receiver's replay cache (`replayCache`): completed records answer replays and 422s without a store
 * round trip, in-flight records always go to the store, entries end at the record's expiry or `maxAgeMs`,
 * and the least recently used entry goes first. The stores are real ones (memory, SQLite); a delegating
 * wrapper counts the claims that reach the store.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/core/clock.js';
import { IdempotencyKeyReusedError, LeaseLostError, RequestInProgressError } from '../../src/core/errors.js';
import type { StoredResponse } from '../../src/core/record.js';
import type { OperationId } from '../../src/core/receiver.js';
import { ReplayCache } from '../../src/core/replay-cache.js';
import type { IdempotencyStore, TransactionalStore } from '../../src/core/store.js';
import { createReceiver } from '../../src/receiver.js';
import { createMemoryStore } from '../../src/stores/memory.js';
import { createSqliteStore, type SqliteStore } from '../../src/stores/sqlite/index.js';
import { gate } from '../support/http.js';

const FP_A = 'a'.repeat(64);
const FP_B = 'b'.repeat(64);
const RETENTION_MS = 3_600_000;

function response(body: string): StoredResponse {
  return { status: 201, headers: { 'content-type': 'application/json' }, body: new TextEncoder().encode(body) };
}

/** `store` with its `claim` and `claimTransaction` calls counted; every call still goes to the real store. */
function counted<S extends IdempotencyStore>(store: S): { store: S; claims: () => number } {
  let claims = 0;
  const wrapper = Object.create(store) as S;
  for (const name of ['claim', 'claimTransaction'] as const) {
    const real = (store as Partial<TransactionalStore<unknown>>)[name];
    if (typeof real !== 'function') continue;
    Object.defineProperty(wrapper, name, {
      value: (...args: unknown[]) => {
        claims++;
        return (real as (...a: unknown[]) => unknown).apply(store, args);
      },
    });
  }
  return { store: wrapper, claims: () => claims };
}

/** Work that answers `{"run":n}` on its n-th run, and how many runs it had. */
function numberedWork(): { work: () => Promise<StoredResponse>; runs: () => number } {
  let runs = 0;
  return {
    work: () => {
      runs++;
      return Promise.resolve(response(`{"run":${runs}}`));
    },
    runs: () => runs,
  };
}

describe('the receiver with a replay cache', () => {
  let clock: ManualClock;

  beforeEach(() => {
    clock = new ManualClock(1_700_000_000_000);
  });

  it('answers the first retry from the record it completed, with the same bytes', async () => {
    const { store, claims } = counted(createMemoryStore({ clock }));
    const receiver = createReceiver({ store, clock, retentionMs: RETENTION_MS, replayCache: { maxEntries: 10 } });
    const id: OperationId = { scope: 's', key: 'k', fingerprint: FP_A };
    const { work, runs } = numberedWork();
    await receiver.execute(id, work);
    const replays = [];
    for (let i = 0; i < 5; i++) replays.push(await receiver.execute(id, work));
    expect(runs()).toBe(1);
    expect(claims()).toBe(1);
    for (const replay of replays) {
      expect(replay).toMatchObject({ replayed: true, saved: true });
      expect(new TextDecoder().decode(replay.response.body)).toBe('{"run":1}');
    }
  });

  it('keeps its own copy of a response it completed: the caller changing the bytes changes no replay', async () => {
    const receiver = createReceiver({ store: createMemoryStore({ clock }), clock, replayCache: { maxEntries: 10 } });
    const id: OperationId = { scope: 's', key: 'k', fingerprint: FP_A };
    const first = await receiver.execute(id, () => Promise.resolve(response('{"run":1}')));
    first.response.body.fill(0x20);
    const replay = await receiver.execute(id, () => Promise.resolve(response('{"run":2}')));
    expect(new TextDecoder().decode(replay.response.body)).toBe('{"run":1}');
    expect(Object.isFrozen(replay.response)).toBe(true);
  });

  it('asks the store once for a record another process completed, then replays it from the cache', async () => {
    const shared = createMemoryStore({ clock });
    const other = createReceiver({ store: shared, clock, retentionMs: RETENTION_MS });
    const { store, claims } = counted(shared);
    const receiver = createReceiver({ store, clock, retentionMs: RETENTION_MS, replayCache: { maxEntries: 10 } });
    const id: OperationId = { scope: 's', key: 'k', fingerprint: FP_A };
    const { work, runs } = numberedWork();
    await other.execute(id, work);
    for (let i = 0; i < 4; i++) expect(await receiver.execute(id, work)).toMatchObject({ replayed: true });
    expect(runs()).toBe(1);
    expect(claims()).toBe(1);
  });

  it('leaves out a record it completed after a takeover (its first claim time is unknown here)', async () => {
    const { store, claims } = counted(createMemoryStore({ clock }));
    const receiver = createReceiver({ store, clock, leaseMs: 1_000, retentionMs: RETENTION_MS, replayCache: { maxEntries: 10 } });
    const id: OperationId = { scope: 's', key: 'k', fingerprint: FP_A };
    const hold = gate();
    let started = false;
    const crashed = receiver.execute(id, async () => {
      started = true;
      await hold.promise;
      return response('{"late":true}');
    });
    while (!started) await new Promise((resolve) => setImmediate(resolve));
    clock.advance(1_000);
    const { work } = numberedWork();
    expect(await receiver.execute(id, work)).toMatchObject({ replayed: false, saved: true });
    expect(claims()).toBe(2);
    expect(await receiver.execute(id, work)).toMatchObject({ replayed: true });
    expect(claims()).toBe(3);
    expect(await receiver.execute(id, work)).toMatchObject({ replayed: true });
    expect(claims()).toBe(3);
    hold.open();
    await expect(crashed).rejects.toBeInstanceOf(LeaseLostError);
  });

  it('answers a key reused with another fingerprint (422) from the cache as the store would', async () => {
    const { store, claims } = counted(createMemoryStore({ clock }));
    const receiver = createReceiver({ store, clock, retentionMs: RETENTION_MS, replayCache: { maxEntries: 10 } });
    await receiver.execute({ scope: 's', key: 'k', fingerprint: FP_A }, () => Promise.resolve(response('{}')));
    await receiver.execute({ scope: 's', key: 'k', fingerprint: FP_A }, () => Promise.resolve(response('{}')));
    const before = claims();
    await expect(receiver.execute({ scope: 's', key: 'k', fingerprint: FP_B }, () => Promise.resolve(response('{}')))).rejects.toBeInstanceOf(
      IdempotencyKeyReusedError,
    );
    expect(claims()).toBe(before);
  });

  it('never caches a record in flight: every duplicate asks the store and is answered 409', async () => {
    const { store, claims } = counted(createMemoryStore({ clock }));
    const receiver = createReceiver({ store, clock, retentionMs: RETENTION_MS, replayCache: { maxEntries: 10 } });
    const id: OperationId = { scope: 's', key: 'k', fingerprint: FP_A };
    const hold = gate();
    let runs = 0;
    const original = receiver.execute(id, async () => {
      runs++;
      await hold.promise;
      return response('{}');
    });
    while (runs === 0) await new Promise((resolve) => setImmediate(resolve));
    for (let i = 0; i < 3; i++) {
      await expect(receiver.execute(id, () => Promise.resolve(response('{}')))).rejects.toBeInstanceOf(RequestInProgressError);
    }
    expect(claims()).toBe(4);
    hold.open();
    await original;
    expect(runs).toBe(1);
  });

  it('drops an entry at the record expiry: the store then lets the key run again', async () => {
    const { store, claims } = counted(createMemoryStore({ clock }));
    const receiver = createReceiver({ store, clock, leaseMs: 1_000, retentionMs: 10_000, replayCache: { maxEntries: 10, maxAgeMs: 60_000 } });
    const id: OperationId = { scope: 's', key: 'k', fingerprint: FP_A };
    const { work, runs } = numberedWork();
    await receiver.execute(id, work);
    await receiver.execute(id, work);
    clock.advance(9_999);
    expect(await receiver.execute(id, work)).toMatchObject({ replayed: true });
    expect(claims()).toBe(1);
    clock.advance(1);
    expect(await receiver.execute(id, work)).toMatchObject({ replayed: false });
    expect(runs()).toBe(2);
    expect(claims()).toBe(2);
  });

  it('keeps the least recently used entries out first', () => {
    const cache = new ReplayCache({ maxEntries: 2 });
    const now = 1_000;
    const record = (key: string) =>
      ({
        scope: 's',
        key,
        fingerprint: FP_A,
        state: 'completed',
        leaseToken: 't',
        leaseExpiresAt: now,
        createdAt: now,
        completedAt: now,
        expiresAt: now + RETENTION_MS,
        response: response('{}'),
      }) as const;
    cache.remember(record('a'), now);
    cache.remember(record('b'), now);
    expect(cache.get('s', 'a', now)?.key).toBe('a');
    cache.remember(record('c'), now);
    expect(cache.size).toBe(2);
    expect(cache.get('s', 'b', now)).toBeUndefined();
    expect(cache.get('s', 'a', now)?.key).toBe('a');
    expect(cache.get('s', 'c', now)?.key).toBe('c');
    // (scope, key) pairs that would collide if joined naively stay apart.
    cache.remember({ ...record('b:c'), scope: 'a' }, now);
    expect(cache.get('a:b', 'c', now)).toBeUndefined();
  });

  it('refuses invalid options with a TypeError naming them', () => {
    const store = createMemoryStore();
    expect(createReceiver({ store, replayCache: { maxEntries: 10 } }).options.replayCache).toEqual({ maxEntries: 10, maxAgeMs: 60_000 });
    expect(createReceiver({ store }).options.replayCache).toBeUndefined();
    expect(() => createReceiver({ store, replayCache: { maxEntries: 0 } })).toThrow(/replayCache\.maxEntries/);
    expect(() => createReceiver({ store, replayCache: { maxEntries: 10, maxAgeMs: -1 } })).toThrow(/replayCache\.maxAgeMs/);
    expect(() => createReceiver({ store, replayCache: null as unknown as { maxEntries: number } })).toThrow(/"replayCache" must be an object/);
    expect(() => createReceiver({ store, replayCache: 5 as unknown as { maxEntries: number } })).toThrow(/"replayCache" must be an object/);
  });
});

describe('the replay cache on SQLite', () => {
  let dir: string;
  let sqlite: SqliteStore;

  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'rs-replay-cache-'));
    sqlite = createSqliteStore({ path: join(dir, 'records.db') });
  });

  afterEach(async () => {
    await sqlite.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('replays a record deleted in the database until maxAgeMs, then asks the store again', async () => {
    const clock = new ManualClock(Date.now());
    const { store, claims } = counted(sqlite);
    const receiver = createReceiver({ store, clock, replayCache: { maxEntries: 10, maxAgeMs: 5_000 } });
    const id: OperationId = { scope: 's', key: 'k', fingerprint: FP_A };
    const { work, runs } = numberedWork();
    await receiver.execute(id, work);
    await receiver.execute(id, work);
    // An operator deletes the key behind this process's back.
    expect(sqlite.database.prepare('DELETE FROM retrysafe_records WHERE idempotency_key = ?').run('k').changes).toBe(1);
    clock.advance(4_999);
    expect(await receiver.execute(id, work)).toMatchObject({ replayed: true });
    expect(claims()).toBe(1);
    clock.advance(1);
    const after = await receiver.execute(id, work);
    expect(after).toMatchObject({ replayed: false, saved: true });
    expect(new TextDecoder().decode(after.response.body)).toBe('{"run":2}');
    expect(runs()).toBe(2);
    expect(claims()).toBe(2);
  });

  it('in transactional mode, caches the record once the transaction committed', async () => {
    const { store, claims } = counted(sqlite);
    const receiver = createReceiver({ store, transactional: true, replayCache: { maxEntries: 10 } });
    sqlite.database.exec('CREATE TABLE charges (key TEXT NOT NULL)');
    const id: OperationId = { scope: 's', key: 'k', fingerprint: FP_A };
    const charge = () =>
      receiver.execute(id, ({ tx }) => {
        tx.prepare('INSERT INTO charges (key) VALUES (?)').run('k');
        return Promise.resolve(response('{"charged":true}'));
      });
    expect(await charge()).toMatchObject({ replayed: false, saved: true });
    for (let i = 0; i < 3; i++) expect(await charge()).toMatchObject({ replayed: true });
    expect(claims()).toBe(1);
    expect(sqlite.database.prepare('SELECT count(*) AS n FROM charges').get()).toEqual({ n: 1 });
  });

  it('without the option, every replay asks the store', async () => {
    const { store, claims } = counted(sqlite);
    const receiver = createReceiver({ store });
    const id: OperationId = { scope: 's', key: 'k', fingerprint: FP_A };
    for (let i = 0; i < 4; i++) await receiver.execute(id, () => Promise.resolve(response('{}')));
    expect(claims()).toBe(4);
  });
});
