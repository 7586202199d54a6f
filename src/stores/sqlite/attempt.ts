/**
 * Synchronous better-sqlite3 calls as promises: the store contracts are asynchronous, the driver is not.
 *
 * @module
 */

/** Runs the synchronous `task` now: resolves with its value, or rejects with what it threw (as an `Error`). */
export function attempt<T>(task: () => T): Promise<T> {
  try {
    return Promise.resolve(task());
  } catch (error) {
    return Promise.reject(asError(error));
  }
}

/** `error` itself when it is an `Error`, else an `Error` whose message is its text. */
export function asError(error: unknown): Error {
  return error instanceof Error ? error : new Error(String(error));
}
