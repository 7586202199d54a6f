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
  /** Turns taken or waited for, and not yet released. */
  private pending = 0;

  /** `true` when no task is queued or running: a task submitted now would run next. */
  get idle(): boolean {
    return this.pending === 0;
  }

  /**
   * Waits for every turn taken before this one to be released, then resolves with the function that
   * releases this one. The mutex is idle again as soon as it is called (not a promise tick later), so an
   * operation that a released task's caller submits at once runs without queuing.
   */
  acquire(): Promise<() => void> {
    this.pending++;
    let release!: () => void;
    const released = new Promise<void>((resolve) => {
      let done = false;
      release = () => {
        if (done) return;
        done = true;
        this.pending--;
        resolve();
      };
    });
    const turn = this.tail.then(() => release);
    this.tail = released;
    return turn;
  }

  /**
   * Runs `task` once every task submitted before it has settled, and settles as `task` does. A task that
   * throws or rejects releases the mutex like one that succeeds.
   */
  async run<T>(task: () => T | Promise<T>): Promise<T> {
    const release = await this.acquire();
    try {
      return await task();
    } finally {
      release();
    }
  }
}
