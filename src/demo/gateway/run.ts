/**
 * The gateway scenario (`retrysafe demo --scenario gateway`): the example payments service in Python
 * (`examples/gateway/upstream.py`) behind `retrysafe gateway`, both child processes, driven by the
 * retrying clients with the payments demo's fault plan, each fault turned into one the gateway meets:
 * - `lost-reply`: the upstream commits, then resets the connection (`x-fault: reset`): the outcome is
 *   unknown, the record is held, the retry gets 502 `idempotency-outcome-unknown` or, once the reconcile
 *   hook found the execution, the original response;
 * - `slow`: the upstream commits, then sleeps past the gateway's timeout: held likewise (504); the clients
 *   time out first and meet 409s while it runs;
 * - `burst`: concurrent duplicates under one key;
 * - `crash-mid-handler`: the gateway is SIGKILLed once it claimed the key, while the upstream holds the
 *   request without committing (`x-fault: hang=…`), and restarted: the retry that takes over the expired
 *   lease asks the hook, hears 404, and sends the request once;
 * - `crash-after-commit`: the gateway is SIGKILLed once the upstream committed, before the answer reached
 *   it (`x-fault: sleep=…`), and restarted: the hook finds the execution and the retry replays it.
 *
 * It passes when no key ran twice on the upstream, every payment got a 2xx naming its one execution with
 * the same body on every call, and no record of the run is left open (indeterminate or in flight).
 *
 * @module
 */
import { createHash, randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseIdempotencyKey } from '../../index.js';
import { parseStoreUrl } from '../../store-url.js';
import { FAULT_HEADER } from '../harness/chaos.js';
import { ATTEMPT_TIMEOUT_MS, createDemoClient } from '../harness/client.js';
import { DemoInterruptedError } from '../harness/interrupted.js';
import { planFaults, type CrashFault, type ServerFault } from '../harness/plan.js';
import { reportProgress, type DriveTally } from '../harness/progress.js';
import { runStore } from '../harness/run-store.js';
import { concurrencyOf, drive } from '../harness/traffic.js';
import { buildGatewayReport, type GatewayDemoReport } from './report.js';
import { GatewaySupervisor } from './supervisor.js';
import { startPythonUpstream, type PythonUpstream } from './upstream.js';

/** Options of {@link runGatewayDemo}. */
export interface GatewayDemoOptions {
  /** Logical payments, at least 10. @defaultValue 240 */
  readonly payments?: number;
  /** Payments in flight at once, 1..256. @defaultValue 12 */
  readonly concurrency?: number;
  /** Seed of the fault plan, 0..2^32-1. @defaultValue a random one (printed in the report) */
  readonly seed?: number;
  /**
   * The gateway's store, a `--store` value without `?schema=` or `?prefix=`: on PostgreSQL the records go to
   * schema `retrysafe_demo_<run>`, on Redis under key prefix `retrysafe_demo_<run>`, removed afterwards.
   * @defaultValue a SQLite file in a fresh temporary directory, removed afterwards
   */
  readonly store?: string;
  /**
   * Stops the run (Ctrl-C): the gateway and the upstream are stopped, what the run wrote is removed, and the
   * run rejects with {@link DemoInterruptedError}.
   */
  readonly signal?: AbortSignal;
  /**
   * Told every 2 s while the run goes, one line such as
   * `payments 37/240 answered (48 sent), 412 HTTP attempts, gateway crashes 1, restarts 1`.
   * @defaultValue no progress is reported
   */
  readonly onProgress?: (line: string) => void;
}

/** The gateway's lease, in milliseconds: how long a killed gateway's claim blocks the retries. */
const LEASE_MS = 3_000;
/** The gateway's upstream timeout, in milliseconds; a `slow` upstream sleeps past it. */
const UPSTREAM_TIMEOUT_MS = 2_000;
/** How long the upstream holds a request the gateway is crashed under, in milliseconds. */
const CRASH_HOLD_MS = 5_000;
/** The API key the clients send; the gateway's scope is its SHA-256. */
const API_KEY = 'demo';
/** How often, and how many times, the crash waits for its moment (the claim, or the upstream's commit). */
const CRASH_POLL_MS = 20;
const CRASH_POLLS = 500;

/** The upstream's `x-fault` for each planned fault. */
const UPSTREAM_FAULTS: Readonly<Record<ServerFault, string>> = {
  'lost-reply': 'reset',
  slow: `sleep=${UPSTREAM_TIMEOUT_MS + 500}`,
  'crash-mid-handler': `hang=${CRASH_HOLD_MS}`,
  'crash-after-commit': `sleep=${CRASH_HOLD_MS}`,
};

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => (typeof address === 'object' && address !== null ? resolve(address.port) : reject(new Error('no free port'))));
    });
  });
}

/** The gateway's configuration (docs/gateway.md): one route, the reconcile hook, a short lease and timeout. */
function gatewayConfig(store: string, upstream: PythonUpstream, port: number, adminPort: number): object {
  return {
    listen: `127.0.0.1:${port}`,
    admin: `127.0.0.1:${adminPort}`,
    store,
    scope: { apiKey: { header: 'x-api-key' } },
    upstreams: { payments: { url: upstream.origin, probe: '/healthz' } },
    defaults: { ttl: '1h', lease: LEASE_MS, timeout: UPSTREAM_TIMEOUT_MS, inFlight: 'reject' },
    routes: [{ name: 'payments', methods: ['POST'], path: '/payments', upstream: 'payments', reconcile: '/reconcile' }],
    accessLog: false,
  };
}

/**
 * Runs the scenario and resolves with its report (whether it passed or not).
 *
 * @throws TypeError naming the option when an option is invalid
 * @throws {@link StoreUrlError} when `store` is not a valid `--store` value
 * @throws TypeError when `store` names a `?schema=` or a `?prefix=`
 * @throws {@link StoreOpenError} when the store cannot be reached or refuses
 * @throws {@link UpstreamUnavailableError} when `python3` cannot be run
 * @throws Error when the upstream or the gateway cannot start, or the gateway dies in a way the run did not cause
 * @throws {@link DemoInterruptedError} when `signal` aborts, once the processes are stopped
 * @example
 * ```ts
 * const report = await runGatewayDemo({ payments: 120, seed: 42 });
 * process.exitCode = report.passed ? 0 : 1;
 * ```
 */
export async function runGatewayDemo(options: GatewayDemoOptions = {}): Promise<GatewayDemoReport> {
  const started = performance.now();
  const payments = options.payments ?? 240;
  const concurrency = concurrencyOf(options.concurrency);
  const seed = options.seed ?? randomBytes(4).readUInt32BE(0);
  const directory = await mkdtemp(join(tmpdir(), 'retrysafe-demo-gateway-'));
  /** What the run started, stopped in reverse order whatever happens. */
  const cleanups: (() => Promise<unknown>)[] = [() => rm(directory, { recursive: true, force: true })];
  try {
    const named = options.store ?? `sqlite:${join(directory, 'gateway.db')}`;
    const target = parseStoreUrl(named);
    const runId = randomBytes(4).toString('hex');
    const ours = runStore(named, runId);
    const store = ours.url;
    const crashes: CrashFault[] = target.durable ? ['crash-mid-handler', 'crash-after-commit'] : [];
    const keyPrefix = `pay-${runId}`;
    const plan = planFaults({ seed, payments, keyPrefix, crashes });
    const scope = `api-key:${createHash('sha256').update(API_KEY).digest('hex')}`;
    const failure = new AbortController();
    const created = [...ours.created, `temporary directory ${directory}`];
    const interrupted = new DemoInterruptedError(created);
    const onInterrupt = (): void => failure.abort(interrupted);
    options.signal?.addEventListener('abort', onInterrupt, { once: true });
    cleanups.push(() => ours.remove());
    await ours.prepare();
    const opened = await parseStoreUrl(store).open('create');
    cleanups.push(() => opened.store.close());
    const upstream = await startPythonUpstream(directory, await freePort());
    cleanups.push(() => upstream.stop());
    const [port, adminPort] = [await freePort(), await freePort()];
    const configFile = join(directory, 'gateway.json');
    await writeFile(configFile, JSON.stringify(gatewayConfig(store, upstream, port, adminPort), null, 2));
    const gateway = new GatewaySupervisor({ config: configFile, admin: `http://127.0.0.1:${adminPort}`, onFailure: (error) => failure.abort(error) });
    const injected: Record<ServerFault, number> = { 'lost-reply': 0, slow: 0, 'crash-mid-handler': 0, 'crash-after-commit': 0 };
    const crashing: Promise<void>[] = [];
    /** Keys whose fault was sent. */
    const faulted = new Set<string>();
    /** Waits for the crash's moment (polling), then kills and restarts the gateway. */
    const crashWhen = async (ready: () => boolean | Promise<boolean>): Promise<void> => {
      for (let poll = 0; poll < CRASH_POLLS && !(await ready()); poll++) await new Promise((resolve) => setTimeout(resolve, CRASH_POLL_MS));
      await gateway.crash();
    };
    cleanups.push(() => gateway.stop());
    const client = createDemoClient({
      attemptTimeoutMs: ATTEMPT_TIMEOUT_MS,
      // Room for the retries while a killed gateway restarts and its claims' leases run out.
      deadlineMs: 60_000,
      maxAttempts: 1_000,
      onHeaders: (headers) => {
        headers.set('x-api-key', API_KEY);
        const fault = headers.get(FAULT_HEADER) as ServerFault | null;
        if (fault === null || !(fault in UPSTREAM_FAULTS)) return;
        headers.delete(FAULT_HEADER);
        headers.set('x-fault', UPSTREAM_FAULTS[fault]);
        const key = parseIdempotencyKey(headers.get('idempotency-key') ?? '');
        if (faulted.has(key)) return;
        faulted.add(key);
        injected[fault]++;
        if (fault !== 'crash-mid-handler' && fault !== 'crash-after-commit') return;
        // A crash is injected once; the retries go out clean, as a real retry would. A reset or a sleep
        // stays on every attempt (one refused while the gateway restarts must not use it up): the gateway
        // sends a key upstream once, so a retry meets the held record, never the fault.
        client.faultApplied(key);
        crashing.push(fault === 'crash-mid-handler' ? crashWhen(async () => (await opened.store.get(scope, key))?.state === 'in_progress') : crashWhen(() => upstream.executed(key)));
      },
    });
    cleanups.push(() => client.close(), () => Promise.allSettled(crashing));
    const tally: DriveTally = { sent: 0, answered: 0 };
    let phase = 'starting the gateway';
    const progress = reportProgress(options.onProgress, () =>
      phase === 'traffic'
        ? `payments ${tally.answered}/${payments} answered (${tally.sent} sent), ${client.counters.attempts} HTTP attempts, ` +
          `gateway crashes ${gateway.crashes}, restarts ${gateway.restarts}`
        : phase,
    );
    // First in the list, so it runs last: the line names what the run is stopping and removing meanwhile.
    cleanups.unshift(() => Promise.resolve(progress.stop()));
    try {
      if (options.signal?.aborted === true) throw interrupted;
      await gateway.start();
      failure.signal.throwIfAborted();
      phase = 'traffic';
      const calls = await drive({ plan, concurrency, origin: `http://127.0.0.1:${port}`, path: '/payments', fetch: client.fetch, signal: failure.signal, tally });
      phase = 'reading the gateway\'s counts and the records';
      await Promise.all(crashing);
      const counts = await gateway.counts();
      let recordsOpen: number | null = target.durable ? 0 : null;
      if (recordsOpen !== null) for (const { key } of plan) if ((await opened.store.get(scope, key))?.state !== 'completed') recordsOpen++;
      return buildGatewayReport({
        seed,
        store: named,
        plan,
        calls,
        charges: upstream.executions(keyPrefix),
        counters: client.counters,
        faults: injected,
        crashes: gateway.crashes,
        restarts: gateway.restarts,
        inFlightAtCrashes: 0,
        crashesSkipped: target.durable ? null : `${named} keeps its records in the gateway process, so they would die with it`,
        durationMs: performance.now() - started,
        removed: created,
        gateway: counts,
        recordsOpen,
      });
    } catch (error) {
      // A start or a read cut short by Ctrl-C is the interruption, whatever it failed with.
      throw options.signal?.aborted === true ? interrupted : error;
    } finally {
      options.signal?.removeEventListener('abort', onInterrupt);
      phase = `stopping the gateway and the upstream, then removing ${created.join(', ')}`;
    }
  } finally {
    for (const cleanup of cleanups.reverse()) await cleanup();
  }
}
