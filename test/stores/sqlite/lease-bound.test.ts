/**
 * No transaction outlives its lease (SQLite transactional mode): a handler that writes and then hangs past
 * its lease is answered with a `LeaseLostError`, its transaction rolled back and the single connection
 * handed on, so other requests are served while it still hangs; its late writes throw instead of landing.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Statement } from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { LeaseLostError, StoreMisuseError } from '../../../src/core/errors.js';
import { createReceiver } from '../../../src/receiver.js';
import { createSqliteStore, type SqliteStore } from '../../../src/stores/sqlite/index.js';
import { gate } from '../../support/http.js';

const LEASE_MS = 300;
const HANG_MS = 20_000;
const FP = 'a'.repeat(64);

describe('a transaction bounded by its lease (SQLite)', () => {
  let dir: string;
  let store: SqliteStore;

  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'rs-sqlite-lease-'));
    store = createSqliteStore({ path: join(dir, 'records.db') });
    store.database.exec('CREATE TABLE payments (key TEXT NOT NULL)');
  });

  afterEach(async () => {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('rolls a hung handler back at its lease end and serves the next request while it still hangs', async () => {
    const receiver = createReceiver({ store, transactional: true, leaseMs: LEASE_MS, maxExecutionMs: LEASE_MS });
    const hang = gate();
    const hangTimer = setTimeout(() => hang.open(), HANG_MS);
    const late: unknown[] = [];
    try {
      const started = performance.now();
      const hung = receiver.run({ scope: 's', key: 'hung', fingerprint: FP }, async ({ tx }) => {
        const insert: Statement = tx.prepare('INSERT INTO payments (key) VALUES (?)');
        insert.run('hung');
        await hang.promise;
        // Each late use of the handle: a statement prepared before the deadline, a new one, a transaction function.
        for (const attempt of [() => insert.run('late-1'), () => tx.prepare("INSERT INTO payments (key) VALUES ('late-2')").run(), () => tx.transaction(() => undefined)()]) {
          try {
            attempt();
            late.push('written');
          } catch (error) {
            late.push(error);
          }
        }
        return 'hung';
      });
      const lost = expect(hung).rejects.toBeInstanceOf(LeaseLostError);
      // Queued behind the hung transaction on the one connection; served once the lease has ended.
      const next = await receiver.run({ scope: 's', key: 'next', fingerprint: FP }, ({ tx }) => {
        tx.prepare('INSERT INTO payments (key) VALUES (?)').run('next');
        return Promise.resolve('served');
      });
      const servedAfter = performance.now() - started;
      expect(next).toBe('served');
      await lost;
      expect(servedAfter).toBeGreaterThanOrEqual(LEASE_MS - 20);
      expect(servedAfter).toBeLessThan(HANG_MS / 2);
      expect(store.database.prepare('SELECT key FROM payments ORDER BY key').pluck().all()).toEqual(['next']);
      // The rolled-back claim is gone with the transaction: the retry runs at once.
      expect(await receiver.run({ scope: 's', key: 'hung', fingerprint: FP }, () => Promise.resolve('retried'))).toBe('retried');

      hang.open();
      while (late.length < 3) await new Promise((resolve) => setTimeout(resolve, 5));
      for (const outcome of late) expect(outcome).toBeInstanceOf(StoreMisuseError);
      expect(store.database.prepare('SELECT key FROM payments ORDER BY key').pluck().all()).toEqual(['next']);
      expect(store.database.inTransaction).toBe(false);
    } finally {
      clearTimeout(hangTimer);
      hang.open();
    }
  });

  it('hands the handler a connection that works as the store\'s own until the lease ends', async () => {
    const receiver = createReceiver({ store, transactional: true, leaseMs: 5_000 });
    const keys = await receiver.run({ scope: 's', key: 'ok', fingerprint: FP }, ({ tx }) => {
      tx.prepare('INSERT INTO payments (key) VALUES (?)').run('ok');
      const inner = tx.transaction((key: string) => tx.prepare('INSERT INTO payments (key) VALUES (?)').run(key));
      inner.immediate('nested');
      expect(tx.inTransaction).toBe(true);
      return Promise.resolve(tx.prepare('SELECT key FROM payments ORDER BY key').pluck().all());
    });
    expect(keys).toEqual(['nested', 'ok']);
  });
});
