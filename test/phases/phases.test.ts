import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Database } from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/core/clock.js';
import { completeAbandoned } from '../../src/phases/completer.js';
import { derivedKey } from '../../src/phases/derived-key.js';
import { IdempotencyKeyReusedError, LeaseLostError, RequestInProgressError } from '../../src/core/errors.js';
import { definePhases } from '../../src/phases/plan.js';
import { createPhaseRunner, type PhaseRunner } from '../../src/phases/runner.js';
import { decodeRecoveryPoint } from '../../src/phases/recovery-point.js';
import { createMemoryStore } from '../../src/stores/memory.js';
import { createSqliteStore, type SqliteStore } from '../../src/stores/sqlite/index.js';
import type { IdempotencyStore } from '../../src/core/store.js';
import { body, FakeCards, faults, FP, INPUT, LEASE_MS } from './fixtures/ride-fakes.js';
import { RIDES_SQL, ridePlan, type CardNetwork } from './fixtures/ride-plan.js';

function rides(database: Database): { charge_id: string | null; receipts: number }[] {
  return database.prepare('SELECT charge_id, receipts FROM rides').all() as { charge_id: string | null; receipts: number }[];
}

describe('atomic phases on SQLite, transactional mode', () => {
  let clock: ManualClock;
  let store: SqliteStore;
  let runner: PhaseRunner<Database>;
  let cards: FakeCards;
  const id = { scope: 'riders', key: 'ride-1', fingerprint: FP };

  beforeEach(() => {
    clock = new ManualClock(1_700_000_000_000);
    store = createSqliteStore({ clock });
    store.database.exec(RIDES_SQL);
    runner = createPhaseRunner({ store, transactional: true, leaseMs: LEASE_MS });
    cards = new FakeCards();
  });
  afterEach(async () => {
    await store.close();
  });

  it('runs the three phases once, charges once and replays the saved response', async () => {
    const hooks = faults();
    const plan = ridePlan(cards, hooks);
    const first = await runner.execute(plan, id, INPUT);
    expect(first).toMatchObject({ replayed: false });
    expect(first.resumedFrom).toBeUndefined();
    expect(first.response.status).toBe(201);
    expect(body(first.response)).toEqual({ rowid: 1, chargeId: 'ch_1' });
    const replay = await runner.execute(plan, id, INPUT);
    expect(replay.replayed).toBe(true);
    expect(body(replay.response)).toEqual({ rowid: 1, chargeId: 'ch_1' });
    expect(hooks.runs).toEqual({ 'ride-created': 1, charged: 1, 'receipt-sent': 1 });
    expect(cards.calls).toBe(1);
    expect([...cards.charges.keys()]).toEqual([derivedKey(id, 'charge')]);
    expect(rides(store.database)).toEqual([{ charge_id: 'ch_1', receipts: 1 }]);
    const record = await store.get('riders', 'ride-1');
    expect(record?.state).toBe('completed');
    expect(decodeRecoveryPoint(record?.recoveryPoint ?? '')).toMatchObject({ plan: 'ride.create', phase: 'charged' });
  });

  it('resumes at phase 3 after a crash that followed phase 2’s checkpoint, charging exactly once', async () => {
    const hooks = faults({ at: 'started', phase: 'receipt-sent' });
    const plan = ridePlan(cards, hooks);
    await expect(runner.execute(plan, id, INPUT)).rejects.toThrow('crash started receipt-sent');

    const stranded = await store.get('riders', 'ride-1');
    expect(stranded).toMatchObject({ state: 'in_progress', leaseExpiresAt: clock.now() });
    expect(decodeRecoveryPoint(stranded?.recoveryPoint ?? '')).toEqual({
      plan: 'ride.create',
      phase: 'charged',
      input: INPUT,
      state: { rowid: 1, chargeId: 'ch_1' },
    });
    expect(rides(store.database)).toEqual([{ charge_id: 'ch_1', receipts: 0 }]);

    // The failing execution handed its lease back, so the retry resumes at once.
    const retry = await runner.execute(plan, id, INPUT);
    expect(retry).toMatchObject({ replayed: false, resumedFrom: 'charged' });
    expect(body(retry.response)).toEqual({ rowid: 1, chargeId: 'ch_1' });
    expect(hooks.runs).toEqual({ 'ride-created': 1, charged: 1, 'receipt-sent': 2 });
    expect((await runner.execute(plan, id, INPUT)).replayed).toBe(true);
    expect(cards.calls).toBe(1);
    expect(cards.charges.size).toBe(1);
    expect(rides(store.database)).toEqual([{ charge_id: 'ch_1', receipts: 1 }]);
  });

  it('re-runs a phase that failed before its checkpoint, its writes rolled back; the derived key dedups the charge', async () => {
    const hooks = faults({ at: 'finished', phase: 'charged' });
    const plan = ridePlan(cards, hooks);
    await expect(runner.execute(plan, id, INPUT)).rejects.toThrow('crash finished charged');
    // The card was charged, but the UPDATE of phase 2 rolled back with its transaction.
    expect(cards.charges.size).toBe(1);
    expect(rides(store.database)).toEqual([{ charge_id: null, receipts: 0 }]);
    expect(decodeRecoveryPoint((await store.get('riders', 'ride-1'))?.recoveryPoint ?? '')?.phase).toBe('ride-created');

    const retry = await runner.execute(plan, id, INPUT);
    expect(retry).toMatchObject({ replayed: false, resumedFrom: 'ride-created' });
    expect(hooks.runs).toEqual({ 'ride-created': 1, charged: 2, 'receipt-sent': 1 });
    expect(cards.calls).toBe(2);
    expect(cards.charges.size).toBe(1);
    expect(rides(store.database)).toEqual([{ charge_id: 'ch_1', receipts: 1 }]);
  });

  it('releases a record whose first phase failed: no row, no record, and a retry starts afresh', async () => {
    const hooks = faults({ at: 'finished', phase: 'ride-created' });
    const plan = ridePlan(cards, hooks);
    await expect(runner.execute(plan, id, INPUT)).rejects.toThrow('crash finished ride-created');
    expect(rides(store.database)).toEqual([]);
    expect(await store.get('riders', 'ride-1')).toBeUndefined();
    const retry = await runner.execute(plan, id, INPUT);
    expect(retry.resumedFrom).toBeUndefined();
    expect(rides(store.database)).toEqual([{ charge_id: 'ch_1', receipts: 1 }]);
  });

  it('lets the completer finish an abandoned record without any client retry', async () => {
    const hooks = faults({ at: 'started', phase: 'receipt-sent' });
    const plan = ridePlan(cards, hooks);
    await expect(runner.execute(plan, id, INPUT)).rejects.toThrow('crash');
    const other = { scope: 'riders', key: 'ride-2', fingerprint: FP };
    await expect(runner.execute(ridePlan(cards, faults({ at: 'finished', phase: 'charged' })), other, { rider: 'bo', cents: 7 })).rejects.toThrow('crash');

    const report = await completeAbandoned({ runner, plans: [plan] });
    expect(report.found).toBe(2);
    expect(report.completed).toEqual([
      { scope: 'riders', key: 'ride-1', plan: 'ride.create', phase: 'charged' },
      { scope: 'riders', key: 'ride-2', plan: 'ride.create', phase: 'ride-created' },
    ]);
    expect(report.failed).toEqual([]);
    // ride-2 was re-driven from its stored input: its charge is 7 cents, under ride-2's derived key.
    expect(cards.charges.get(derivedKey(other, 'charge'))?.cents).toBe(7);
    expect(cards.charges.size).toBe(2);
    expect((await store.get('riders', 'ride-1'))?.state).toBe('completed');
    expect(rides(store.database)).toEqual([
      { charge_id: 'ch_1', receipts: 1 },
      { charge_id: 'ch_2', receipts: 1 },
    ]);
    const late = await runner.execute(plan, id, INPUT);
    expect(late.replayed).toBe(true);
    expect(body(late.response)).toEqual({ rowid: 1, chargeId: 'ch_1' });
    expect(await completeAbandoned({ runner, plans: [plan] })).toEqual({ found: 0, completed: [], skipped: [], failed: [] });
  });

  it('has the completer skip a record of an unknown plan and one whose lease is still live', async () => {
    const plan = ridePlan(cards, faults({ at: 'started', phase: 'receipt-sent' }));
    await expect(runner.execute(plan, id, INPUT)).rejects.toThrow('crash');
    const other = definePhases({ id: 'something.else', phases: [{ name: 'only', run: () => Promise.resolve(1) }] });
    const report = await completeAbandoned({ runner, plans: [other] });
    expect(report.skipped).toEqual([{ scope: 'riders', key: 'ride-1', plan: 'ride.create', phase: 'charged', reason: 'unknown-plan' }]);
    expect((await store.get('riders', 'ride-1'))?.state).toBe('in_progress');
    // A plain claim with a live lease makes the record not abandoned at all.
    const held = await store.claim({ scope: 'riders', key: 'ride-1', fingerprint: FP, leaseMs: LEASE_MS, retentionMs: 600_000 });
    expect(held.acquired).toBe(true);
    expect((await completeAbandoned({ runner, plans: [plan] })).found).toBe(0);
  });

  it('refuses another plan resuming the record, and a different fingerprint, leaving the record resumable', async () => {
    const plan = ridePlan(cards, faults({ at: 'started', phase: 'receipt-sent' }));
    await expect(runner.execute(plan, id, INPUT)).rejects.toThrow('crash');
    const other = definePhases<Database>({ id: 'something.else', phases: [{ name: 'only', run: () => Promise.resolve(1) }] });
    await expect(runner.execute(other, id, INPUT)).rejects.toThrow(/cannot resume/);
    await expect(runner.execute(plan, { ...id, fingerprint: 'e'.repeat(64) }, INPUT)).rejects.toBeInstanceOf(IdempotencyKeyReusedError);
    expect((await runner.execute(plan, id, INPUT)).resumedFrom).toBe('charged');
  });
});

describe('atomic phases on a plain store', () => {
  it('runs on the memory store with fenced checkpoints and answers a live duplicate with 409', async () => {
    const clock = new ManualClock(0);
    const store = createMemoryStore({ clock });
    const runner = createPhaseRunner({ store, leaseMs: LEASE_MS });
    const seen: unknown[] = [];
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const plan = definePhases<undefined, { n: number }>({
      id: 'counter',
      phases: [
        { name: 'one', run: ({ input }) => Promise.resolve({ sum: input.n + 1 }) },
        {
          name: 'two',
          run: async ({ state, resumed }) => {
            seen.push(state, resumed);
            await gate;
            return (state as { sum: number }).sum * 10;
          },
        },
      ],
    });
    const id = { scope: 's', key: 'k', fingerprint: FP };
    const running = runner.execute(plan, id, { n: 1 });
    await new Promise((resolve) => setImmediate(resolve));
    await expect(runner.execute(plan, id, { n: 1 })).rejects.toBeInstanceOf(RequestInProgressError);
    release();
    const execution = await running;
    expect(seen).toEqual([{ sum: 2 }, false]);
    expect(execution.response).toMatchObject({ status: 200, headers: { 'content-type': 'application/json' } });
    expect(new TextDecoder().decode(execution.response.body)).toBe('20');
  });

  it('fences off a stale worker’s checkpoint after a takeover; the charge still happens once', async () => {
    const clock = new ManualClock(1_700_000_000_000);
    const store = createSqliteStore({ clock });
    store.database.exec(RIDES_SQL);
    const cards = new FakeCards();
    const id = { scope: 'riders', key: 'ride-9', fingerprint: FP };
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
      store.database,
    );
    const stale = createPhaseRunner({ store, leaseMs: LEASE_MS }).execute(slow, id, INPUT);
    await inPhase2;
    clock.advance(LEASE_MS);
    const winner = await createPhaseRunner({ store, leaseMs: LEASE_MS }).execute(ridePlan(cards, {}, store.database), id, INPUT);
    expect(winner).toMatchObject({ replayed: false, resumedFrom: 'ride-created' });
    stall?.();
    await expect(stale).rejects.toBeInstanceOf(LeaseLostError);
    const record = await store.get('riders', 'ride-9');
    expect(record?.state).toBe('completed');
    expect(body(record?.response ?? { body: new Uint8Array() })).toEqual({ rowid: 1, chargeId: 'ch_1' });
    expect(cards.charges.size).toBe(1);
    expect(rides(store.database)).toEqual([{ charge_id: 'ch_1', receipts: 1 }]);
    await store.close();
  });
});

describe('createPhaseRunner, definePhases and derivedKey', () => {
  it('refuses a store without checkpoint, naming the store', () => {
    class LegacyStore {
      claim = (): never => {
        throw new Error('unused');
      };
    }
    expect(() => createPhaseRunner({ store: new LegacyStore() as unknown as IdempotencyStore })).toThrow(
      /option "store" \(LegacyStore\) has no checkpoint\(\)/,
    );
    expect(() => createPhaseRunner({ store: createMemoryStore(), transactional: true } as never)).toThrow(/no transaction\(\)/);
    expect(() => createPhaseRunner({ store: createMemoryStore(), leaseMs: 0 })).toThrow(/"leaseMs"/);
  });

  it('validates plans, naming the option', () => {
    const run = () => Promise.resolve(undefined);
    expect(() => definePhases({ id: '', phases: [{ name: 'a', run }] })).toThrow(/"id"/);
    expect(() => definePhases({ id: 'p', phases: [] })).toThrow(/"phases"/);
    expect(() => definePhases({ id: 'p', phases: [{ name: 'a', run }, { name: 'a', run }] })).toThrow(/"phases\[1\]\.name" repeats/);
    expect(() => definePhases({ id: 'p', phases: [{ name: 'a', run: 1 as never }] })).toThrow(/"phases\[0\]\.run"/);
  });

  it('derives a stable 64-hex key per (scope, key, fingerprint, step)', () => {
    const id = { scope: 's', key: 'k', fingerprint: FP };
    const key = derivedKey(id, 'charge');
    expect(key).toMatch(/^[0-9a-f]{64}$/);
    expect(derivedKey({ ...id }, 'charge')).toBe(key);
    const others = [
      derivedKey(id, 'refund'),
      derivedKey({ ...id, scope: 't' }, 'charge'),
      derivedKey({ ...id, key: 'k2' }, 'charge'),
      derivedKey({ ...id, fingerprint: 'e'.repeat(64) }, 'charge'),
      derivedKey({ ...id, scope: 's:k', key: '' }, 'charge'),
    ];
    expect(new Set([key, ...others]).size).toBe(6);
  });
});

describe('atomic phases across a SIGKILL', () => {
  let dir: string;
  let server: Server;
  let cardsUrl: string;
  const charges = new Map<string, string>();
  let calls = 0;

  beforeEach(async () => {
    dir = mkdtempSync(join(tmpdir(), 'retrysafe-phases-'));
    charges.clear();
    calls = 0;
    server = createServer((request, response) => {
      calls++;
      const key = String(request.headers['idempotency-key']);
      const id = charges.get(key) ?? `ch_${charges.size + 1}`;
      charges.set(key, id);
      request.resume();
      response.setHeader('content-type', 'application/json').end(JSON.stringify({ id }));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    cardsUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}/charges`;
  });
  afterEach(async () => {
    await new Promise((resolve) => server.close(resolve));
    rmSync(dir, { recursive: true, force: true });
  });

  it('a process killed inside phase 3 leaves phases 1–2 committed; once its lease ends a retry resumes at phase 3, one charge', async () => {
    const path = join(dir, 'rides.db');
    const child = spawn(
      process.execPath,
      ['--import', 'tsx', fileURLToPath(new URL('./fixtures/child.ts', import.meta.url)), path, 'ride-k', cardsUrl],
      { cwd: fileURLToPath(new URL('../..', import.meta.url)) },
    );
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const exited = new Promise<NodeJS.Signals | null>((resolve) => child.on('exit', (_code, signal) => resolve(signal)));
    try {
      await new Promise<void>((resolve, reject) => {
        child.stdout.on('data', (chunk: Buffer) => {
          if (chunk.toString().includes('receipt-phase')) resolve();
        });
        void exited.then(() => reject(new Error(`child exited early: ${stderr}`)));
      });
    } finally {
      child.kill('SIGKILL');
    }
    expect(await exited).toBe('SIGKILL');
    expect(charges.size).toBe(1);

    const clock = new ManualClock(Date.now());
    const store = createSqliteStore({ path, clock });
    // Phase 3's transaction died with the process; phases 1 and 2 and their recovery point are durable.
    expect(rides(store.database)).toEqual([{ charge_id: 'ch_1', receipts: 0 }]);
    expect(decodeRecoveryPoint((await store.get('riders', 'ride-k'))?.recoveryPoint ?? '')?.phase).toBe('charged');

    const cards: CardNetwork = {
      charge: () => Promise.reject(new Error('phase 2 must not run again')),
    };
    const runner = createPhaseRunner({ store, transactional: true, leaseMs: LEASE_MS });
    const retryId = { scope: 'riders', key: 'ride-k', fingerprint: FP };
    // The dead holder's lease still runs: the retry is told to come back later.
    await expect(runner.execute(ridePlan(cards), retryId, INPUT)).rejects.toBeInstanceOf(RequestInProgressError);
    clock.advance(LEASE_MS);
    const retry = await runner.execute(ridePlan(cards), retryId, INPUT);
    expect(retry).toMatchObject({ replayed: false, resumedFrom: 'charged' });
    expect(body(retry.response)).toEqual({ rowid: 1, chargeId: 'ch_1' });
    expect(rides(store.database)).toEqual([{ charge_id: 'ch_1', receipts: 1 }]);
    const replay = await runner.execute(ridePlan(cards), retryId, INPUT);
    expect(replay.replayed).toBe(true);
    expect(body(replay.response)).toEqual({ rowid: 1, chargeId: 'ch_1' });
    expect(calls).toBe(1);
    expect(charges.size).toBe(1);
    await store.close();
  });
});
