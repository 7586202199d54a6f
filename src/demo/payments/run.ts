/**
 * One demo run: plan the faults, start the payments server, drive it with the retrying client through
 * lost replies, timeouts, duplicate bursts and crashes, read the charge rows, and judge.
 *
 * @module
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseStoreUrl } from '../../store-url.js';
import { SLOW_HANDLER_MS } from '../harness/chaos.js';
import { ATTEMPT_TIMEOUT_MS, createDemoClient } from '../harness/client.js';
import { planFaults, type CrashFault, type ServerFault } from '../harness/plan.js';
import { DemoInterruptedError } from '../harness/interrupted.js';
import { reportProgress, type DriveTally } from '../harness/progress.js';
import { runStore } from '../harness/run-store.js';
import { concurrencyOf, drive } from '../harness/traffic.js';
import { buildReport, type DemoReport } from './report.js';
import { ServerSupervisor } from './supervisor.js';

/** Options of {@link runDemo}. */
export interface DemoOptions {
  /** Logical payments, at least 10. @defaultValue 240 */
  readonly payments?: number;
  /** Payments in flight at once, 1..256. @defaultValue 12 */
  readonly concurrency?: number;
  /** Seed of the fault plan, 0..2^32-1. @defaultValue a random one (printed in the report) */
  readonly seed?: number;
  /**
   * A `--store` value. On PostgreSQL the records and the charges go to a schema of this run's own
   * (`retrysafe_demo_<run>`, dropped afterwards); on Redis the records go under a key prefix of its own
   * (`retrysafe_demo_<run>`, deleted afterwards) and the charges to a SQLite file in a temporary directory,
   * as on any other plain store (`memory:`). It must not name a `?schema=` or `?prefix=`.
   * @defaultValue a SQLite file in a fresh temporary directory, removed afterwards
   */
  readonly store?: string;
  /** Serve without the idempotency middleware, to show what the same traffic does without retrysafe. @defaultValue false */
  readonly unsafe?: boolean;
  /**
   * Stops the run (Ctrl-C): the server is stopped, the run's PostgreSQL schema or Redis keys and its
   * temporary directory are removed, and the run rejects with {@link DemoInterruptedError}.
   */
  readonly signal?: AbortSignal;
  /**
   * Told every 2 s while the run goes, one line such as
   * `payments 37/240 answered (48 sent), 412 HTTP attempts, server crashes 1, restarts 1`, and then
   * `reading the charges` and `stopping the payments server, then removing schema retrysafe_demo_1a2b3c4d, …`
   * as the run ends.
   * @defaultValue no progress is reported
   */
  readonly onProgress?: (line: string) => void;
}

/**
 * The idempotency lease, in milliseconds. Short, so a payment whose server was killed mid-handler on
 * PostgreSQL (the claim commits apart, its lease outlives the process) is retried within seconds, and long
 * enough that a `slow` handler never loses its lease to a retry.
 */
export const DEMO_LEASE_MS = 3_000;
/** Why the crash inside the handler is not injected on a plain durable store. */
const PLAIN_STORE_SKIP =
  'the crash inside a handler, and the crash after the record waits for in-flight payments to save theirs: on a plain ' +
  'store a charge commits apart from its record, so a crash between them re-executes it once the lease expires ' +
  '(docs/redis.md; recovery points close that window)';

/**
 * Runs the demo and resolves with its report (whether it passed or not).
 *
 * @throws TypeError naming the option when an option is invalid
 * @throws {@link StoreUrlError} when `store` is not a valid `--store` value
 * @throws TypeError when `store` names a `?schema=` or a `?prefix=`
 * @throws {@link StoreOpenError} when the store cannot be reached or refuses
 * @throws Error when the payments server cannot start or dies in a way the demo did not cause
 * @throws {@link DemoInterruptedError} when `signal` aborts, once the run's schema or keys and its directory are removed
 * @example
 * ```ts
 * const report = await runDemo({ payments: 240, seed: 42 });
 * process.exitCode = report.passed ? 0 : 1;
 * ```
 */
export async function runDemo(options: DemoOptions = {}): Promise<DemoReport> {
  const started = performance.now();
  const payments = options.payments ?? 240;
  const concurrency = concurrencyOf(options.concurrency);
  const seed = options.seed ?? randomBytes(4).readUInt32BE(0);
  const unsafe = options.unsafe ?? false;
  const directory = await mkdtemp(join(tmpdir(), 'retrysafe-demo-'));
  try {
    // Keys (and the PostgreSQL schema or Redis prefix) are unique per run, so runs on one server never collide.
    const runId = randomBytes(4).toString('hex');
    const named = options.store ?? `sqlite:${join(directory, 'payments.db')}`;
    const target = parseStoreUrl(named);
    const ours = runStore(named, runId);
    const store = ours.url;
    const crashes: CrashFault[] = !target.durable ? [] : target.transactional ? ['crash-mid-handler', 'crash-after-commit'] : ['crash-after-commit'];
    const crashesSkipped = !target.durable
      ? `${named} keeps its records in the server process, so they would die with it`
      : target.transactional
        ? null
        : PLAIN_STORE_SKIP;
    const keyPrefix = `pay-${runId}`;
    const plan = planFaults({ seed, payments, keyPrefix, crashes });
    const created = [...ours.created, `temporary directory ${directory}`];
    const failure = new AbortController();
    const interrupted = new DemoInterruptedError(created);
    const onInterrupt = (): void => failure.abort(interrupted);
    options.signal?.addEventListener('abort', onInterrupt, { once: true });
    const client = createDemoClient({ attemptTimeoutMs: ATTEMPT_TIMEOUT_MS, deadlineMs: 30_000, maxAttempts: 100 });
    const faults: Record<ServerFault, number> = { 'lost-reply': 0, slow: 0, 'crash-mid-handler': 0, 'crash-after-commit': 0 };
    const server = new ServerSupervisor({
      config: { store, unsafe, slowMs: SLOW_HANDLER_MS, leaseMs: DEMO_LEASE_MS, runId, directory },
      crashes: crashes.length > 0,
      onFault: (key, fault) => {
        faults[fault]++;
        client.faultApplied(key);
      },
      onFailure: (error) => failure.abort(error),
      signal: failure.signal,
    });
    const tally: DriveTally = { sent: 0, answered: 0 };
    let phase = 'starting the payments server';
    const progress = reportProgress(options.onProgress, () =>
      phase === 'traffic'
        ? `payments ${tally.answered}/${payments} answered (${tally.sent} sent), ${client.counters.attempts} HTTP attempts, ` +
          `server crashes ${server.crashes}, restarts ${server.restarts}`
        : phase,
    );
    try {
      if (options.signal?.aborted === true) throw interrupted;
      await ours.prepare();
      failure.signal.throwIfAborted();
      await server.start();
      failure.signal.throwIfAborted();
      phase = 'traffic';
      const calls = await drive({ plan, concurrency, origin: server.origin, path: '/payments', fetch: client.fetch, signal: failure.signal, tally });
      // The final tally, also for a run shorter than the interval between progress lines.
      progress.now();
      phase = 'reading the charges';
      const charges = await server.charges(keyPrefix);
      return buildReport({
        seed,
        store: named,
        unsafe,
        plan,
        calls,
        charges,
        counters: client.counters,
        faults,
        crashes: server.crashes,
        restarts: server.restarts,
        inFlightAtCrashes: server.inFlightAtCrashes,
        crashesSkipped,
        durationMs: performance.now() - started,
        removed: created,
        metrics: unsafe || !server.metricsSeen ? null : server.receiverCounts,
      });
    } catch (error) {
      // A start or a read cut short by Ctrl-C is the interruption, whatever it failed with.
      throw options.signal?.aborted === true ? interrupted : error;
    } finally {
      options.signal?.removeEventListener('abort', onInterrupt);
      phase = `stopping the payments server, then removing ${created.join(', ')}`;
      try {
        await server.stop();
        await client.close();
        await ours.remove();
      } finally {
        progress.stop();
      }
    }
  } finally {
    await rm(directory, { recursive: true, force: true });
  }
}
