/**
 * A claim that a standing record refuses (C5 to C7 of the claim decision table) is read at the call and
 * answered with a promise that carries its value (`settled`), so the receiver replays it in the same turn;
 * a key the record does not stand in the way of goes on to the write as before, and concurrent duplicates
 * of a new key still have exactly one winner, in one connection and across two.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../../../src/core/clock.js';
import type { StoredResponse } from '../../../src/core/record.js';
import { settledValue, UNSETTLED } from '../../../src/core/settled.js';
import type { ClaimInput, ClaimResult } from '../../../src/core/store.js';
import { createReceiver } from '../../../src/receiver.js';
import { createSqliteStore, type SqliteStore } from '../../../src/stores/sqlite/index.js';

const NOW = 1_700_000_000_000;
const FP = 'a'.repeat(64);
const LEASE_MS = 60_000;
const RETENTION_MS = 600_000;
const RESPONSE: StoredResponse = { status: 201, headers: { 'content-type': 'application/json' }, body: new TextEncoder().encode('{"id":1}') };

function input(key: string, overrides: Partial<ClaimInput> = {}): ClaimInput {
  return { scope: 'same-turn', key, fingerprint: FP, leaseMs: LEASE_MS, retentionMs: RETENTION_MS, ...overrides };
}

/** The value `promise` carries, or a failure when it carries none. */
function carried<T>(promise: Promise<T>): T {
  const value = settledValue(promise);
  if (value === UNSETTLED) throw new Error('the promise carries no value: not answered in the same turn');
  return value;
}

describe('sqlite store: a standing record answered in the same turn', () => {
  let clock: ManualClock;
  let store: SqliteStore;
  beforeEach(() => {
    clock = new ManualClock(NOW);
    store = createSqliteStore({ clock });
  });
  afterEach(async () => {
    await store.close();
  });

  async function completed(key: string): Promise<void> {
    const result = await store.claim(input(key, { leaseToken: 'owner' }));
    if (!result.acquired) throw new Error('not claimed');
    expect(await store.complete(result.claim, RESPONSE, RETENTION_MS)).toBe(true);
  }

  it('refuses a replay (C6) and another fingerprint (C5) of a completed record with the record, carried', async () => {
    await completed('k-done');
    const stored = await store.get('same-turn', 'k-done');
    const replay = carried(store.claim(input('k-done', { leaseToken: 'retry' })));
    expect(replay).toEqual({ acquired: false, record: stored });
    const reused = carried(store.claim(input('k-done', { fingerprint: 'b'.repeat(64) })));
    expect(reused).toEqual({ acquired: false, record: stored });
  });

  it('refuses a duplicate of an in-progress record under a live lease (C7), carried', async () => {
    const first = await store.claim(input('k-busy', { leaseToken: 'owner' }));
    expect(first.acquired).toBe(true);
    clock.advance(LEASE_MS - 1);
    const duplicate = carried(store.claim(input('k-busy', { leaseToken: 'duplicate' })));
    expect(duplicate.acquired).toBe(false);
    expect(!duplicate.acquired && duplicate.record).toMatchObject({ state: 'in_progress', leaseToken: 'owner' });
  });

  it('decides "stands" by the store clock: a record whose retention ends now, or whose lease ends now, is taken', async () => {
    await completed('k-expiring');
    clock.advance(RETENTION_MS);
    const replaced = await store.claim(input('k-expiring', { leaseToken: 'next' }));
    expect(replaced).toMatchObject({ acquired: true, claim: { leaseToken: 'next', takeover: false } });

    await store.claim(input('k-lease', { leaseToken: 'crashed' }));
    clock.advance(LEASE_MS);
    const takenOver = await store.claim(input('k-lease', { leaseToken: 'next' }));
    expect(takenOver).toMatchObject({ acquired: true, claim: { leaseToken: 'next', takeover: true } });
  });

  it('replays through the receiver in the call itself, and runs the work once under concurrent duplicates', async () => {
    const receiver = createReceiver({ store, leaseMs: LEASE_MS });
    const id = { scope: 'same-turn', key: 'k-http', fingerprint: FP };
    let runs = 0;
    const work = async (): Promise<StoredResponse> => {
      runs++;
      await new Promise((resolve) => setTimeout(resolve, 5));
      return RESPONSE;
    };
    const outcomes = await Promise.allSettled(Array.from({ length: 16 }, () => receiver.execute(id, work)));
    expect(runs).toBe(1);
    expect(outcomes.filter((o) => o.status === 'fulfilled' && !o.value.replayed)).toHaveLength(1);

    const answer = receiver.executeNow(id, work);
    expect(answer).not.toBeInstanceOf(Promise);
    expect(answer).toMatchObject({ replayed: true, response: { status: 201 } });
    expect(runs).toBe(1);
  });
});

describe('sqlite store: concurrent duplicates of a new key', () => {
  let dir: string;
  let stores: SqliteStore[];
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'retrysafe-same-turn-'));
    const path = join(dir, 'records.db');
    stores = [createSqliteStore({ path }), createSqliteStore({ path })];
  });
  afterEach(async () => {
    for (const store of stores) await store.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('gives exactly one winner among duplicates claimed in one turn, on one connection and across two', async () => {
    for (let round = 0; round < 20; round++) {
      const key = `k-${round}`;
      const claims: Promise<ClaimResult>[] = [];
      // Alternating connections: the same file seen by two processes' worth of connections.
      for (let i = 0; i < 16; i++) claims.push(stores[i % 2]!.claim(input(key, { leaseToken: `t-${round}-${i}` })));
      const results = await Promise.all(claims);
      const winners = results.filter((r) => r.acquired);
      expect(winners).toHaveLength(1);
      const token = winners[0]!.acquired ? winners[0]!.claim.leaseToken : '';
      for (const result of results) {
        if (!result.acquired) expect(result.record).toMatchObject({ state: 'in_progress', leaseToken: token });
      }
      // Completed now, every later duplicate is a replay carried at the call.
      if (!winners[0]!.acquired) throw new Error('unreachable');
      expect(await stores[0]!.complete(winners[0]!.claim, RESPONSE, RETENTION_MS)).toBe(true);
      for (const store of stores) {
        expect(carried(store.claim(input(key, { leaseToken: 'late' })))).toMatchObject({ acquired: false, record: { state: 'completed', leaseToken: token } });
      }
    }
  });
});
