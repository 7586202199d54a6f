/**
 * A `shouldPersist` that throws once the work has run decides `true`: the response is saved (the record is
 * completed, so no lease is left in progress and the keep-alive stops), sent to the first caller, replayed to
 * a retry without running the work again, and the throw is logged as `should_persist_threw`. Plain mode on
 * the memory store (the work answering in the same turn and later), and transactional mode on SQLite (the
 * work's row commits with the saved response).
 */
import { randomUUID } from 'node:crypto';
import type { Database } from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import type { StoredResponse } from '../../src/core/record.js';
import { keyHash } from '../../src/index.js';
import { createReceiver } from '../../src/receiver.js';
import { createMemoryStore } from '../../src/stores/memory.js';
import { renewalCountingStore, sleep } from '../support/renewal-counting-store.js';
import { createSqliteStore } from '../../src/stores/sqlite/index.js';
import { capturingLogger } from '../support/telemetry.js';

const FP = 'd'.repeat(64);
const LEASE_MS = 300;

/** The user's bug: a persistence rule that throws. */
function throwingRule(): boolean {
  throw new RangeError('shouldPersist bug');
}

const response = (byte: number): StoredResponse => ({ status: 201, headers: { 'content-type': 'application/octet-stream' }, body: Uint8Array.of(byte) });

describe('a shouldPersist that throws', () => {
  // 'later' outlasts two keep-alive ticks (a third of the lease each), so its lease is renewed while it runs.
  it.each([
    ['in the same turn', 0],
    ['later', LEASE_MS],
  ])('plain mode, the work answering %s: saved, sent, replayed to a retry, logged; no lease left', async (_when, workMs) => {
    const { logger, lines } = capturingLogger();
    const { store, renewals } = renewalCountingStore();
    const receiver = createReceiver({ store, leaseMs: LEASE_MS, shouldPersist: throwingRule, logger });
    const id = { scope: 'persist', key: randomUUID(), fingerprint: FP };
    let runs = 0;
    const work = async (byte: number): Promise<StoredResponse> => {
      runs++;
      if (workMs > 0) await sleep(workMs);
      return response(byte);
    };
    const first = await receiver.execute(id, () => work(1));
    expect(first).toMatchObject({ replayed: false, saved: true, response: { status: 201 } });
    expect(Array.from(first.response.body)).toEqual([1]);
    expect((await store.get(id.scope, id.key))?.state).toBe('completed');

    const retry = await receiver.execute(id, () => work(2));
    expect(retry.replayed).toBe(true);
    expect(Array.from(retry.response.body)).toEqual([1]);
    expect(runs).toBe(1);

    // The keep-alive let go of the lease: no renewal after the execution ended.
    const renewed = renewals();
    await sleep(LEASE_MS);
    expect(renewals()).toBe(renewed);
    expect(lines.map((l) => [l['event'], l['level'], l['keyHash'], (l['err'] as { message?: string } | undefined)?.message])).toEqual([
      ['should_persist_threw', 50, keyHash(id.scope, id.key), 'shouldPersist bug'],
    ]);
  });

  it('run() hands back the value and a retry gets the same value without running again', async () => {
    const store = createMemoryStore();
    const receiver = createReceiver({ store, shouldPersist: throwingRule });
    const id = { scope: 'persist', key: randomUUID(), fingerprint: FP };
    let runs = 0;
    expect(await receiver.run(id, () => Promise.resolve({ charge: ++runs }))).toEqual({ charge: 1 });
    expect(await receiver.run(id, () => Promise.resolve({ charge: ++runs }))).toEqual({ charge: 1 });
    expect(runs).toBe(1);
    expect((await store.get(id.scope, id.key))?.state).toBe('completed');
  });

  it("transactional mode (SQLite): the work's row commits with the saved response; a retry replays it", async () => {
    const { logger, lines } = capturingLogger();
    const store = createSqliteStore({});
    try {
      store.database.exec('CREATE TABLE charges (idempotency_key TEXT NOT NULL)');
      const receiver = createReceiver({ store, transactional: true, shouldPersist: throwingRule, logger });
      const id = { scope: 'persist', key: randomUUID(), fingerprint: FP };
      let runs = 0;
      const work = ({ tx }: { tx: Database }, byte: number): Promise<StoredResponse> => {
        runs++;
        tx.prepare('INSERT INTO charges (idempotency_key) VALUES (?)').run(id.key);
        return Promise.resolve(response(byte));
      };
      const first = await receiver.execute(id, (context) => work(context, 1));
      expect(first).toMatchObject({ replayed: false, saved: true });
      const retry = await receiver.execute(id, (context) => work(context, 2));
      expect(retry.replayed).toBe(true);
      expect(Array.from(retry.response.body)).toEqual([1]);
      expect(runs).toBe(1);
      expect(store.database.prepare('SELECT count(*) FROM charges').pluck().get()).toBe(1);
      expect((await store.get(id.scope, id.key))?.state).toBe('completed');
      expect(lines.map((l) => l['event'])).toEqual(['should_persist_threw']);
    } finally {
      await store.close();
    }
  });
});
