/**
 * The gateway scenario's upstream: the example payments service in Python's standard library
 * (`examples/gateway/upstream.py`), run as a child process with `python3`. It writes one row per executed
 * POST to its own SQLite database before answering, and answers `GET /reconcile?key=K` with the saved
 * response of key K (404 when it never ran); its `x-fault` request header picks a fault (docs/gateway.md).
 *
 * @module
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { access } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';

/** The example upstream, from `src/demo/gateway/` or `dist/demo/gateway/` alike. */
const UPSTREAM_SCRIPT = fileURLToPath(new URL('../../../examples/gateway/upstream.py', import.meta.url));

/** Longest wait for the upstream to print `ready`, in milliseconds. */
const START_TIMEOUT_MS = 15_000;

/**
 * `python3` could not be run, or the example upstream is not there (it is part of the repository, not of
 * the published package); the CLI prints the message and exits with code 2.
 */
export class UpstreamUnavailableError extends Error {
  override readonly name = 'UpstreamUnavailableError';
}

/** One row of the upstream's `executions` table: one execution of a POST. */
export interface Execution {
  /** The row id, which the upstream answers as `id`. */
  readonly id: string;
  /** The `Idempotency-Key` the gateway forwarded. */
  readonly idempotencyKey: string | null;
}

/** A running upstream. */
export interface PythonUpstream {
  /** `http://127.0.0.1:PORT`. */
  readonly origin: string;
  /** The executions of keys starting with `keyPrefix`, read from the upstream's database. */
  executions(keyPrefix: string): readonly Execution[];
  /** Whether the upstream has executed (committed a row for) `key`. */
  executed(key: string): boolean;
  /** Kills it (SIGKILL: its rows are committed before each answer) and waits for the exit. */
  stop(): Promise<void>;
}

/**
 * Starts the upstream on `port` (at 127.0.0.1) with its database in `directory`; resolves once it listens.
 *
 * @throws {@link UpstreamUnavailableError} when `python3` cannot be run or the example upstream is not there
 * @throws Error when it exits, or does not listen within 15 s
 */
export async function startPythonUpstream(directory: string, port: number): Promise<PythonUpstream> {
  await access(UPSTREAM_SCRIPT).catch((error: unknown) => {
    throw new UpstreamUnavailableError(`${UPSTREAM_SCRIPT} is not there: the gateway scenario runs from a clone of the repository`, { cause: error });
  });
  const file = join(directory, 'upstream.db');
  // A process group of its own: a terminal's Ctrl-C reaches the demo alone, which stops the upstream last.
  const child = spawn('python3', [UPSTREAM_SCRIPT, String(port), file], { stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  await ready(child);
  const read = <T>(query: (db: Database.Database) => T): T => {
    const db = new Database(file, { readonly: true, fileMustExist: true });
    try {
      return query(db);
    } finally {
      db.close();
    }
  };
  return {
    origin: `http://127.0.0.1:${port}`,
    executions: (keyPrefix) =>
      read((db) => db.prepare('SELECT id, key FROM executions WHERE substr(key, 1, ?) = ? ORDER BY id').all(keyPrefix.length, keyPrefix) as { id: number; key: string | null }[]).map(
        (row) => ({ id: String(row.id), idempotencyKey: row.key }),
      ),
    executed: (key) => read((db) => db.prepare('SELECT 1 FROM executions WHERE key = ? LIMIT 1').get(key) !== undefined),
    stop: async () => {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = once(child, 'exit');
      child.kill('SIGKILL');
      await exited;
    },
  };
}

function ready(child: ChildProcess): Promise<void> {
  let stderr = '';
  child.stderr?.setEncoding('utf8').on('data', (text: string) => {
    stderr = (stderr + text).slice(-2_000);
  });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`the Python upstream did not listen within ${START_TIMEOUT_MS} ms\n${stderr}`));
    }, START_TIMEOUT_MS);
    const fail = (error: Error): void => {
      clearTimeout(timer);
      reject(error);
    };
    child.once('error', (error) => fail(new UpstreamUnavailableError(`python3 could not be run (${error.message}); the gateway scenario's upstream is a Python program`, { cause: error })));
    child.once('exit', (code, signal) => fail(new Error(`the Python upstream exited with ${signal ?? `code ${String(code)}`}\n${stderr}`)));
    child.stdout?.setEncoding('utf8').on('data', (text: string) => {
      if (!text.includes('ready')) return;
      clearTimeout(timer);
      child.removeAllListeners('exit');
      resolve();
    });
  });
}
