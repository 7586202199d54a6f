/**
 * A first-in, first-out async mutex. The SQLite store has one connection; while a transactional execution
 * awaits its handler, that connection is inside a transaction, so every other operation of the store must
 * wait its turn or its statements would land inside someone else's transaction.
 *
 * @module
 */

/** Runs tasks one at a time, in the order they were submitted. */
export class Mutex {
  private tail: Promise<unknown> = Promise.resolve();
  /** Tasks submitted and not yet settled. */
  private pending = 0;

  /** `true` when no task is queued or running: a task submitted now would run next. */
  get idle(): boolean {
    return this.pending === 0;
  }

  /**
   * Runs `task` once every task submitted before it has settled, and settles as `task` does. A task that
   * throws or rejects releases the mutex like one that succeeds.
   */
  run<T>(task: () => T | Promise<T>): Promise<T> {
    this.pending++;
    const result = this.tail.then(task);
    this.tail = result.then(
      () => {
        this.pending--;
      },
      () => {
        this.pending--;
      },
    );
    return result;
  }
}
