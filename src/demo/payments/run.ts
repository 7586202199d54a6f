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
   * A `--store` value. On PostgreSQL the charges go to a schema of this run's own (dropped afterwards); on
   * a plain store (`memory:`, `redis://`) to a SQLite file in a temporary directory.
   * @defaultValue a SQLite file in a fresh temporary directory, removed afterwards
   */
  readonly store?: string;
  /** Serve without the idempotency middleware, to show what the same traffic does without retrysafe. @defaultValue false */
  readonly unsafe?: boolean;
  /**
   * Stops the run (Ctrl-C): the server is stopped, the run's PostgreSQL schema and temporary directory are
   * removed, and the run rejects with {@link DemoInterruptedError}.
   */
  readonly signal?: AbortSignal;
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
 * @throws Error when the payments server cannot start or dies in a way the demo did not cause
 * @throws {@link DemoInterruptedError} when `signal` aborts, once the run's schema and directory are removed
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
  const created = [`temporary directory ${directory}`];
  try {
    const store = options.store ?? `sqlite:${join(directory, 'payments.db')}`;
    const target = parseStoreUrl(store);
    const crashes: CrashFault[] = !target.durable ? [] : target.transactional ? ['crash-mid-handler', 'crash-after-commit'] : ['crash-after-commit'];
    const crashesSkipped = !target.durable
      ? `${store} keeps its records in the server process, so they would die with it`
      : target.transactional
        ? null
        : PLAIN_STORE_SKIP;
    // Keys (and the PostgreSQL charges schema) are unique per run, so runs on one database never collide.
    const runId = randomBytes(4).toString('hex');
    const keyPrefix = `pay-${runId}`;
    const plan = planFaults({ seed, payments, keyPrefix, crashes });
    if (target.scheme === 'postgres' || target.scheme === 'postgresql') created.unshift(`schema retrysafe_demo_${runId}`);
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
    });
    try {
      if (options.signal?.aborted === true) throw interrupted;
      await server.start();
      failure.signal.throwIfAborted();
      const calls = await drive({ plan, concurrency, origin: server.origin, path: '/payments', fetch: client.fetch, signal: failure.signal });
      const charges = await server.charges(keyPrefix);
      return buildReport({
        seed,
        store,
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
        metrics: unsafe || !server.metricsSeen ? null : server.receiverCounts,
      });
    } finally {
      options.signal?.removeEventListener('abort', onInterrupt);
      // The server drops the run's PostgreSQL schema as it shuts down.
      await server.stop();
      await client.close();
    }
  } finally {
    await rm(directory, { recursive: true, force: true });
  }
}
