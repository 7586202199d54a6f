import { describe, expect, it } from 'vitest';
import type { GatewayDemoReport } from '../../../src/demo/gateway/report.js';
import { pythonAvailable } from '../../gateway/support.js';
import { POSTGRES_URL, postgresAvailable } from '../../support/services.js';
import { runCli } from '../../support/run-cli.js';

const python = await pythonAvailable();
const postgres = await postgresAvailable();

/**
 * The scenario is a fixed amount of work: an upstream and a gateway in child processes, two gateway
 * crashes, each followed by a restart and a lease of 3 s. The CLI child is stopped 10 s before the test's
 * budget ends, so its output still reaches the failure message.
 */
const DEMO_TIMEOUT_MS = 180_000;
const CLI_TIMEOUT_MS = DEMO_TIMEOUT_MS - 10_000;

async function demo(...args: string[]): Promise<{ code: number | null; report: GatewayDemoReport }> {
  const result = await runCli(['demo', '--scenario', 'gateway', '--json', '--seed', '7', '--payments', '40', ...args], CLI_TIMEOUT_MS);
  try {
    return { code: result.code, report: JSON.parse(result.stdout) as GatewayDemoReport };
  } catch (error) {
    throw new Error(`the demo printed no JSON report (exit ${String(result.code)}):\n${result.stderr}`, { cause: error });
  }
}

/** What every passing run shows, whatever the store. */
function expectPassed(report: GatewayDemoReport): void {
  expect(report).toMatchObject({
    scenario: 'gateway',
    seed: 7,
    logicalPayments: 40,
    // One execution upstream per payment, read from the upstream's own database.
    chargesWritten: 40,
    doubleCharges: 0,
    lostPayments: 0,
    identicalKeys: 40,
    responsesIdentical: true,
    crashesSkipped: null,
    recordsOpen: 0,
    passed: true,
    problems: [],
  });
  // The gateway SIGKILLed once before the upstream committed and once after, and restarted both times.
  expect(report.serverCrashes).toBe(2);
  expect(report.serverRestarts).toBe(2);
  expect(report.lostRepliesInjected).toBeGreaterThan(0);
  expect(report.slowHandlers).toBeGreaterThan(0);
  expect(report.concurrentDuplicates).toBeGreaterThan(0);
  expect(report.replays).toBeGreaterThan(0);
  expect(report.conflicts).toBeGreaterThan(0);
  const { gateway } = report;
  // The gateway met the injected resets (a fault in flight at a crash dies with the gateway before it
  // counts it; a loaded machine may add timeouts of its own, never resets).
  expect(gateway.upstreamResets + gateway.upstreamTimeouts).toBeGreaterThan(0);
  expect(gateway.upstreamResets).toBeLessThanOrEqual(report.lostRepliesInjected);
  // Every reset or timeout held its record (a hook that did not answer a takeover in time holds one more);
  // the hook settled every held record (records left open: 0), and each resolution was counted.
  expect(gateway.indeterminate).toBeGreaterThanOrEqual(gateway.upstreamResets + gateway.upstreamTimeouts);
  expect(gateway.reconciledCompleted + gateway.reconciledReleased).toBeGreaterThanOrEqual(gateway.indeterminate);
  // The request the upstream held without committing when the gateway died was found not run, and sent once.
  expect(gateway.reconciledReleased).toBeGreaterThanOrEqual(1);
}

describe.runIf(python)('retrysafe demo --scenario gateway (a Python upstream behind retrysafe gateway, real SIGKILL)', () => {
  it('executes every payment once upstream on SQLite and resolves every indeterminate outcome through the reconcile hook', { timeout: DEMO_TIMEOUT_MS }, async () => {
    const { code, report } = await demo();
    expect(report.store).toMatch(/^sqlite:.*gateway\.db$/);
    expectPassed(report);
    expect(code).toBe(0);
  });

  it.runIf(postgres)('does the same on PostgreSQL', { timeout: DEMO_TIMEOUT_MS }, async () => {
    const { code, report } = await demo('--store', POSTGRES_URL);
    expect(report.store).toBe(POSTGRES_URL);
    expectPassed(report);
    expect(code).toBe(0);
  });

  it('prints the plain-text report with its stable labels', { timeout: DEMO_TIMEOUT_MS }, async () => {
    const result = await runCli(['demo', '--scenario', 'gateway', '--payments', '20', '--seed', '3', '--store', 'memory:'], CLI_TIMEOUT_MS);
    // Nothing on stderr but the progress lines.
    expect(result.stderr.split('\n').filter((line) => line !== '' && !line.startsWith('retrysafe demo: '))).toEqual([]);
    expect(result.code).toBe(0);
    for (const label of [
      'seed                         3',
      'logical payments             20',
      'gateway crashes / restarts   0 (skipped:',
      'clients saw: replays',
      'clients saw: 409s',
      'indeterminate outcomes',
      'reconciled: found / not run',
      'records left open            not read (memory: lives in the gateway process)',
      'upstream executions (rows)   20',
      'double executions            0',
      'lost payments                0',
      'responses identical per key  20 / 20',
      'verdict                      PASS',
    ]) {
      expect(result.stdout).toContain(label);
    }
  });
});
