/**
 * `retrysafe inspect` and `retrysafe compensation` on a saga paused as `compensation_failed`: inspect shows
 * the saga status, `--retry` hands the saga back to `retrysafe complete`, `--mark-compensated` settles it
 * without running the compensation, and bad input is one line with exit 2.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { CompensationFailedError } from '../../src/core/errors.js';
import { createPhaseRunner } from '../../src/phases/runner.js';
import { sagaStatusOf } from '../../src/phases/saga.js';
import { createSqliteStore } from '../../src/stores/sqlite/index.js';
import { bookingPlan, FakeBookingApi } from '../phases/fixtures/booking.js';
import { runCli } from '../support/run-cli.js';

const FP = 'f'.repeat(64);

describe('retrysafe compensation', () => {
  let dir: string;
  let path: string;
  beforeEach(async () => {
    dir = mkdtempSync(join(tmpdir(), 'retrysafe-cli-saga-'));
    path = join(dir, 'records.db');
    // Two bookings whose ticket is refused and whose refund is refused for ever: both pause.
    const store = createSqliteStore({ path });
    const runner = createPhaseRunner({ store, transactional: true, maxCompensationAttempts: 1 });
    for (const key of ['b-1', 'b-2']) {
      const plan = bookingPlan(new FakeBookingApi().refuse('ticket').refuse('refund'));
      await expect(runner.execute(plan, { scope: 'travel', key, fingerprint: FP }, { seat: '1A', cents: 10 })).rejects.toBeInstanceOf(
        CompensationFailedError,
      );
    }
    await store.close();
  });
  afterEach(() => {
    rmSync(dir, { recursive: true, force: true });
  });

  it('shows the paused saga, retries one and marks the other compensated; complete then saves both responses', async () => {
    const inspected = await runCli(['inspect', '--store', `sqlite:${path}`, '--scope', 'travel', 'b-1']);
    expect(inspected.code).toBe(0);
    const view = JSON.parse(inspected.stdout) as { state: string; recoveryPoint: { saga: unknown } };
    expect(view.state).toBe('compensation_failed');
    expect(view.recoveryPoint.saga).toMatchObject({ failed: 'ticket-sent', pending: ['card-charged', 'seat-reserved'], attempts: 1 });

    const retried = await runCli(['compensation', '--store', `sqlite:${path}`, '--scope', 'travel', 'b-1', '--retry']);
    expect(retried).toMatchObject({ code: 0, stderr: '' });
    expect(retried.stdout).toContain('is compensating');
    const marked = await runCli(['compensation', '--store', `sqlite:${path}`, '--scope', 'travel', 'b-2', '--mark-compensated']);
    expect(marked).toMatchObject({ code: 0, stderr: '' });

    const redriven = await runCli(['complete', '--store', `sqlite:${path}`, '--plans', 'test/cli/fixtures/booking-plans.ts']);
    expect(redriven.stderr).toBe('');
    expect(redriven.stdout).toBe(
      'retrysafe: 2 abandoned; completed 0, compensated 2, paused 0, skipped 0, failed 0\n' +
        'compensated scope "travel" key "b-1"\ncompensated scope "travel" key "b-2"\n',
    );
    const store = createSqliteStore({ path });
    for (const key of ['b-1', 'b-2']) {
      const record = await store.get('travel', key);
      expect(record?.state).toBe('completed');
      expect(record?.response?.status).toBe(402);
      expect(sagaStatusOf(record ?? {})).toBe('compensated');
    }
    await store.close();
  });

  it('refuses bad input in one line with exit 2, and a record that is not paused with exit 1', async () => {
    for (const flags of [[], ['--retry', '--mark-compensated']]) {
      const result = await runCli(['compensation', '--store', `sqlite:${path}`, '--scope', 'travel', 'b-1', ...flags]);
      expect(result.code).toBe(2);
      expect(result.stderr).toBe('retrysafe: compensation takes exactly one of --retry and --mark-compensated (see --help)\n');
    }
    expect((await runCli(['compensation', '--store', `sqlite:${path}`, '--scope', 'travel', 'b-1', '--retry'])).code).toBe(0);
    const again = await runCli(['compensation', '--store', `sqlite:${path}`, '--scope', 'travel', 'b-1', '--retry']);
    expect(again.code).toBe(1);
    expect(again.stderr).toBe('retrysafe: the record for key "b-1" in scope "travel" is not a saga paused as compensation_failed (it is compensating)\n');
    expect((await runCli(['compensation', '--store', `sqlite:${path}`, 'nope', '--retry'])).code).toBe(1);
  });
});
