// Hot path: docs/hot-path.md#sqlite-group-commit
/**
 * Group commit for the SQLite store: the writes that several in-flight requests submit in one turn of the
 * event loop run one after another in one transaction, and are answered after its COMMIT.
 *
 * In WAL mode a write costs mostly its commit, not its statement: a WAL frame for every page it changed
 * (a checksum over the page and two `pwrite`s each), the wal-index update, and POSIX locks on the `-shm`
 * file taken and dropped around it. A new key is two commits (its claim writes a table page and two index
 * pages, its completion a table page and an index page). N claims or completions committed together write
 * the pages they share once (new keys land on the same table and index leaves) and take the locks once.
 *
 * Nothing about an operation changes but when its commit happens: each is still atomic, decided under the
 * file's write lock (`BEGIN IMMEDIATE`, which waits for other processes up to `busy_timeout`), visible to
 * other processes at COMMIT, and answered only after the COMMIT that makes it as durable as the
 * `synchronous` setting makes any commit. A statement that fails alone (the transaction still open) fails
 * only its own operation; when the transaction itself is lost (a failed BEGIN, COMMIT or I/O), every
 * operation of the group fails with that error and none of their writes stays.
 *
 * @module
 */
import type { Database, Statement } from 'better-sqlite3';
import { asError } from './attempt.js';
import type { Mutex } from './mutex.js';

/** One operation of a group. */
interface Operation {
  /** Runs the operation; `grouped` is true inside the group's transaction, false when it runs alone. */
  readonly run: (grouped: boolean) => unknown;
  /** Maps the value once the operation committed (the store announces completions there); none: the value itself. */
  readonly committed: ((value: unknown) => unknown) | undefined;
  readonly resolve: (value: unknown) => void;
  readonly reject: (error: Error) => void;
}

/** Gathers operations until the event loop's check phase, then commits them together. */
export class GroupCommit {
  private gathering: Operation[] | undefined;
  private readonly begin: Statement;
  private readonly commit: Statement;
  private readonly rollback: Statement;

  /**
   * @param database - the store's connection
   * @param mutex - the store's turns on the connection: a group takes one when it opens (so it runs after
   *   every task queued before it, and before every task queued after it), waits there for the check
   *   phase, and releases it as soon as it has run
   * @param flushed - told each group's size as it runs
   */
  constructor(
    private readonly database: Database,
    private readonly mutex: Mutex,
    private readonly flushed: (size: number) => void,
  ) {
    this.begin = database.prepare('BEGIN IMMEDIATE');
    this.commit = database.prepare('COMMIT');
    this.rollback = database.prepare('ROLLBACK');
  }

  /** Whether a group is gathering: an operation submitted now must join it to keep its place in line. */
  get open(): boolean {
    return this.gathering !== undefined;
  }

  /**
   * Adds an operation to the gathering group, opening one (and queuing its flush) when none is. Settles
   * after the group's COMMIT: with `committed(value)`, or the value itself without it; rejects as `run`
   * throws, or with the error that lost the group's transaction.
   */
  add<T, R = T>(run: (grouped: boolean) => T, committed?: (value: T) => R): Promise<R> {
    return new Promise<R>((resolve, reject) => {
      const operation: Operation = { run, committed: committed as Operation['committed'], resolve: resolve as Operation['resolve'], reject };
      if (this.gathering !== undefined) {
        this.gathering.push(operation);
        return;
      }
      const group = [operation];
      this.gathering = group;
      void this.mutex.acquire().then(async (release) => {
        try {
          await checkPhase();
          this.flush(group);
        } finally {
          // Before the operations' callers resume: what they submit next finds the connection idle.
          release();
        }
      });
    });
  }

  private flush(group: Operation[]): void {
    if (this.gathering === group) this.gathering = undefined;
    this.flushed(group.length);
    // Alone, or on a connection someone else left inside a transaction, an operation runs as it would
    // without grouping: its statements in autocommit mode (or in that transaction).
    if (group.length === 1 || this.database.inTransaction) {
      for (const operation of group) alone(operation);
      return;
    }
    const outcomes: (() => void)[] = [];
    try {
      this.begin.run();
      for (const operation of group) {
        try {
          const value = operation.run(true);
          outcomes.push(() => settle(operation, value));
        } catch (error) {
          if (!this.database.inTransaction) throw error;
          outcomes.push(() => operation.reject(asError(error)));
        }
      }
      this.commit.run();
    } catch (error) {
      if (this.database.inTransaction) {
        try {
          this.rollback.run();
        } catch {
          // The connection has left the transaction either way (SQLite rolls back what it cannot finish).
        }
      }
      for (const operation of group) operation.reject(asError(error));
      return;
    }
    for (const outcome of outcomes) outcome();
  }
}

/** Runs `operation` on its own (autocommit) and settles it. */
function alone(operation: Operation): void {
  let value: unknown;
  try {
    value = operation.run(false);
  } catch (error) {
    operation.reject(asError(error));
    return;
  }
  settle(operation, value);
}

/** Settles a committed `operation` with its `value`, mapped by `committed`. */
function settle(operation: Operation, value: unknown): void {
  try {
    operation.resolve(operation.committed === undefined ? value : operation.committed(value));
  } catch (error) {
    operation.reject(asError(error));
  }
}

/** Resolves in the event loop's check phase, after the I/O callbacks of this turn have submitted their operations. */
function checkPhase(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}
