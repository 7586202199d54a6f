/**
 * Atomic phases on the SQLite store: the phases contract in both modes, and a holder killed mid-phase in
 * another process.
 */
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
import { RequestInProgressError } from '../../src/core/errors.js';
import { decodeRecoveryPoint } from '../../src/phases/recovery-point.js';
import { createPhaseRunner, type PhaseRunner } from '../../src/phases/runner.js';
import { createSqliteStore } from '../../src/stores/sqlite/index.js';
import { phasesContract, type PhaseSubject } from './contract.js';
import { sagaContract, type SagaSubject } from './saga-contract.js';
import { body, FP, INPUT, LEASE_MS } from './fixtures/ride-fakes.js';
import { RIDES_SQL, ridePlan, type CardNetwork } from './fixtures/ride-plan.js';

function rides(database: Database): { charge_id: string | null; receipts: number }[] {
  return database.prepare('SELECT charge_id, receipts FROM rides').all() as { charge_id: string | null; receipts: number }[];
}

async function openSqlite(transactional: boolean): Promise<PhaseSubject<Database | undefined>> {
  const clock = new ManualClock(1_700_000_000_000);
  const store = createSqliteStore({ clock });
  store.database.exec(RIDES_SQL);
  const runner: PhaseRunner<Database | undefined> = transactional
    ? (createPhaseRunner({ store, transactional: true, leaseMs: LEASE_MS }))
    : createPhaseRunner({ store, leaseMs: LEASE_MS });
  return Promise.resolve({
    store,
    runner,
    clock,
    plan: (cards, hooks) => ridePlan(cards, hooks, transactional ? undefined : store.database),
    rides: () => Promise.resolve(rides(store.database)),
    close: () => store.close(),
  });
}

phasesContract('SQLite', { transactional: true }, () => openSqlite(true));
phasesContract('SQLite', { transactional: false }, () => openSqlite(false));

function openSqliteSaga(transactional: boolean): Promise<SagaSubject<Database | undefined>> {
  const clock = new ManualClock(1_700_000_000_000);
  const store = createSqliteStore({ clock });
  return Promise.resolve({
    store,
    clock,
    runner: (maxCompensationAttempts) =>
      transactional
        ? createPhaseRunner({ store, transactional: true, leaseMs: LEASE_MS, maxCompensationAttempts })
        : createPhaseRunner({ store, leaseMs: LEASE_MS, maxCompensationAttempts }),
    close: () => store.close(),
  });
}

sagaContract('SQLite', { transactional: true }, () => openSqliteSaga(true));
sagaContract('SQLite', { transactional: false }, () => openSqliteSaga(false));

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
