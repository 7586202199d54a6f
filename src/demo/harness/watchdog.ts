/**
 * The watchdog on every wait between a demo's parent and its child processes: a wait that gets no answer in
 * time, or whose run is aborted, rejects with a message saying what was awaited, so a run never hangs
 * silently.
 *
 * @module
 */
import type { ChildProcess } from 'node:child_process';

/** Thrown by {@link watchdog} when the awaited answer did not come in time; names what was awaited. */
export class NoAnswerError extends Error {
  override readonly name = 'NoAnswerError';
}

/**
 * Resolves as `wait` does; rejects with {@link NoAnswerError} (`no answer from <what> in <ms> ms`) after
 * `timeoutMs` milliseconds, or with `signal.reason` (an Error; anything else is wrapped in one) as soon as
 * `signal` aborts (at once when it already has).
 * `wait` itself is not cancelled: the caller kills the child it was waiting on.
 */
export function watchdog<T>(wait: Promise<T>, timeoutMs: number, what: string, signal?: AbortSignal): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const done = (): void => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
    };
    const onAbort = (): void => {
      done();
      const reason: unknown = signal?.reason;
      reject(reason instanceof Error ? reason : new Error(`aborted while waiting for ${what}`, { cause: reason }));
    };
    const timer = setTimeout(() => {
      done();
      reject(new NoAnswerError(`no answer from ${what} in ${timeoutMs} ms`));
    }, timeoutMs);
    if (signal?.aborted === true) {
      onAbort();
      return;
    }
    signal?.addEventListener('abort', onAbort, { once: true });
    wait.then(
      (value) => {
        done();
        resolve(value);
      },
      (error: unknown) => {
        done();
        reject(error instanceof Error ? error : new Error(String(error)));
      },
    );
  });
}

/** Resolves once `child` has exited: at once when it already has (a listener added then would never fire). */
export function exitOf(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => child.once('exit', () => resolve()));
}
