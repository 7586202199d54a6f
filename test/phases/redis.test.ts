/**
 * Atomic phases on the Redis store (plain mode: Redis cannot commit with the business database, so each
 * phase runs alone and a fenced checkpoint script records it). The plan is the three-phase ride of
 * `fixtures/ride-plan.ts`, its rows in an in-memory SQLite database.
 */
import BetterSqlite3, { type Database } from 'better-sqlite3';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/core/clock.js';
import { completeAbandoned } from '../../src/phases/completer.js';
import { derivedKey } from '../../src/phases/derived-key.js';
import { LeaseLostError, RequestInProgressError } from '../../src/core/errors.js';
import { createPhaseRunner, type PhaseRunner } from '../../src/phases/runner.js';
import { decodeRecoveryPoint } from '../../src/phases/recovery-point.js';
import { createRedisStore } from '../../src/stores/redis/index.js';
import { REDIS_URL, serviceAvailable, uniqueName } from '../support/services.js';
import { body, FakeCards, faults, FP, INPUT, LEASE_MS } from './fixtures/ride-fakes.js';
import { RIDES_SQL, ridePlan } from './fixtures/ride-plan.js';

const FILE_PREFIX = uniqueName('rs_phases');

async function deleteUnder(client: Redis, prefix: string): Promise<void> {
  let cursor = '0';
  do {
    const [next, keys] = await client.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 500);
    cursor = next;
    if (keys.length > 0) await client.del(...keys);
  } while (cursor !== '0');
}

const client = new Redis(REDIS_URL, { lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 1 });

if (await serviceAvailable('Redis', () => client.connect())) {
  afterAll(async () => {
    await deleteUnder(client, FILE_PREFIX);
    await client.quit();
  });

  describe('atomic phases on Redis, plain mode', () => {
    let tests = 0;
    let prefix: string;
    let clock: ManualClock;
    let store: ReturnType<typeof createRedisStore>;
    let runner: PhaseRunner;
    let cards: FakeCards;
    let database: Database;
    const id = { scope: 'riders', key: 'ride-1', fingerprint: FP };

    function rides(): { charge_id: string | null; receipts: number }[] {
      return database.prepare('SELECT charge_id, receipts FROM rides ORDER BY rowid').all() as {
        charge_id: string | null;
        receipts: number;
      }[];
    }

    beforeEach(() => {
      prefix = `${FILE_PREFIX}:t${++tests}`;
      clock = new ManualClock(1_700_000_000_000);
      store = createRedisStore({ client, prefix, clock });
      runner = createPhaseRunner({ store, leaseMs: LEASE_MS });
      cards = new FakeCards();
      database = new BetterSqlite3(':memory:');
      database.exec(RIDES_SQL);
    });
    afterEach(async () => {
      await store.close();
      database.close();
      await deleteUnder(client, prefix);
    });

    it('runs the three phases once, charges once and replays the saved response', async () => {
      const hooks = faults();
      const plan = ridePlan(cards, hooks, database);
      const first = await runner.execute(plan, id, INPUT);
      expect(first).toMatchObject({ replayed: false });
      expect(first.resumedFrom).toBeUndefined();
      expect(body(first.response)).toEqual({ rowid: 1, chargeId: 'ch_1' });
      const replay = await runner.execute(plan, id, INPUT);
      expect(replay.replayed).toBe(true);
      expect(body(replay.response)).toEqual({ rowid: 1, chargeId: 'ch_1' });
      expect(hooks.runs).toEqual({ 'ride-created': 1, charged: 1, 'receipt-sent': 1 });
      expect([...cards.charges.keys()]).toEqual([derivedKey(id, 'charge')]);
      expect(rides()).toEqual([{ charge_id: 'ch_1', receipts: 1 }]);
      const record = await store.get('riders', 'ride-1');
      expect(record?.state).toBe('completed');
      expect(decodeRecoveryPoint(record?.recoveryPoint ?? '')).toMatchObject({ plan: 'ride.create', phase: 'charged' });
    });

    it('resumes at phase 3 after a crash that followed phase 2’s checkpoint, charging exactly once', async () => {
      const hooks = faults({ at: 'started', phase: 'receipt-sent' });
      const plan = ridePlan(cards, hooks, database);
      await expect(runner.execute(plan, id, INPUT)).rejects.toThrow('crash started receipt-sent');

      const stranded = await store.get('riders', 'ride-1');
      expect(stranded).toMatchObject({ state: 'in_progress', leaseExpiresAt: clock.now() });
      expect(decodeRecoveryPoint(stranded?.recoveryPoint ?? '')).toEqual({
        plan: 'ride.create',
        phase: 'charged',
        input: INPUT,
        state: { rowid: 1, chargeId: 'ch_1' },
      });

      // The failed run handed its lease back (zero-lease checkpoint): the retry takes over in the same millisecond.
      const retry = await runner.execute(plan, id, INPUT);
      expect(retry).toMatchObject({ replayed: false, resumedFrom: 'charged' });
      expect(body(retry.response)).toEqual({ rowid: 1, chargeId: 'ch_1' });
      expect(hooks.runs).toEqual({ 'ride-created': 1, charged: 1, 'receipt-sent': 2 });
      expect((await runner.execute(plan, id, INPUT)).replayed).toBe(true);
      expect(cards.calls).toBe(1);
      expect(cards.charges.size).toBe(1);
      expect(rides()).toEqual([{ charge_id: 'ch_1', receipts: 1 }]);
    });

    it('fences off a stale worker’s checkpoint after a takeover; the charge still happens once', async () => {
      let stall: (() => void) | undefined;
      let entered!: () => void;
      const inPhase2 = new Promise<void>((resolve) => (entered = resolve));
      const slow = ridePlan(
        cards,
        {
          finished: async (phase) => {
            if (phase !== 'charged' || stall !== undefined) return;
            entered();
            await new Promise<void>((resolve) => (stall = resolve));
          },
        },
        database,
      );
      const stale = runner.execute(slow, id, INPUT);
      await inPhase2;
      await expect(runner.execute(ridePlan(cards, {}, database), id, INPUT)).rejects.toBeInstanceOf(RequestInProgressError);
      clock.advance(LEASE_MS);
      const winner = await runner.execute(ridePlan(cards, {}, database), id, INPUT);
      expect(winner).toMatchObject({ replayed: false, resumedFrom: 'ride-created' });
      stall?.();
      await expect(stale).rejects.toBeInstanceOf(LeaseLostError);
      const record = await store.get('riders', 'ride-1');
      expect(record?.state).toBe('completed');
      expect(body(record?.response ?? { body: new Uint8Array() })).toEqual({ rowid: 1, chargeId: 'ch_1' });
      expect(cards.charges.size).toBe(1);
      expect(rides()).toEqual([{ charge_id: 'ch_1', receipts: 1 }]);
    });

    it('runs a key once when 10 executions race on two connections', async () => {
      const other = client.duplicate();
      await other.connect();
      try {
        const otherRunner = createPhaseRunner({ store: createRedisStore({ client: other, prefix, clock }), leaseMs: LEASE_MS });
        const hooks = faults();
        const plan = ridePlan(cards, hooks, database);
        const outcomes = await Promise.allSettled(
          Array.from({ length: 10 }, (_, i) => (i % 2 === 0 ? runner : otherRunner).execute(plan, id, INPUT)),
        );
        const fresh = outcomes.filter((o) => o.status === 'fulfilled' && !o.value.replayed);
        expect(fresh).toHaveLength(1);
        for (const outcome of outcomes) {
          if (outcome.status === 'rejected') expect(outcome.reason).toBeInstanceOf(RequestInProgressError);
        }
        expect(hooks.runs).toEqual({ 'ride-created': 1, charged: 1, 'receipt-sent': 1 });
        expect(cards.calls).toBe(1);
        expect(rides()).toEqual([{ charge_id: 'ch_1', receipts: 1 }]);
      } finally {
        await other.quit();
      }
    });

    it('lets the completer finish abandoned records without any client retry', async () => {
      const plan = ridePlan(cards, faults({ at: 'started', phase: 'receipt-sent' }), database);
      await expect(runner.execute(plan, id, INPUT)).rejects.toThrow('crash');
      // One millisecond apart, so the completer's oldest-lease-first order is fixed.
      clock.advance(1);
      const other = { scope: 'riders', key: 'ride-2', fingerprint: FP };
      await expect(
        runner.execute(ridePlan(cards, faults({ at: 'started', phase: 'charged' }), database), other, { rider: 'bo', cents: 7 }),
      ).rejects.toThrow('crash');
      // Not abandoned: a live lease without a recovery point.
      expect((await store.claim({ scope: 'riders', key: 'ride-3', fingerprint: FP, leaseMs: LEASE_MS, retentionMs: 600_000 })).acquired).toBe(true);

      const report = await completeAbandoned({ runner, plans: [ridePlan(cards, {}, database)] });
      expect(report).toEqual({
        found: 2,
        completed: [
          { scope: 'riders', key: 'ride-1', plan: 'ride.create', phase: 'charged' },
          { scope: 'riders', key: 'ride-2', plan: 'ride.create', phase: 'ride-created' },
        ],
        skipped: [],
        failed: [],
      });
      expect(cards.charges.get(derivedKey(other, 'charge'))?.cents).toBe(7);
      expect(cards.charges.size).toBe(2);
      expect(rides()).toEqual([
        { charge_id: 'ch_1', receipts: 1 },
        { charge_id: 'ch_2', receipts: 1 },
      ]);
      const late = await runner.execute(plan, id, INPUT);
      expect(late.replayed).toBe(true);
      expect(body(late.response)).toEqual({ rowid: 1, chargeId: 'ch_1' });
      expect(await completeAbandoned({ runner, plans: [plan] })).toEqual({ found: 0, completed: [], skipped: [], failed: [] });
      expect((await store.get('riders', 'ride-3'))?.state).toBe('in_progress');
    });
  });
}
