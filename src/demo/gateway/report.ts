/**
 * The gateway scenario's verdict: the payments demo's judgement (double executions, lost payments,
 * identical answers per key) over the upstream's own rows, plus what the gateway counted of indeterminate
 * outcomes and their resolution, and the records of the run still open at the end (which must be none).
 *
 * @module
 */
import { redactUrl } from '../../store-url.js';
import { formatRows, type ReportRow } from '../harness/table.js';
import { buildReport, type DemoReport, type ReportInput } from '../payments/report.js';
import type { GatewayCounts } from './supervisor.js';

/** Fields of the payments report that describe the payments server, not the gateway. */
type PaymentsOnly = 'mode' | 'metrics' | 'requestsInFlightAtCrashes';
const PAYMENTS_ONLY: readonly PaymentsOnly[] = ['mode', 'metrics', 'requestsInFlightAtCrashes'];

/** The report `retrysafe demo --scenario gateway` prints (`--json` prints exactly this object). */
export interface GatewayDemoReport extends Omit<DemoReport, PaymentsOnly> {
  readonly scenario: 'gateway';
  /**
   * Read from the gateways' Prometheus `/metrics` just before each crash and at the end (what a killed
   * gateway counted between that read and the SIGKILL died with it).
   */
  readonly gateway: GatewayCounts;
  /**
   * Records of the run's keys not completed at the end, read from the store: held as indeterminate, or
   * in flight. `passed` needs 0: every indeterminate outcome was resolved. `null` on a store that lives
   * in the gateway process (`memory:`, `sqlite::memory:`), which no other process can read.
   */
  readonly recordsOpen: number | null;
}

/** What {@link buildGatewayReport} judges; `charges` are the upstream's executions. */
export interface GatewayReportInput extends Omit<ReportInput, 'unsafe' | 'metrics'> {
  readonly gateway: GatewayCounts;
  readonly recordsOpen: number | null;
}

/** Judges a run. Pure: the same input gives the same report. */
export function buildGatewayReport(input: GatewayReportInput): GatewayDemoReport {
  const payments = buildReport({ ...input, unsafe: false, metrics: null });
  const judged = Object.fromEntries(Object.entries(payments).filter(([field]) => !PAYMENTS_ONLY.includes(field as PaymentsOnly))) as Omit<DemoReport, PaymentsOnly>;
  const open = input.recordsOpen ?? 0;
  const problems = open === 0 ? judged.problems : [`${input.recordsOpen} record(s) of the run still open (indeterminate or in flight)`, ...judged.problems];
  return { scenario: 'gateway', ...judged, gateway: input.gateway, recordsOpen: input.recordsOpen, passed: judged.passed && open === 0, problems };
}

/** Renders the report as the plain-text table `retrysafe demo --scenario gateway` prints. */
export function formatGatewayReport(report: GatewayDemoReport): string {
  const crashes = report.crashesSkipped === null ? `${report.serverCrashes} / ${report.serverRestarts}` : `0 (skipped: ${report.crashesSkipped})`;
  const { gateway } = report;
  const rows: ReportRow[] = [
    ['seed', report.seed],
    ['store', redactUrl(report.store)],
    ['upstream', 'examples/gateway/upstream.py (Python, its own SQLite database)'],
    ['logical payments', report.logicalPayments],
    ['concurrent duplicates', report.concurrentDuplicates],
    ['upstream resets injected', `${report.lostRepliesInjected} (gateway saw ${gateway.upstreamResets})`],
    ['upstream timeouts injected', `${report.slowHandlers} (gateway saw ${gateway.upstreamTimeouts})`],
    ['gateway crashes / restarts', crashes],
    ['clients saw: HTTP attempts', report.httpAttempts],
    ['clients saw: replays', report.replays],
    ['clients saw: 409s', report.conflicts],
    ['clients saw: timeouts', report.clientTimeouts],
    ['clients saw: network errors', report.networkErrors],
    ['indeterminate outcomes', gateway.indeterminate],
    ['answered outcome-unknown', gateway.outcomeUnknownAnswers],
    ['reconciled: found / not run', `${gateway.reconciledCompleted} / ${gateway.reconciledReleased}`],
    ['records left open', report.recordsOpen ?? `not read (${report.store} lives in the gateway process)`],
    ['upstream executions (rows)', report.chargesWritten],
    ['double executions', report.doubleCharges],
    ['lost payments', report.lostPayments],
    ['responses identical per key', `${report.identicalKeys} / ${report.logicalPayments}`],
    ['duration', `${(report.durationMs / 1000).toFixed(1)} s`],
    ['removed afterwards', report.removed.join(', ')],
  ];
  const verdict = report.passed
    ? 'PASS: every payment executed exactly once upstream; every retry got the original answer; every indeterminate outcome resolved'
    : `FAIL: ${report.doubleCharges} double execution(s), ${report.lostPayments} lost payment(s), ${report.logicalPayments - report.identicalKeys} key(s) with differing answers, ${report.recordsOpen ?? 0} record(s) left open`;
  const problems = report.problems.map((problem) => `    ${problem}`);
  return [
    'retrysafe demo: a Python payments API behind retrysafe gateway, under upstream resets and timeouts, duplicate bursts and gateway crashes',
    ...formatRows([...rows, ['verdict', verdict]]),
    ...(problems.length > 0 ? ['  first problems:', ...problems] : []),
    '  (indeterminate outcomes, answered outcome-unknown, reconciled: counted by the gateways, from their /metrics)',
    `  (repeat the same faults with --scenario gateway --seed ${report.seed})`,
    '',
  ].join('\n');
}
