import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { formatCompletion } from '../../src/cli/complete.js';
import { recordView } from '../../src/cli/inspect.js';
import { reapInBatches } from '../../src/cli/reap.js';
import { ManualClock } from '../../src/core/clock.js';
import { createPhaseRunner } from '../../src/phases/runner.js';
import { createMemoryStore } from '../../src/stores/memory.js';
import { createSqliteStore, type SqliteStore } from '../../src/stores/sqlite/index.js';
import type { ClaimInput } from '../../src/core/store.js';
import { RIDES_SQL, ridePlan } from '../phases/fixtures/ride-plan.js';
import { runCli } from '../support/run-cli.js';

const FP = 'f'.repeat(64);
const DAY_MS = 86_400_000;
const encoder = new TextEncoder();

function input(key: string, overrides: Partial<ClaimInput> = {}): ClaimInput {
  return { scope: 'tenant-1', key, fingerprint: FP, leaseMs: 1_000, retentionMs: 3_600_000, ...overrides };
}

async function completed(store: SqliteStore, key: string, body: Uint8Array, retentionMs: number): Promise<void> {
  const result = await store.claim(input(key));
  if (!result.acquired) throw new Error('expected to acquire');
  await store.complete(result.claim, { status: 201, headers: { 'content-type': 'application/json' }, body }, retentionMs);
}

describe('retrysafe reap, inspect and complete', () => {
  let dir: string;
  let path: string;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'retrysafe-cli-'));
    path = join(dir, 'records.db');
  });
  afterEach(() => {
    rmSync(dir, { recursive: true, force: true });
  });

  it('reap deletes expired records in bounded batches, sparing live ones', async () => {
    // Written ten days ago with one hour of retention: long expired by the CLI's wall clock.
    const past = createSqliteStore({ path, clock: new ManualClock(Date.now() - 10 * DAY_MS) });
    for (let i = 0; i < 5; i++) await completed(past, `old-${i}`, encoder.encode('{}'), 3_600_000);
    await past.close();
    const now = createSqliteStore({ path });
    await completed(now, 'fresh', encoder.encode('{}'), DAY_MS);
    await now.close();

    const result = await runCli(['reap', '--store', `sqlite:${path}`, '--batch', '2']);
    expect(result.stderr).toBe('');
    expect(result.code).toBe(0);
    expect(result.stdout).toBe(
      'batch 1: deleted 2\nbatch 2: deleted 2\nbatch 3: deleted 1\nretrysafe: reaped 5 expired records in 3 batches\n',
    );
    const after = createSqliteStore({ path });
    expect(after.database.prepare('SELECT idempotency_key FROM retrysafe_records').pluck().all()).toEqual(['fresh']);
    await after.close();

    const usage = await runCli(['reap', '--store', `sqlite:${path}`, '--batch', '0']);
    expect(usage.code).toBe(2);
    expect(usage.stderr).toContain('--batch must be an integer from 1 to 1000000.');
  });

  it('reapInBatches stops at maxBatches and says expired records may remain', async () => {
    const clock = new ManualClock(0);
    const store = createMemoryStore({ clock });
    for (let i = 0; i < 7; i++) {
      const result = await store.claim(input(`k${i}`));
      if (result.acquired) await store.complete(result.claim, { status: 200, headers: {}, body: new Uint8Array() }, 10);
    }
    clock.advance(10);
    expect(await reapInBatches(store, 3, 2)).toEqual({ deleted: 6, batches: [3, 3], exhausted: false });
    expect(await reapInBatches(store, 3)).toEqual({ deleted: 1, batches: [1], exhausted: true });
    expect(await reapInBatches(store, 3)).toEqual({ deleted: 0, batches: [0], exhausted: true });
  });

  it('inspect prints a record as JSON with a UTF-8 body as text, and exits 1 for an absent key', async () => {
    const store = createSqliteStore({ path });
    await completed(store, 'pay-1', encoder.encode('{"paid":"€5"}'), DAY_MS);
    const record = await store.get('tenant-1', 'pay-1');
    await store.close();

    const result = await runCli(['inspect', '--store', `sqlite:${path}`, '--scope', 'tenant-1', 'pay-1']);
    expect(result.code).toBe(0);
    const printed = JSON.parse(result.stdout) as Record<string, unknown>;
    expect(printed).toEqual({
      scope: 'tenant-1',
      key: 'pay-1',
      state: 'completed',
      fingerprint: FP,
      leaseToken: record?.leaseToken,
      leaseExpiresAt: new Date(record?.leaseExpiresAt ?? 0).toISOString(),
      createdAt: new Date(record?.createdAt ?? 0).toISOString(),
      completedAt: new Date(record?.completedAt ?? 0).toISOString(),
      expiresAt: new Date(record?.expiresAt ?? 0).toISOString(),
      response: { status: 201, headers: { 'content-type': 'application/json' }, body: { encoding: 'utf8', data: '{"paid":"€5"}' } },
    });

    const absent = await runCli(['inspect', '--store', `sqlite:${path}`, 'pay-1']);
    expect(absent.code).toBe(1);
    expect(absent.stdout).toBe('');
    expect(absent.stderr).toBe('retrysafe: no record for key "pay-1" in scope ""\n');
  });

  it('recordView shows a non-UTF-8 body as base64 and decodes a phase runner’s recovery point', async () => {
    const clock = new ManualClock(0);
    const store = createMemoryStore({ clock });
    const result = await store.claim(input('bin'));
    if (!result.acquired) throw new Error('expected to acquire');
    await store.complete(result.claim, { status: 200, headers: {}, body: Uint8Array.from([0xff, 0x00, 0xc3]) }, 10);
    expect(recordView((await store.get('tenant-1', 'bin'))!).response).toEqual({
      status: 200,
      headers: {},
      body: { encoding: 'base64', data: Buffer.from([0xff, 0x00, 0xc3]).toString('base64') },
    });

    const sqlite = createSqliteStore();
    sqlite.database.exec(RIDES_SQL);
    const runner = createPhaseRunner({ store: sqlite, transactional: true });
    const crashing = ridePlan(
      { charge: () => Promise.resolve('ch_1') },
      { started: (phase) => { if (phase === 'receipt-sent') throw new Error('crash'); } },
    );
    await expect(runner.execute(crashing, { scope: 's', key: 'ride', fingerprint: FP }, { rider: 'ada', cents: 5 })).rejects.toThrow('crash');
    expect(recordView((await sqlite.get('s', 'ride'))!).recoveryPoint).toEqual({
      plan: 'ride.create',
      phase: 'charged',
      input: { rider: 'ada', cents: 5 },
      state: { rowid: 1, chargeId: 'ch_1' },
    });
    await sqlite.close();
  });

  it('complete lists abandoned records, then re-drives them with --plans; phases already committed do not run again', async () => {
    const store = createSqliteStore({ path });
    store.database.exec(RIDES_SQL);
    const runner = createPhaseRunner({ store, transactional: true });
    const crashing = ridePlan(
      { charge: () => Promise.resolve('ch_1') },
      { started: (phase) => { if (phase === 'receipt-sent') throw new Error('crash'); } },
    );
    await expect(runner.execute(crashing, { scope: 'riders', key: 'ride-1', fingerprint: FP }, { rider: 'ada', cents: 5 })).rejects.toThrow('crash');
    await store.close();

    const listed = await runCli(['complete', '--store', `sqlite:${path}`]);
    expect(listed.code).toBe(0);
    expect(listed.stdout).toMatch(
      /^retrysafe: 1 abandoned multi-phase records\nscope "riders" key "ride-1": plan "ride.create" after phase "charged", lease ended \d{4}-[^\n]+\nPass --plans MODULE to re-drive them\.\n$/,
    );

    const redriven = await runCli(['complete', '--store', `sqlite:${path}`, '--plans', 'test/cli/fixtures/ride-plans.ts']);
    expect(redriven.stderr).toBe('');
    expect(redriven.stdout).toBe(
      'retrysafe: 1 abandoned; completed 1, compensated 0, paused 0, skipped 0, failed 0\ncompleted scope "riders" key "ride-1"\n',
    );
    expect(redriven.code).toBe(0);
    const after = createSqliteStore({ path });
    expect((await after.get('riders', 'ride-1'))?.state).toBe('completed');
    expect(after.database.prepare('SELECT charge_id, receipts FROM rides').all()).toEqual([{ charge_id: 'ch_1', receipts: 1 }]);
    await after.close();
  });

  it('formats a failed re-drive with its error', () => {
    expect(
      formatCompletion({
        found: 2,
        completed: [],
        compensated: [],
        paused: [],
        skipped: [{ scope: 's', key: 'a', reason: 'unknown-plan' }],
        failed: [{ scope: 's', key: 'b', error: new Error('card network down') }],
      }),
    ).toBe(
      'retrysafe: 2 abandoned; completed 0, compensated 0, paused 0, skipped 1, failed 1\nskipped scope "s" key "a": unknown-plan\nfailed scope "s" key "b": card network down\n',
    );
  });
});
