import { describe, expect, it } from 'vitest';
import type { DemoReport } from '../../../src/demo/payments/report.js';
import { POSTGRES_URL, REDIS_URL, postgresAvailable, redisAvailable } from '../../support/services.js';
import { runCli } from '../../support/run-cli.js';

const postgres = await postgresAvailable();
const redis = await redisAvailable();

/**
 * The receiver's own metrics (read in the server through an in-memory metric reader) against what the
 * report counted independently. The server sends its counts before each answer leaves and before each
 * crash fault, so the parent holds the count of every answer a client got.
 *
 * Executions: every charge row is one execution, so without a crash the two are equal. A SIGKILLed server
 * takes with it the counts of what ran after its crash point: from there it lets no request in, but the
 * requests it had let in and not yet answered may still commit before the kill lands. The executions then
 * fall short of the rows by at most those requests, which the server reports with each crash
 * (`requestsInFlightAtCrashes`).
 *
 * Replays and 409s: every one a client saw, the receiver counted. It counted more only for attempts whose
 * answer never reached a client, which the clients count: those they abandoned at the 400 ms timeout and
 * those cut off by a network error. Of these, each slow handler's attempt (timed out) and each lost reply's
 * (socket destroyed) was answered with its execution, unless the handler outlasted its lease and a retry took
 * the claim over (then it fails with a 409 lease_lost). On an idle machine without crashes that leaves
 * nothing: the counts are equal. On a loaded one ordinary attempts time out too, so the surplus is bounded by
 * those timeouts, not fixed.
 */
function expectMetricsAgree(report: DemoReport, takeovers: number | 'at least one'): void {
  const metrics = report.metrics;
  if (metrics === null) throw new Error('the report carries no metrics');
  if (report.serverCrashes === 0) {
    expect(report.requestsInFlightAtCrashes).toBe(0);
    expect(metrics.executions).toBe(report.chargesWritten);
  } else {
    expect(metrics.executions).toBeLessThanOrEqual(report.chargesWritten);
    expect(report.chargesWritten - metrics.executions).toBeLessThanOrEqual(report.requestsInFlightAtCrashes);
  }
  if (takeovers === 'at least one') {
    expect(metrics.takeovers).toBeGreaterThanOrEqual(1);
    // A takeover needs a claim whose holder is gone (the crashed handler's, or one of the requests in flight
    // at a crash) or has outlasted its lease, which then fails to save its response: a 409 lease_lost.
    expect(metrics.takeovers).toBeLessThanOrEqual(report.serverCrashes + report.requestsInFlightAtCrashes + metrics.conflicts);
  } else expect(metrics.takeovers).toBe(takeovers);
  expect(metrics.replays).toBeGreaterThanOrEqual(report.replays);
  expect(metrics.conflicts).toBeGreaterThanOrEqual(report.conflicts);
  const unseen = metrics.replays - report.replays + (metrics.conflicts - report.conflicts);
  const unansweredOthers = report.clientTimeouts - report.slowHandlers + (report.networkErrors - report.lostRepliesInjected);
  expect(unseen).toBeLessThanOrEqual(unansweredOthers + metrics.takeovers);
  // Every answer the receiver gave went to an attempt the clients sent.
  expect(metrics.executions + metrics.replays + metrics.conflicts).toBeLessThanOrEqual(report.httpAttempts);
}

/**
 * Each demo is a fixed amount of work (a server in a child process, its crashes and restarts): the
 * PostgreSQL one was seen past 60 s with the machine loaded three times over. The CLI child is stopped
 * 10 s before the test's budget ends, so its output still reaches the failure message.
 */
const DEMO_TIMEOUT_MS = 180_000;
const CLI_TIMEOUT_MS = DEMO_TIMEOUT_MS - 10_000;

async function demo(...args: string[]): Promise<{ code: number | null; report: DemoReport }> {
  const result = await runCli(['demo', '--json', '--seed', '7', ...(args.includes('--payments') ? [] : ['--payments', '60']), ...args], CLI_TIMEOUT_MS);
  try {
    return { code: result.code, report: JSON.parse(result.stdout) as DemoReport };
  } catch (error) {
    throw new Error(`the demo printed no JSON report (exit ${String(result.code)}):\n${result.stderr}`, { cause: error });
  }
}

describe('retrysafe demo (end to end, real HTTP, real SIGKILL)', () => {
  it('charges every payment exactly once on SQLite through lost replies, timeouts, bursts and crashes', { timeout: DEMO_TIMEOUT_MS }, async () => {
    const { code, report } = await demo();
    expect(report).toMatchObject({
      seed: 7,
      mode: 'retrysafe',
      logicalPayments: 60,
      chargesWritten: 60,
      doubleCharges: 0,
      lostPayments: 0,
      identicalKeys: 60,
      responsesIdentical: true,
      crashesSkipped: null,
      passed: true,
      problems: [],
    });
    expect(report.store).toMatch(/^sqlite:.*payments\.db$/);
    // One crash inside a handler before COMMIT, one after COMMIT before the reply, each restarted; or one
    // SIGKILL for both when the second request reaches its crash point before the first kill lands.
    expect([1, 2]).toContain(report.serverCrashes);
    expect(report.serverRestarts).toBe(report.serverCrashes);
    // A lost reply planned for an attempt in flight when a crash kills the server dies with it, so with
    // 60 payments a run may inject none; the faults that can be counted on are below.
    expect(report.slowHandlers).toBeGreaterThan(0);
    expect(report.clientTimeouts).toBeGreaterThan(0);
    expect(report.concurrentDuplicates).toBeGreaterThan(0);
    expect(report.replays).toBeGreaterThan(0);
    expect(report.httpAttempts).toBeGreaterThan(report.logicalPayments + report.concurrentDuplicates);
    // The claim is rolled back with the crashed handler's transaction: nothing to take over.
    expectMetricsAgree(report, 0);
    expect(code).toBe(0);
  });

  it('answers in-flight duplicates with 409 on the memory store, and says why it skips the crashes', { timeout: DEMO_TIMEOUT_MS }, async () => {
    const { code, report } = await demo('--store', 'memory:');
    expect(report).toMatchObject({ store: 'memory:', chargesWritten: 60, doubleCharges: 0, lostPayments: 0, serverCrashes: 0, passed: true });
    expect(report.crashesSkipped).toMatch(/die with it/);
    expect(report.conflicts).toBeGreaterThan(0);
    expect(report.replays).toBeGreaterThan(0);
    expectMetricsAgree(report, 0);
    expect(code).toBe(0);
  });

  it.runIf(postgres)('on PostgreSQL: writes the charges in the request transaction, answers in-flight duplicates 409, survives both crashes', { timeout: DEMO_TIMEOUT_MS }, async () => {
    const { code, report } = await demo('--payments', '40', '--store', POSTGRES_URL);
    expect(report).toMatchObject({
      store: POSTGRES_URL,
      logicalPayments: 40,
      chargesWritten: 40,
      doubleCharges: 0,
      lostPayments: 0,
      responsesIdentical: true,
      crashesSkipped: null,
      passed: true,
    });
    // The crash inside the handler leaves a committed claim whose lease must expire; the retry then takes over.
    // Two crash points; one SIGKILL covers both when they are reached in the same server's lifetime.
    expect([1, 2]).toContain(report.serverCrashes);
    expect(report.serverRestarts).toBe(report.serverCrashes);
    // The claim commits apart from the business transaction, so a duplicate sees it at once.
    expect(report.conflicts).toBeGreaterThan(0);
    expect(report.replays).toBeGreaterThan(0);
    // The one crash inside a handler left its committed claim to a retry's takeover; on a loaded machine a
    // handler can also outlast the 3 s lease, so more takeovers may follow (each then a 409 lease_lost).
    expectMetricsAgree(report, 'at least one');
    expect(code).toBe(0);
  });

  it.runIf(redis)('on Redis: injects only the crash after the record is saved, says why, and charges each payment once', { timeout: DEMO_TIMEOUT_MS }, async () => {
    const { code, report } = await demo('--payments', '40', '--store', REDIS_URL);
    expect(report).toMatchObject({ store: REDIS_URL, logicalPayments: 40, chargesWritten: 40, doubleCharges: 0, lostPayments: 0, passed: true });
    expect(report.serverCrashes).toBe(1);
    expect(report.serverRestarts).toBe(1);
    expect(report.crashesSkipped).toMatch(/crash inside a handler.*re-executes.*docs\/redis\.md/);
    expect(report.replays).toBeGreaterThan(0);
    expect(code).toBe(0);
  });

  it('catches the double charges when the server runs --unsafe (no idempotency middleware) and exits 1', { timeout: DEMO_TIMEOUT_MS }, async () => {
    const { code, report } = await demo('--store', 'memory:', '--unsafe');
    expect(report.mode).toBe('unsafe');
    expect(report.doubleCharges).toBeGreaterThan(0);
    expect(report.chargesWritten).toBeGreaterThan(60);
    expect(report.replays).toBe(0);
    expect(report.passed).toBe(false);
    expect(report.problems.some((problem) => /charged \d+ times/.test(problem))).toBe(true);
    expect(code).toBe(1);
  });

  it('prints the plain-text report with its stable labels', { timeout: DEMO_TIMEOUT_MS }, async () => {
    const result = await runCli(['demo', '--payments', '20', '--seed', '3', '--store', 'memory:'], CLI_TIMEOUT_MS);
    expect(result.code).toBe(0);
    for (const label of [
      'seed                         3',
      'logical payments             20',
      'clients saw: HTTP attempts',
      'clients saw: replays',
      'clients saw: 409s',
      'lost replies injected',
      'clients saw: timeouts',
      // The receiver's own counts, apart from what the clients saw (memory: runs no crash, so none died).
      'server counted: executions   20',
      'server counted: replays',
      'server counted: 409s',
      'server counted: takeovers    0',
      'server crashes / restarts    0 (skipped:',
      'charges written (rows)       20',
      'double charges               0',
      'lost payments                0',
      'responses identical per key  20 / 20',
      'verdict                      PASS',
    ]) {
      expect(result.stdout).toContain(label);
    }
  });
});
