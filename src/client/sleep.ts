/**
 * An abortable timer-based wait; the default `sleep` of the retrying fetch.
 *
 * @module
 */

/**
 * Resolves after `ms` milliseconds, or rejects with `signal.reason` as soon as `signal` aborts (at once
 * when it already has).
 */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason as Error);
      return;
    }
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(signal?.reason as Error);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}
