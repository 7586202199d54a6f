/**
 * The gateway scenario's handle on `retrysafe gateway`: runs the CLI as a child process (the gateway is a
 * process of its own, as in production), SIGKILLs it when the scenario crashes it, restarts it on the same
 * configuration, store and port, and reads its Prometheus `/metrics` before every kill and at the end, so
 * the counts of every gateway process add up.
 *
 * @module
 */
import type { ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { extname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { spawnNode, startOutcome } from '../harness/child-start.js';

/** The CLI entry, compiled (`.js`) or source (`.ts`, under `node --import tsx`). */
const CLI_ENTRY = fileURLToPath(new URL(`../../cli/main${extname(fileURLToPath(import.meta.url))}`, import.meta.url));

/** Longest wait for the gateway to listen, in milliseconds. */
const START_TIMEOUT_MS = 30_000;
/** How often, and how many times, a restart retries a port the killed gateway still holds. */
const PORT_RETRY_MS = 50;
const PORT_RETRIES = 100;
/** Lines of the gateway's stderr kept for error messages. */
const STDERR_LINES = 20;

/** The gateway counters the report shows, summed over every gateway process. */
export interface GatewayCounts {
  /** `retrysafe_gateway_indeterminate_total`: records held as indeterminate (outcome unknown). */
  readonly indeterminate: number;
  /** `retrysafe_gateway_indeterminate_resolved_total{resolution="completed"}`: the hook found the execution. */
  readonly reconciledCompleted: number;
  /** `…{resolution="released"}`: the hook said it never ran; the request was sent then, once. */
  readonly reconciledReleased: number;
  /** `retrysafe_gateway_requests_total{outcome="outcome_unknown"}`: retries answered 502/504 `idempotency-outcome-unknown`. */
  readonly outcomeUnknownAnswers: number;
  /** `retrysafe_gateway_upstream_failures_total{kind="timeout"}`. */
  readonly upstreamTimeouts: number;
  /** `retrysafe_gateway_upstream_failures_total{kind="reset"}`. */
  readonly upstreamResets: number;
}

const NO_COUNTS: GatewayCounts = { indeterminate: 0, reconciledCompleted: 0, reconciledReleased: 0, outcomeUnknownAnswers: 0, upstreamTimeouts: 0, upstreamResets: 0 };

/** The series of each count: metric name and a label it must carry (or none). */
const SERIES: Readonly<Record<keyof GatewayCounts, readonly [string, string]>> = {
  indeterminate: ['retrysafe_gateway_indeterminate_total', ''],
  reconciledCompleted: ['retrysafe_gateway_indeterminate_resolved_total', 'resolution="completed"'],
  reconciledReleased: ['retrysafe_gateway_indeterminate_resolved_total', 'resolution="released"'],
  outcomeUnknownAnswers: ['retrysafe_gateway_requests_total', 'outcome="outcome_unknown"'],
  upstreamTimeouts: ['retrysafe_gateway_upstream_failures_total', 'kind="timeout"'],
  upstreamResets: ['retrysafe_gateway_upstream_failures_total', 'kind="reset"'],
};

/** Reads the counts out of a Prometheus text exposition. */
function countsOf(exposition: string): GatewayCounts {
  const counts = { ...NO_COUNTS };
  for (const line of exposition.split('\n')) {
    if (line.startsWith('#')) continue;
    const space = line.lastIndexOf(' ');
    const series = line.slice(0, space);
    const name = series.includes('{') ? series.slice(0, series.indexOf('{')) : series;
    for (const [count, [metric, label]] of Object.entries(SERIES) as [keyof GatewayCounts, readonly [string, string]][]) {
      if (name === metric && series.includes(label)) counts[count] += Number(line.slice(space + 1));
    }
  }
  return counts;
}

function add(a: GatewayCounts, b: GatewayCounts): GatewayCounts {
  const sum = { ...a };
  for (const count of Object.keys(sum) as (keyof GatewayCounts)[]) sum[count] += b[count];
  return sum;
}

/** Options of {@link GatewaySupervisor}. */
interface SupervisorOptions {
  /** The configuration file the gateway runs with. */
  readonly config: string;
  /** `http://host:port` of its admin listener. */
  readonly admin: string;
  /** Called once when a gateway exits or fails to restart without the scenario having killed it. */
  readonly onFailure: (error: Error) => void;
}

/**
 * Runs `retrysafe gateway --config FILE` (`process.execPath` with this process's `execArgv`, so it runs
 * compiled or under tsx alike) and keeps it running across the crashes the scenario injects.
 *
 * @example
 * ```ts
 * const gateway = new GatewaySupervisor({ config: '/tmp/demo/gateway.json', admin: 'http://127.0.0.1:9090', onFailure });
 * await gateway.start();
 * await gateway.crash(); // SIGKILL, then restart
 * const counts = await gateway.counts();
 * await gateway.stop();
 * ```
 */
export class GatewaySupervisor {
  /** Crashes injected (SIGKILLs sent). */
  crashes = 0;
  /** Restarts completed after a crash. */
  restarts = 0;
  private child: ChildProcess | undefined;
  private stopping = false;
  private failed = false;
  /** Counts read from gateways that are gone. */
  private counted: GatewayCounts = NO_COUNTS;
  private recovery: Promise<void> = Promise.resolve();
  private readonly stderr: string[] = [];

  constructor(private readonly options: SupervisorOptions) {}

  /**
   * Starts the gateway and resolves once it listens.
   * @throws Error when it exits first, or does not listen in time
   */
  async start(): Promise<void> {
    for (let attempt = 1; ; attempt++) {
      const outcome = await this.spawnOnce();
      if (outcome === 'ready') return;
      // The killed gateway's port can linger for a moment; the clients must find the gateway where it was.
      if (!outcome.includes('EADDRINUSE') || attempt >= PORT_RETRIES) throw new Error(`the gateway did not start (${outcome})${this.stderrTail()}`);
      await new Promise((resolve) => setTimeout(resolve, PORT_RETRY_MS));
    }
  }

  /**
   * Reads the gateway's metrics, SIGKILLs it mid-traffic and restarts it; resolves once the restarted
   * gateway listens (a failed restart is reported through `onFailure`).
   */
  crash(): Promise<void> {
    const child = this.child;
    if (child === undefined) return Promise.resolve();
    this.recovery = this.recovery.then(async () => {
      // Counted just before the kill: what the killed gateway did after this read dies with it.
      this.counted = add(this.counted, await this.scrape().catch(() => NO_COUNTS));
      const exited = once(child, 'exit');
      this.child = undefined;
      child.kill('SIGKILL');
      this.crashes++;
      await exited;
      try {
        await this.start();
        this.restarts++;
      } catch (error) {
        this.fail(error instanceof Error ? error : new Error(String(error)));
      }
    });
    return this.recovery;
  }

  /** The counts of every gateway so far: the dead ones' last reads plus the running one's now. */
  async counts(): Promise<GatewayCounts> {
    await this.recovery;
    return add(this.counted, await this.scrape());
  }

  /** Stops the gateway with SIGTERM (it drains), and kills it if it has not exited within five seconds. */
  async stop(): Promise<void> {
    this.stopping = true;
    await this.recovery.catch(() => undefined);
    const child = this.child;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const exited = once(child, 'exit');
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), 5_000);
    await exited;
    clearTimeout(timer);
  }

  private async scrape(): Promise<GatewayCounts> {
    const response = await fetch(`${this.options.admin}/metrics`, { signal: AbortSignal.timeout(5_000) });
    return countsOf(await response.text());
  }

  /** Spawns one gateway; resolves `'ready'` or why it did not start. */
  private spawnOnce(): Promise<string> {
    const child = spawnNode(CLI_ENTRY, ['gateway', '--config', this.options.config], ['ignore', 'ignore', 'pipe']);
    this.child = child;
    let output = '';
    let listening = false;
    return startOutcome(child, START_TIMEOUT_MS, (settle) => {
      child.stderr?.setEncoding('utf8').on('data', (text: string) => {
        output += text;
        this.stderr.push(...text.split('\n').filter((line) => line !== ''));
        this.stderr.splice(0, Math.max(0, this.stderr.length - STDERR_LINES));
        if (listening || !output.includes('listening on')) return;
        listening = true;
        settle('ready');
      });
      child.once('exit', (code, signal) => {
        settle(`exited with ${signal ?? `code ${String(code)}`}: ${output.trim()}`);
        if (listening && child === this.child && !this.stopping) this.fail(new Error(`the gateway exited unexpectedly with ${signal ?? `code ${String(code)}`}${this.stderrTail()}`));
      });
    });
  }

  private fail(error: Error): void {
    if (this.failed) return;
    this.failed = true;
    this.options.onFailure(error);
  }

  private stderrTail(): string {
    return this.stderr.length === 0 ? '' : `\n--- gateway stderr ---\n${this.stderr.join('\n')}`;
  }
}
