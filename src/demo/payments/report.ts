/**
 * The demo's verdict: from the plan, what every call finally got and the rows in the charges table, it
 * counts double charges, lost payments and keys whose answers differ, and renders the report as text or
 * JSON.
 *
 * @module
 */
import type { CallResult } from '../harness/traffic.js';
import { redactUrl } from '../../store-url.js';
import { formatRows, type ReportRow } from '../harness/table.js';
import type { Charge } from './ledger.js';
import type { TrafficCounters } from '../harness/client.js';
import type { PlannedPayment, ServerFault } from '../harness/plan.js';
import type { ReceiverCounts } from './metrics.js';

/** The report `retrysafe demo` prints (`--json` prints exactly this object). */
export interface DemoReport {
  readonly seed: number;
  /** The `--store` value. */
  readonly store: string;
  /** `retrysafe`, or `unsafe` when the server ran without the idempotency middleware. */
  readonly mode: 'retrysafe' | 'unsafe';
  readonly logicalPayments: number;
  /** Extra concurrent calls sent under an already-used key (bursts). */
  readonly concurrentDuplicates: number;
  readonly httpAttempts: number;
  /** Responses with `Idempotent-Replayed: true`. */
  readonly replays: number;
  /** 409 answers to a duplicate of a request in flight. */
  readonly conflicts: number;
  /** Committed replies the server dropped (socket destroyed) on purpose. */
  readonly lostRepliesInjected: number;
  /** Handlers made to outlast the client's per-attempt timeout. */
  readonly slowHandlers: number;
  /** Attempts the client abandoned at its per-attempt timeout. */
  readonly clientTimeouts: number;
  /** Attempts that ended in another network error (refused, reset), lost replies included. */
  readonly networkErrors: number;
  readonly serverCrashes: number;
  readonly serverRestarts: number;
  /**
   * Requests the server had let in and not yet answered when it reached its crash points, summed over the
   * crashes (it lets no new request in past a crash point). Each may have committed before the SIGKILL
   * landed, its metric counts dying with the server: the most by which the receiver's `executions` can fall
   * short of the charge rows.
   */
  readonly requestsInFlightAtCrashes: number;
  /**
   * Which crash faults were not injected and why, or `null` when all were: all of them on a store that dies
   * with the process; the crash inside the handler on a plain store (Redis), where it would re-execute.
   */
  readonly crashesSkipped: string | null;
  /** Rows in the charges table for this run's keys. */
  readonly chargesWritten: number;
  /** Keys with more than one charge row. */
  readonly doubleCharges: number;
  /** Payments with a call that never got a 2xx, a 2xx whose payment id has no row, or no row at all. */
  readonly lostPayments: number;
  /** Keys whose 2xx answers all carry the same body, naming the key's one charge row. */
  readonly identicalKeys: number;
  readonly responsesIdentical: boolean;
  /** Wall time of the run, in milliseconds. */
  readonly durationMs: number;
  /**
   * What the run wrote outside its processes, each removed once the report was built, e.g.
   * `schema retrysafe_demo_1a2b3c4d`, `Redis keys retrysafe_demo_1a2b3c4d:*`, `temporary directory /tmp/…`.
   */
  readonly removed: readonly string[];
  /** `true` when no payment was charged twice or lost and every key's answers are identical. */
  readonly passed: boolean;
  /** The first few problems found, one line each. */
  readonly problems: readonly string[];
  /**
   * The receiver's own OpenTelemetry counts, read through an in-memory metric reader in the server
   * (`retrysafe.requests` by outcome, `retrysafe.lease.takeovers`); `null` in unsafe mode or when
   * `@opentelemetry/sdk-metrics` is not installed.
   */
  readonly metrics: ReceiverCounts | null;
}

/** What {@link buildReport} judges. */
export interface ReportInput {
  readonly seed: number;
  readonly store: string;
  readonly unsafe: boolean;
  readonly plan: readonly PlannedPayment[];
  readonly calls: readonly CallResult[];
  /** The business rows: what counts as one execution of a key (the gateway scenario: the upstream's rows). */
  readonly charges: readonly Pick<Charge, 'id' | 'idempotencyKey'>[];
  readonly counters: Readonly<TrafficCounters>;
  /** Faults the server reported taking effect, by kind. */
  readonly faults: Readonly<Record<ServerFault, number>>;
  readonly crashes: number;
  readonly restarts: number;
  /** Requests in flight at the crash points, summed. */
  readonly inFlightAtCrashes: number;
  readonly crashesSkipped: string | null;
  readonly durationMs: number;
  /** What the run wrote outside its processes, removed at the end. */
  readonly removed: readonly string[];
  readonly metrics: ReceiverCounts | null;
}

/** Most problems listed in a report. */
const MAX_PROBLEMS = 10;

/** Judges a run. Pure: the same input gives the same report. */
export function buildReport(input: ReportInput): DemoReport {
  const rowsByKey = groupBy(input.charges, (charge) => charge.idempotencyKey ?? '');
  const callsByKey = groupBy(input.calls, (call) => call.key);
  const problems: string[] = [];
  let doubles = 0;
  let lost = 0;
  let identical = 0;
  for (const { key } of input.plan) {
    const rows = rowsByKey.get(key) ?? [];
    const calls = callsByKey.get(key) ?? [];
    rowsByKey.delete(key);
    if (rows.length > 1) {
      doubles++;
      problems.push(`${key}: charged ${rows.length} times`);
    }
    const failed = calls.find((call) => call.status === undefined || call.status < 200 || call.status > 299);
    const ids = new Set(calls.map((call) => paymentId(call.body)));
    const unknownId = [...ids].find((id) => id === undefined || !rows.some((row) => row.id === id));
    if (rows.length === 0 || failed !== undefined || calls.length === 0 || unknownId !== undefined) {
      lost++;
      problems.push(`${key}: lost (${describeLoss(rows.length, calls.length, failed, unknownId)})`);
    }
    const bodies = new Set(calls.map((call) => call.body));
    if (failed === undefined && calls.length > 0 && bodies.size === 1 && unknownId === undefined) identical++;
    else if (bodies.size > 1) problems.push(`${key}: ${bodies.size} different answers`);
  }
  for (const [key, rows] of rowsByKey) problems.push(`${key || '(no key)'}: ${rows.length} charge(s) for no planned payment`);
  const { counters } = input;
  return {
    seed: input.seed,
    store: input.store,
    mode: input.unsafe ? 'unsafe' : 'retrysafe',
    logicalPayments: input.plan.length,
    concurrentDuplicates: input.plan.reduce((sum, payment) => sum + payment.copies - 1, 0),
    httpAttempts: counters.attempts,
    replays: counters.replays,
    conflicts: counters.conflicts,
    lostRepliesInjected: input.faults['lost-reply'],
    slowHandlers: input.faults.slow,
    clientTimeouts: counters.timeouts,
    networkErrors: counters.networkErrors,
    serverCrashes: input.crashes,
    serverRestarts: input.restarts,
    requestsInFlightAtCrashes: input.inFlightAtCrashes,
    crashesSkipped: input.crashesSkipped,
    chargesWritten: input.charges.length,
    doubleCharges: doubles,
    lostPayments: lost,
    identicalKeys: identical,
    responsesIdentical: identical === input.plan.length,
    durationMs: Math.round(input.durationMs),
    removed: input.removed,
    passed: doubles === 0 && lost === 0 && identical === input.plan.length && rowsByKey.size === 0,
    problems: problems.slice(0, MAX_PROBLEMS),
    metrics: input.metrics,
  };
}

/** Renders the report as the plain-text table `retrysafe demo` prints. */
export function formatReport(report: DemoReport): string {
  const counted = `${report.serverCrashes} / ${report.serverRestarts}`;
  const crashes =
    report.crashesSkipped === null
      ? counted
      : `${report.serverCrashes === 0 ? '0' : counted} (skipped: ${report.crashesSkipped})`;
  const rows: ReportRow[] = [
    ['seed', report.seed],
    ['store', redactUrl(report.store)],
    ['mode', report.mode === 'unsafe' ? 'UNSAFE (no idempotency middleware)' : `retrysafe on ${storeKind(report.store)}`],
    ['logical payments', report.logicalPayments],
    ['concurrent duplicates', report.concurrentDuplicates],
    ['lost replies injected', report.lostRepliesInjected],
    ['slow handlers injected', report.slowHandlers],
    ['server crashes / restarts', crashes],
  ];
  const clients: ReportRow[] = [
    ['HTTP attempts', report.httpAttempts],
    ['replays', report.replays],
    ['409s', report.conflicts],
    ['timeouts', report.clientTimeouts],
    ['network errors', report.networkErrors],
  ];
  const judged: ReportRow[] = [
    ['charges written (rows)', report.chargesWritten],
    ['double charges', report.doubleCharges],
    ['lost payments', report.lostPayments],
    ['responses identical per key', `${report.identicalKeys} / ${report.logicalPayments}`],
    ['duration', `${(report.durationMs / 1000).toFixed(1)} s`],
    ['removed afterwards', report.removed.join(', ')],
  ];
  const verdict = report.passed
    ? 'PASS: every payment charged exactly once; every retry got the original answer'
    : `FAIL: ${report.doubleCharges} double charge(s), ${report.lostPayments} lost payment(s), ${report.logicalPayments - report.identicalKeys} key(s) with differing answers`;
  const problems = report.problems.map((problem) => `    ${problem}`);
  return [
    'retrysafe demo: a payments API under lost replies, timeouts, duplicate bursts and crashes',
    ...formatRows([
      ...rows,
      ...labelled('clients saw', clients),
      ...(report.metrics === null ? [] : labelled('server counted', serverRows(report.metrics))),
      ...judged,
      ['verdict', verdict],
    ]),
    ...(problems.length > 0 ? ['  first problems:', ...problems] : []),
    ...(report.metrics === null
      ? []
      : [
          '  (the server also counts answers no client received: a lost reply, an attempt a client gave up on' +
            (report.serverCrashes === 0 ? ')' : `; a SIGKILLed server's counts die with it: ${report.requestsInFlightAtCrashes} request(s) were in flight at the crashes)`),
        ]),
    `  (repeat the same faults with --seed ${report.seed})`,
    '',
  ].join('\n');
}

/** The receiver's own counts (OpenTelemetry `retrysafe.requests` by outcome, `retrysafe.lease.takeovers`) as report rows. */
function serverRows(metrics: ReceiverCounts): ReportRow[] {
  return [
    ['executions', metrics.executions],
    ['replays', metrics.replays],
    ['409s', metrics.conflicts],
    ['takeovers', metrics.takeovers],
  ];
}

/** `rows` with each label prefixed by `who`, e.g. `clients saw: replays`. */
function labelled(who: string, rows: readonly ReportRow[]): ReportRow[] {
  return rows.map(([label, value]) => [`${who}: ${label}`, value]);
}

/** Which store, and how it keeps the charge and its record together, named from its `--store` value. */
function storeKind(store: string): string {
  const scheme = store.slice(0, store.indexOf(':')).toLowerCase();
  if (store === 'sqlite::memory:') return 'SQLite in memory (transactional; records die with the server)';
  if (scheme === 'sqlite') return 'SQLite (transactional: charge, claim and response commit together)';
  if (scheme === 'postgres' || scheme === 'postgresql') return 'PostgreSQL (transactional: charge and response commit together)';
  if (scheme === 'redis' || scheme === 'rediss') return 'Redis (plain: the charges commit apart, in SQLite)';
  return 'memory (plain; records die with the server)';
}

function paymentId(body: string | undefined): string | undefined {
  if (body === undefined) return undefined;
  try {
    const id = (JSON.parse(body) as { id?: unknown }).id;
    // The payments API answers `pay_…`; the gateway scenario's upstream its integer row id.
    return typeof id === 'string' ? id : typeof id === 'number' ? String(id) : undefined;
  } catch {
    return undefined;
  }
}

function describeLoss(rows: number, calls: number, failed: CallResult | undefined, unknownId: string | undefined): string {
  if (failed) return failed.error ?? `answered ${String(failed.status)}`;
  if (calls === 0) return 'never sent';
  if (rows === 0) return 'no charge row';
  return `answered payment ${unknownId ?? '(no id)'} which has no row`;
}

function groupBy<T>(items: readonly T[], keyOf: (item: T) => string): Map<string, T[]> {
  const groups = new Map<string, T[]>();
  for (const item of items) {
    const key = keyOf(item);
    const group = groups.get(key);
    if (group) group.push(item);
    else groups.set(key, [item]);
  }
  return groups;
}
