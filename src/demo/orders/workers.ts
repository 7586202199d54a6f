/**
 * The parent's handle on one of the orders scenario's worker processes (relay or consumer): starts it,
 * SIGKILLs it when it reports its crash point, starts the next incarnation (each with its own crash plan),
 * adds up the counters it reports, and stops it gracefully at the end.
 *
 * @module
 */
import type { ChildProcess } from 'node:child_process';
import { extname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { spawnNode } from '../harness/child-start.js';
import { isWorkerMessage, type ShutdownMessage, type WorkerConfig, type WorkerCounter, type WorkerCrash } from './protocol.js';

/** Options of {@link WorkerSupervisor}. */
interface WorkerOptions {
  /** Entry file name without extension, next to this file: `relay-worker` or `consumer-worker`. */
  readonly entry: 'relay-worker' | 'consumer-worker';
  /** One configuration per incarnation, in order; the last one runs until the end. Non-empty. */
  readonly incarnations: readonly WorkerConfig[];
  /** Called with every counter increment the worker reports. */
  readonly onCount: (counter: WorkerCounter) => void;
  /** Called with every crash injected, right after the SIGKILL. */
  readonly onCrash: (kind: WorkerCrash) => void;
  /** Called once when a worker fails in a way the scenario did not cause. */
  readonly onFailure: (error: Error) => void;
}

const STDERR_LINES = 20;
/** Longest wait for a worker to report ready, in milliseconds. */
const START_TIMEOUT_MS = 20_000;
/** Longest wait for a graceful stop before a SIGKILL, in milliseconds. */
const STOP_TIMEOUT_MS = 5_000;

/**
 * Runs a worker (`process.execPath` with this process's `execArgv`, so it runs compiled or under tsx
 * alike) through its incarnations.
 *
 * @example
 * ```ts
 * const relay = new WorkerSupervisor({ entry: 'relay-worker', incarnations: [crashing, clean], onCount, onCrash, onFailure });
 * await relay.start();
 * // … later
 * await relay.stop();
 * ```
 */
export class WorkerSupervisor {
  private child: ChildProcess | undefined;
  private incarnation = 0;
  private stopping = false;
  private failed = false;
  private readonly stderr: string[] = [];
  private recovery: Promise<void> = Promise.resolve();

  constructor(private readonly options: WorkerOptions) {
    if (options.incarnations.length === 0) throw new TypeError('retrysafe: option "incarnations" must not be empty');
  }

  /** Starts the current incarnation; resolves once it is ready. @throws Error when it exits or stalls first */
  async start(): Promise<void> {
    const config = this.options.incarnations[Math.min(this.incarnation, this.options.incarnations.length - 1)];
    const entry = fileURLToPath(new URL(`./${this.options.entry}${extname(fileURLToPath(import.meta.url))}`, import.meta.url));
    const child = spawnNode(entry, [JSON.stringify(config)], ['ignore', 'ignore', 'pipe', 'ipc']);
    this.child = child;
    child.stderr?.setEncoding('utf8').on('data', (text: string) => {
      this.stderr.push(...text.split('\n').filter((line) => line !== ''));
      this.stderr.splice(0, Math.max(0, this.stderr.length - STDERR_LINES));
    });
    let ready = false;
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        child.kill('SIGKILL');
        reject(new Error(`the ${this.options.entry} did not start in ${START_TIMEOUT_MS} ms${this.stderrTail()}`));
      }, START_TIMEOUT_MS);
      child.on('message', (message: unknown) => {
        if (!isWorkerMessage(message) || child !== this.child) return;
        if (message.type === 'ready') {
          ready = true;
          clearTimeout(timer);
          resolve();
        } else if (message.type === 'count') {
          this.options.onCount(message.counter);
        } else {
          this.crash(child, message.kind);
        }
      });
      child.once('exit', (code, signal) => {
        clearTimeout(timer);
        if (!ready) reject(new Error(`the ${this.options.entry} exited with ${signal ?? `code ${String(code)}`} before it was ready${this.stderrTail()}`));
        else if (child === this.child && !this.stopping) this.fail(new Error(`the ${this.options.entry} exited unexpectedly with ${signal ?? `code ${String(code)}`}${this.stderrTail()}`));
      });
    });
  }

  /** Waits for a restart in progress, asks the worker to finish what is in flight and exit, and kills it after 5 seconds. */
  async stop(): Promise<void> {
    await this.recovery;
    this.stopping = true;
    const child = this.child;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((resolve) => child.once('exit', resolve));
    const shutdown: ShutdownMessage = { type: 'shutdown' };
    if (child.connected) child.send(shutdown);
    const timer = setTimeout(() => child.kill('SIGKILL'), STOP_TIMEOUT_MS);
    await exited;
    clearTimeout(timer);
  }

  /** Kills the worker at its crash point and starts the next incarnation once it is gone. */
  private crash(child: ChildProcess, kind: WorkerCrash): void {
    const exited = new Promise((resolve) => child.once('exit', resolve));
    this.child = undefined;
    child.kill('SIGKILL');
    this.options.onCrash(kind);
    this.incarnation++;
    this.recovery = exited
      .then(() => this.start())
      .catch((error: unknown) => this.fail(error instanceof Error ? error : new Error(String(error))));
  }

  private fail(error: Error): void {
    if (this.failed) return;
    this.failed = true;
    this.options.onFailure(error);
  }

  private stderrTail(): string {
    return this.stderr.length === 0 ? '' : `\n--- ${this.options.entry} stderr ---\n${this.stderr.join('\n')}`;
  }
}
