/**
 * The parent's handle on the demo's payments server: starts it as a child process, kills it with SIGKILL
 * when it reports a crash fault, restarts it on the same database and port, asks it for the charge rows at
 * the end, and stops it.
 *
 * @module
 */
import type { ChildProcess } from 'node:child_process';
import { extname } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Charge } from './ledger.js';
import { spawnNode, startOutcome } from '../harness/child-start.js';
import { exitOf, watchdog } from '../harness/watchdog.js';
import type { ServerFault } from '../harness/plan.js';
import { isServerMessage, type ParentMessage, type ServerConfig, type ServerMessage } from './protocol.js';
import { addCounts, laterCounts, NO_COUNTS, type ReceiverCounts } from './metrics.js';

/** Options of {@link ServerSupervisor}. Durations are in milliseconds. */
interface SupervisorOptions {
  /** The server's configuration; `port` is chosen on the first start and reused on restarts. */
  readonly config: Omit<ServerConfig, 'port'>;
  /** Whether a crash fault kills the server; when `false`, a crash fault is a failure. */
  readonly crashes: boolean;
  /** Told of every fault the server injected, before a crash fault's kill. */
  readonly onFault: (key: string, fault: ServerFault) => void;
  /** Called once when the server fails in a way the demo did not cause (exit, failed restart). */
  readonly onFailure: (error: Error) => void;
  /** Longest wait for the server to listen. @defaultValue 20_000 */
  readonly startTimeoutMs?: number;
  /** Longest wait for any other answer of the server (the charges, a restart, the exit after a shutdown). @defaultValue 30_000 */
  readonly answerTimeoutMs?: number;
  /** Aborts the waits for the server's answers (not {@link ServerSupervisor.stop}, which always runs). */
  readonly signal?: AbortSignal;
}

/** Where the compiled (`.js`) or source (`.ts`, under `node --import tsx`) server entry sits. */
const SERVER_ENTRY = fileURLToPath(new URL(`./server${extname(fileURLToPath(import.meta.url))}`, import.meta.url));

/** Lines of the server's stderr kept for error messages. */
const STDERR_LINES = 20;

/** How often, and how many times, a restart retries a port the dead server still holds. */
const PORT_RETRY_MS = 50;
const PORT_RETRIES = 100;

/**
 * Runs the payments server as a child process (`process.execPath` with this process's `execArgv`, so it
 * runs compiled or under tsx alike) and keeps it running across the crashes the demo injects.
 *
 * @example
 * ```ts
 * const server = new ServerSupervisor({
 *   config: { store: 'sqlite:/tmp/demo/payments.db', unsafe: false, slowMs: 700 },
 *   crashes: true,
 *   onFault: (key, fault) => console.log(key, fault),
 *   onFailure: (error) => abort.abort(error),
 * });
 * await server.start();
 * // … send traffic to server.origin …
 * const charges = await server.charges('pay-');
 * await server.stop();
 * ```
 */
export class ServerSupervisor {
  /** Crashes injected (SIGKILLs sent). */
  crashes = 0;
  /** Restarts completed after a crash. */
  restarts = 0;
  /**
   * Requests the server had let in and not yet answered when it reached its crash points, summed over the
   * crashes: each may have committed before the SIGKILL landed, and its metric counts died with the server.
   */
  inFlightAtCrashes = 0;
  private child: ChildProcess | undefined;
  private port = 0;
  private stopping = false;
  private failed = false;
  /** Servers that listened and have not been killed on purpose: their exit is a failure. */
  private readonly serving = new WeakSet<ChildProcess>();
  private readonly stderr: string[] = [];
  private recovery: Promise<void> = Promise.resolve();
  /** The latest metric counts of each server process; a restarted server counts from zero. */
  private readonly counts = new Map<ChildProcess, ReceiverCounts>();

  constructor(private readonly options: SupervisorOptions) {}

  /** `http://127.0.0.1:PORT`, valid once {@link start} resolved; stays the same across restarts. */
  get origin(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  /**
   * Starts the server and resolves once it listens.
   * @throws Error when it exits or reports a listen failure first, or does not listen in time
   * @throws `signal.reason` when `signal` aborts first
   */
  start(): Promise<void> {
    const timeoutMs = (this.options.startTimeoutMs ?? 20_000) + PORT_RETRIES * PORT_RETRY_MS;
    return watchdog(this.listen(), timeoutMs, 'the payments server (its start)', this.options.signal);
  }

  /** Spawns the server until one listens; a port the dead server still holds is retried. */
  private async listen(): Promise<void> {
    for (let attempt = 1; ; attempt++) {
      const outcome = await this.spawnOnce();
      if (outcome === 'ready') return;
      // The killed server's port can linger for a moment; the clients must find the server where it was.
      if (outcome !== 'EADDRINUSE' || attempt >= PORT_RETRIES) {
        throw new Error(`the payments server did not start (${outcome})${this.stderrTail()}`);
      }
      await new Promise((resolve) => setTimeout(resolve, PORT_RETRY_MS));
    }
  }

  /**
   * The charge rows whose key starts with `keyPrefix`, read by the server from its database.
   * @throws {@link NoAnswerError} when a restart in progress or the server's answer takes longer than `answerTimeoutMs`
   * @throws `signal.reason` when `signal` aborts first
   * @throws Error when the server exits before answering
   */
  async charges(keyPrefix: string): Promise<readonly Charge[]> {
    await this.answered(this.recovery, 'the payments server (its restart)');
    const child = this.child;
    if (!child) throw new Error('the payments server is not running');
    let listeners = (): void => undefined;
    const listed = new Promise<readonly Charge[]>((resolve, reject) => {
      const onMessage = (message: unknown): void => {
        if (!isServerMessage(message) || message.type !== 'charges') return;
        listeners();
        resolve(message.charges);
      };
      const onExit = (): void => {
        listeners();
        reject(new Error(`the payments server exited before listing the charges${this.stderrTail()}`));
      };
      listeners = () => {
        child.off('exit', onExit);
        child.off('message', onMessage);
      };
      child.on('message', onMessage);
      child.once('exit', onExit);
      this.tell(child, { type: 'charges', keyPrefix });
    });
    return this.answered(listed, 'the payments server (listing the charges)').finally(listeners);
  }

  /** Whether any server sent metric counts (it does when `@opentelemetry/sdk-metrics` is installed). */
  get metricsSeen(): boolean {
    return this.counts.size > 0;
  }

  /** The receiver's metric counts summed over every server process this supervisor ran. */
  get receiverCounts(): ReceiverCounts {
    return [...this.counts.values()].reduce(addCounts, NO_COUNTS);
  }

  /**
   * Stops the server: waits (at most `answerTimeoutMs`) for a restart in progress, asks the server to shut
   * down, and kills it if it has not exited within two seconds.
   */
  async stop(): Promise<void> {
    this.stopping = true;
    await watchdog(this.recovery, this.answerTimeoutMs, 'the payments server (its restart)').catch(() => undefined);
    const child = this.child;
    if (!child) return;
    const exited = exitOf(child);
    if (child.connected) this.tell(child, { type: 'shutdown' });
    const timer = setTimeout(() => child.kill('SIGKILL'), 2_000);
    await exited;
    clearTimeout(timer);
  }

  private get answerTimeoutMs(): number {
    return this.options.answerTimeoutMs ?? 30_000;
  }

  /** `wait`, under the watchdog: at most `answerTimeoutMs`, and no longer than `signal` lets it. */
  private answered<T>(wait: Promise<T>, what: string): Promise<T> {
    return watchdog(wait, this.answerTimeoutMs, what, this.options.signal);
  }

  /** Spawns one server; resolves `'ready'`, `'EADDRINUSE'`, or why it did not start. */
  private spawnOnce(): Promise<string> {
    const config: ServerConfig = { ...this.options.config, port: this.port };
    const child = spawnNode(SERVER_ENTRY, [JSON.stringify(config)], ['ignore', 'ignore', 'pipe', 'ipc']);
    this.child = child;
    child.stderr?.setEncoding('utf8').on('data', (text: string) => {
      this.stderr.push(...text.split('\n').filter((line) => line !== ''));
      this.stderr.splice(0, Math.max(0, this.stderr.length - STDERR_LINES));
    });
    return startOutcome(child, this.options.startTimeoutMs ?? 20_000, (settle) => {
      child.on('message', (message: unknown) => {
        if (!isServerMessage(message)) return;
        if (message.type === 'ready') {
          this.port = message.port;
          this.serving.add(child);
          settle('ready');
        } else if (message.type === 'listen-failed') {
          settle(message.code === 'EADDRINUSE' ? 'EADDRINUSE' : `${message.code}: ${message.message}`);
        } else {
          this.onMessage(child, message);
        }
      });
      child.once('exit', (code, signal) => {
        settle(`exited with ${signal ?? `code ${String(code)}`}`);
        this.onExit(child, code, signal);
      });
    });
  }

  private onMessage(child: ChildProcess, message: ServerMessage): void {
    // A killed server's last snapshots may still arrive after its successor started: keyed by process.
    if (message.type === 'metrics') this.counts.set(child, laterCounts(this.counts.get(child) ?? NO_COUNTS, message.counts));
    if (message.type !== 'fault' || child !== this.child) return;
    this.options.onFault(message.key, message.fault);
    if (message.fault !== 'crash-mid-handler' && message.fault !== 'crash-after-commit') return;
    // Another request already in flight reached its crash point before the first SIGKILL landed: that kill
    // covers it. A second restart would race the first for the port, and the loser's retries would hold the
    // run until its start timed out.
    if (!this.serving.has(child)) return;
    if (!this.options.crashes) {
      this.fail(new Error(`the payments server reached a crash fault (${message.fault}) with crashes disabled`));
      return;
    }
    const exited = exitOf(child);
    this.serving.delete(child);
    child.kill('SIGKILL');
    this.crashes++;
    this.inFlightAtCrashes += message.inFlight ?? 0;
    this.recovery = exited
      .then(() => this.start())
      .then(
        () => {
          this.restarts++;
        },
        (error: unknown) => this.fail(error instanceof Error ? error : new Error(String(error))),
      );
  }

  private onExit(child: ChildProcess, code: number | null, signal: NodeJS.Signals | null): void {
    if (this.serving.has(child) && !this.stopping) {
      this.fail(new Error(`the payments server exited unexpectedly with ${signal ?? `code ${String(code)}`}${this.stderrTail()}`));
    }
  }

  private fail(error: Error): void {
    if (this.failed) return;
    this.failed = true;
    this.options.onFailure(error);
  }

  private tell(child: ChildProcess, message: ParentMessage): void {
    child.send(message);
  }

  private stderrTail(): string {
    return this.stderr.length === 0 ? '' : `\n--- server stderr ---\n${this.stderr.join('\n')}`;
  }
}
