import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import BetterSqlite3, { type Database } from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Claim, StoredResponse } from '../../../src/core/record.js';
import type { ClaimInput, ClaimResult } from '../../../src/core/store.js';
import { createSqliteStore, type SqliteStore } from '../../../src/stores/sqlite/index.js';

const FP = 'f'.repeat(64);
const RESPONSE: StoredResponse = { status: 201, headers: { 'content-type': 'application/json' }, body: new TextEncoder().encode('{"ok":true}') };

function input(key: string, overrides: Partial<ClaimInput> = {}): ClaimInput {
  return { scope: 'grouped', key, fingerprint: FP, leaseMs: 60_000, retentionMs: 600_000, ...overrides };
}

function won(result: ClaimResult): Claim {
  if (!result.acquired) throw new Error(`expected to acquire ${JSON.stringify(result)}`);
  return result.claim;
}

/**
 * Writes submitted while other requests are in flight commit together (group-commit.ts). These tests submit
 * many at once, so they run in groups, and check what must not change: each operation decided under the
 * write lock, answered only once committed, failing alone unless the group's transaction is lost.
 */
describe('sqlite store: writes committed in groups', () => {
  let dir: string;
  let path: string;
  let store: SqliteStore;
  let reader: Database;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'retrysafe-group-'));
    path = join(dir, 'records.db');
    store = createSqliteStore({ path });
    reader = new BetterSqlite3(path, { readonly: true });
  });
  afterEach(async () => {
    reader.close();
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const committed = (key: string): string | undefined =>
    reader.prepare<[string, string], string>('SELECT state FROM retrysafe_records WHERE scope = ? AND idempotency_key = ?').pluck().get('grouped', key);

  it('answers each claim and completion only once another connection can read it', async () => {
    const keys = Array.from({ length: 24 }, (_, i) => `k${i}`);
    const claims = await Promise.all(
      keys.map((key) =>
        store.claim(input(key)).then((result) => {
          expect(committed(key)).toBe('in_progress');
          return won(result);
        }),
      ),
    );
    await Promise.all(
      claims.map((claim) =>
        store.complete(claim, RESPONSE, 600_000).then((done) => {
          expect(done).toBe(true);
          expect(committed(claim.key)).toBe('completed');
        }),
      ),
    );
  });

  it('gives one of many concurrent claims of a key the lease, and refuses the rest with its record', async () => {
    await Promise.all(Array.from({ length: 4 }, (_, i) => store.claim(input(`warm${i}`))));
    const results = await Promise.all(Array.from({ length: 8 }, (_, i) => store.claim(input('raced', { leaseToken: `token-${i}` }))));
    const winners = results.filter((r) => r.acquired);
    expect(winners).toHaveLength(1);
    const token = won(winners[0] as ClaimResult).leaseToken;
    for (const result of results.filter((r) => !r.acquired)) {
      expect(result).toMatchObject({ acquired: false, record: { state: 'in_progress', leaseToken: token } });
    }
  });

  it('runs operations in the order they were called, reads included', async () => {
    const claims = await Promise.all(['a', 'b', 'c'].map((key) => store.claim(input(key)).then(won)));
    const [a, b] = claims as [Claim, Claim, Claim];
    const completing = store.complete(a, RESPONSE, 600_000);
    const seen = store.get('grouped', 'a');
    const duplicate = store.claim(input('a'));
    const releasing = store.release(b);
    const again = store.claim(input('b'));
    expect(await completing).toBe(true);
    expect((await seen)?.state).toBe('completed');
    expect(await duplicate).toMatchObject({ acquired: false, record: { state: 'completed', response: { status: 201 } } });
    expect(await releasing).toBe(true);
    expect((await again).acquired).toBe(true);
  });

  it('fails an operation that throws alone and commits the rest of its group', async () => {
    await Promise.all(Array.from({ length: 4 }, (_, i) => store.claim(input(`warm${i}`))));
    const outcomes = await Promise.allSettled([store.claim(input('x')), store.reap(0), store.claim(input('y'))]);
    expect(outcomes.map((o) => o.status)).toEqual(['fulfilled', 'rejected', 'fulfilled']);
    expect((outcomes[1] as PromiseRejectedResult).reason).toBeInstanceOf(TypeError);
    expect(committed('x')).toBe('in_progress');
    expect(committed('y')).toBe('in_progress');
  });

  it('fails the whole group, writing nothing, when it cannot take the write lock; the retries then run', async () => {
    const impatient = createSqliteStore({ path, busyTimeoutMs: 20 });
    const other = new BetterSqlite3(path);
    try {
      other.exec('BEGIN IMMEDIATE');
      const keys = Array.from({ length: 6 }, (_, i) => `busy${i}`);
      const outcomes = await Promise.allSettled(keys.map((key) => impatient.claim(input(key))));
      for (const outcome of outcomes) {
        expect(outcome.status).toBe('rejected');
        expect(((outcome as PromiseRejectedResult).reason as { code?: string }).code).toMatch(/^SQLITE_BUSY/);
      }
      other.exec('ROLLBACK');
      expect(impatient.database.inTransaction).toBe(false);
      for (const key of keys) expect(committed(key)).toBeUndefined();
      const retries = await Promise.all(keys.map((key) => impatient.claim(input(key))));
      expect(retries.every((r) => r.acquired)).toBe(true);
    } finally {
      other.close();
      await impatient.close();
    }
  });

  it('wakes a waiter once the group holding its completion committed', async () => {
    const claims = await Promise.all(['w1', 'w2', 'w3'].map((key) => store.claim(input(key)).then(won)));
    const waiting = store.waitFor('grouped', 'w2', 5_000);
    await new Promise((resolve) => setTimeout(resolve, 10));
    await Promise.all(claims.map((claim) => store.complete(claim, RESPONSE, 600_000)));
    expect((await waiting)?.state).toBe('completed');
  });
});
