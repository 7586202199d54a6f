import { describe, expect, it } from 'vitest';
import type { CallResult } from '../../../src/demo/harness/traffic.js';
import type { Charge } from '../../../src/demo/payments/ledger.js';
import type { PlannedPayment } from '../../../src/demo/harness/plan.js';
import { buildReport, formatReport, type ReportInput } from '../../../src/demo/payments/report.js';

const payment = (key: string, copies = 1): PlannedPayment => ({
  index: 0,
  key,
  amountCents: 100,
  currency: 'EUR',
  fault: copies > 1 ? 'burst' : 'none',
  copies,
});
const charge = (id: string, key: string | null): Charge => ({ id, idempotencyKey: key, amountCents: 100, currency: 'EUR', createdAt: 0 });
const ok = (key: string, id: string): CallResult => ({ key, status: 201, body: JSON.stringify({ id, amount: 100 }) });

function input(plan: PlannedPayment[], calls: CallResult[], charges: Charge[]): ReportInput {
  return {
    seed: 9,
    store: 'memory:',
    unsafe: false,
    plan,
    calls,
    charges,
    counters: { attempts: 7, replays: 2, conflicts: 1, timeouts: 1, networkErrors: 3 },
    faults: { 'lost-reply': 1, slow: 1, 'crash-mid-handler': 0, 'crash-after-commit': 0 },
    crashes: 0,
    restarts: 0,
    inFlightAtCrashes: 0,
    crashesSkipped: 'memory: dies with the process',
    durationMs: 1234.4,
    removed: ['temporary directory /tmp/retrysafe-demo-x'],
    metrics: null,
  };
}

describe('buildReport', () => {
  it('passes a run where every key has one row and identical answers naming it', () => {
    const report = buildReport(
      input([payment('a'), payment('b', 3)], [ok('a', 'p1'), ok('b', 'p2'), ok('b', 'p2'), ok('b', 'p2')], [charge('p1', 'a'), charge('p2', 'b')]),
    );
    expect(report).toMatchObject({
      logicalPayments: 2,
      concurrentDuplicates: 2,
      httpAttempts: 7,
      replays: 2,
      conflicts: 1,
      lostRepliesInjected: 1,
      slowHandlers: 1,
      chargesWritten: 2,
      doubleCharges: 0,
      lostPayments: 0,
      identicalKeys: 2,
      responsesIdentical: true,
      durationMs: 1234,
      passed: true,
      problems: [],
    });
  });

  it('counts a key with two rows as a double charge and fails', () => {
    const report = buildReport(input([payment('a')], [ok('a', 'p1')], [charge('p1', 'a'), charge('p2', 'a')]));
    expect(report).toMatchObject({ chargesWritten: 2, doubleCharges: 1, lostPayments: 0, passed: false });
    expect(report.problems).toEqual(['a: charged 2 times']);
  });

  it.each([
    ['a call that gave up', [{ key: 'a', error: 'All 5 attempt(s) failed' }], [charge('p1', 'a')], 'a: lost (All 5 attempt(s) failed)'],
    ['a call answered 422', [{ key: 'a', status: 422, body: '{}' }], [charge('p1', 'a')], 'a: lost (answered 422)'],
    ['a 2xx with no row behind it', [ok('a', 'p1')], [], 'a: lost (no charge row)'],
    ['a 2xx naming another row', [ok('a', 'p9')], [charge('p1', 'a')], 'a: lost (answered payment p9 which has no row)'],
    ['a payment never sent', [], [charge('p1', 'a')], 'a: lost (never sent)'],
  ])('counts %s as a lost payment', (_name, calls: CallResult[], charges: Charge[], problem) => {
    const report = buildReport(input([payment('a')], calls, charges));
    expect(report.lostPayments).toBe(1);
    expect(report.identicalKeys).toBe(0);
    expect(report.passed).toBe(false);
    expect(report.problems).toContain(problem);
  });

  it('fails when the answers to one key differ', () => {
    const calls = [ok('a', 'p1'), { key: 'a', status: 201, body: JSON.stringify({ amount: 100, id: 'p1' }) }];
    const report = buildReport(input([payment('a', 2)], calls, [charge('p1', 'a')]));
    expect(report).toMatchObject({ doubleCharges: 0, lostPayments: 0, identicalKeys: 0, responsesIdentical: false, passed: false });
    expect(report.problems).toEqual(['a: 2 different answers']);
  });

  it('fails on a charge row that belongs to no planned payment', () => {
    const report = buildReport(input([payment('a')], [ok('a', 'p1')], [charge('p1', 'a'), charge('p2', 'zzz')]));
    expect(report.passed).toBe(false);
    expect(report.problems).toEqual(['zzz: 1 charge(s) for no planned payment']);
  });
});

describe('formatReport', () => {
  it('renders stable labels, the skipped crashes and the verdict', () => {
    const text = formatReport(buildReport(input([payment('a')], [ok('a', 'p1')], [charge('p1', 'a'), charge('p2', 'a')])));
    expect(text).toContain('  double charges               1\n');
    expect(text).toContain('  server crashes / restarts    0 (skipped: memory: dies with the process)\n');
    expect(text).toContain('  verdict                      FAIL: 1 double charge(s), 0 lost payment(s), 0 key(s) with differing answers\n');
    expect(text).toContain('  first problems:\n    a: charged 2 times\n');
    expect(text).toContain('--seed 9');
    expect(text).toContain('  clients saw: replays         2\n');
    expect(text).toContain('  clients saw: 409s            1\n');
    expect(text).not.toContain('server counted');
  });

  it('labels what the clients saw apart from what the server counted', () => {
    const metrics = { executions: 1, replays: 5, conflicts: 4, takeovers: 0 };
    const text = formatReport(buildReport({ ...input([payment('a')], [ok('a', 'p1')], [charge('p1', 'a')]), metrics }));
    expect(text).toContain('  clients saw: replays         2\n');
    expect(text).toContain('  server counted: replays      5\n');
    expect(text).toContain('  clients saw: 409s            1\n');
    expect(text).toContain('  server counted: 409s         4\n');
    expect(text).toContain('  server counted: executions   1\n');
    expect(text).toContain('  verdict                      PASS');
    // No row is named "replays" alone: every count says whose it is.
    expect(text).not.toMatch(/^ {2}replays /m);
  });

  it('shows the crashes a plain store took next to the one it skipped, and no skip note when none was', () => {
    const ran = { ...input([payment('a')], [ok('a', 'p1')], [charge('p1', 'a')]), crashes: 1, restarts: 1 };
    const partial = formatReport(buildReport({ ...ran, crashesSkipped: 'the crash inside a handler' }));
    expect(partial).toContain('  server crashes / restarts    1 / 1 (skipped: the crash inside a handler)\n');
    const full = formatReport(buildReport({ ...ran, crashesSkipped: null }));
    expect(full).toContain('  server crashes / restarts    1 / 1\n');
  });

  it.each([
    ['sqlite:/tmp/run/payments.db', 'sqlite:/tmp/run/payments.db', 'retrysafe on SQLite (transactional'],
    ['postgres://app:s3cret@db:5432/app', 'postgres://app:***@db:5432/app', 'retrysafe on PostgreSQL (transactional'],
    ['redis://:s3cret@cache:6379', 'redis://:***@cache:6379', 'retrysafe on Redis (plain'],
    ['memory:', 'memory:', 'retrysafe on memory (plain'],
  ])('names the store it ran on (%s), its password redacted', (store, shown, mode) => {
    const text = formatReport(buildReport({ ...input([payment('a')], [ok('a', 'p1')], [charge('p1', 'a')]), store }));
    expect(text).toContain(`  store                        ${shown}\n`);
    expect(text).toContain(`  mode                         ${mode}`);
    expect(text).not.toContain('s3cret');
  });
});
