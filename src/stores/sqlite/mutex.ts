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

  /**
   * Runs `task` once every task submitted before it has settled, and settles as `task` does. A task that
   * throws or rejects releases the mutex like one that succeeds.
   */
  run<T>(task: () => T | Promise<T>): Promise<T> {
    const result = this.tail.then(task);
    this.tail = result.then(
      () => undefined,
      () => undefined,
    );
    return result;
  }
}
