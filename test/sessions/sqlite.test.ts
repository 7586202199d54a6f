import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import BetterSqlite3 from 'better-sqlite3';
import { afterAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/core/clock.js';
import { createSessionReceiver, createSqliteSessionStore, SessionRequestInProgressError } from '../../src/sessions/index.js';
import { createSqliteStore } from '../../src/stores/sqlite/index.js';
import { sessionSuite } from './contract.js';

sessionSuite('the SQLite store', () => createSqliteSessionStore());

describe('SQLite session store on a shared file', () => {
  const dir = mkdtempSync(join(tmpdir(), 'retrysafe-sessions-'));
  const path = join(dir, 'shared.db');
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('lives beside the idempotency store in one file, and two connections see one session state', async () => {
    const records = createSqliteStore({ path });
    const first = createSqliteSessionStore({ path });
    const second = createSqliteSessionStore({ database: new BetterSqlite3(path) });
    try {
      const clock = new ManualClock(0);
      const a = createSessionReceiver({ store: first, clock });
      const b = createSessionReceiver({ store: second, clock });
      const clientId = await a.register();
      let executions = 0;
      let release = (): void => undefined;
      const held = new Promise<void>((resolve) => (release = resolve));
      const request = { clientId, requestNumber: 1, lowWaterMark: 0 };
      const running = a.apply(request, async () => {
        executions++;
        await held;
        return 'from a';
      });
      await expect(b.apply(request, () => Promise.resolve('from b'))).rejects.toBeInstanceOf(SessionRequestInProgressError);
      release();
      expect(await running).toEqual({ value: 'from a', replayed: false, saved: true });
      expect(await b.apply(request, () => Promise.resolve('from b'))).toEqual({ value: 'from a', replayed: true, saved: true });
      expect(executions).toBe(1);
      await b.keepAlive(clientId, 1);
      expect(await a.stats(clientId)).toMatchObject({ storedResponses: 0, lowWaterMark: 1 });
      const claimed = await records.claim({ scope: 's', key: 'k', fingerprint: 'f', leaseMs: 1_000, retentionMs: 10_000 });
      expect(claimed.acquired).toBe(true);
    } finally {
      await first.close();
      await second.close();
      await records.close();
    }
  });

  it('migrates idempotently: reopening keeps the sessions', async () => {
    const store = createSqliteSessionStore({ path, table: 'other_sessions' });
    const receiver = createSessionReceiver({ store, clock: new ManualClock(0) });
    const clientId = await receiver.register();
    await store.close();
    const reopened = createSqliteSessionStore({ path, table: 'other_sessions' });
    try {
      expect(await createSessionReceiver({ store: reopened, clock: new ManualClock(0) }).stats(clientId)).toMatchObject({
        state: 'live',
      });
    } finally {
      await reopened.close();
    }
  });

  it.each<[string, Parameters<typeof createSqliteSessionStore>[0]]>([
    ['path', { path: '' }],
    ['table', { table: 'bad-name' }],
    ['busyTimeoutMs', { busyTimeoutMs: 0 }],
    ['clock', { clock: {} as ManualClock }],
    ['database', { database: {} as BetterSqlite3.Database }],
    ['path', { path: ':memory:', database: new BetterSqlite3(':memory:') }],
  ])('throws a TypeError naming %s', (name, options) => {
    expect(() => createSqliteSessionStore(options)).toThrow(TypeError);
    expect(() => createSqliteSessionStore(options)).toThrow(`"${name}"`);
  });
});
