/**
 * Linking the attempts of the retrying fetch to the caller's `AbortSignal` without leaving anything on it.
 *
 * A caller's signal may live for a whole batch (thousands of calls, many in flight at once). One listener
 * per attempt would trip Node's `MaxListenersExceededWarning` with more than ten attempts in flight, and
 * `AbortSignal.any` keeps a reference on the source signal for every combined signal it ever made (Node
 * 20 does not prune them). So the attempts in flight on one signal share ONE listener, removed as soon as
 * the last of them ends.
 *
 * @module
 */

interface Followers {
  readonly controllers: Set<AbortController>;
  readonly listener: () => void;
}

const bySignal = new WeakMap<AbortSignal, Followers>();

/**
 * Aborts `controller` with `signal`'s reason when `signal` aborts (at once when it already has), until the
 * returned function is called; call it when the attempt ends.
 *
 * @example
 * ```ts
 * const attempt = new AbortController();
 * const unfollow = followSignal(callerSignal, attempt);
 * try { await fetch(url, { signal: attempt.signal }); } finally { unfollow(); }
 * ```
 */
export function followSignal(signal: AbortSignal, controller: AbortController): () => void {
  if (signal.aborted) {
    controller.abort(signal.reason);
    return () => undefined;
  }
  let followers = bySignal.get(signal);
  if (followers === undefined) {
    const controllers = new Set<AbortController>();
    const listener = (): void => {
      bySignal.delete(signal);
      for (const follower of controllers) follower.abort(signal.reason);
    };
    followers = { controllers, listener };
    bySignal.set(signal, followers);
    signal.addEventListener('abort', listener, { once: true });
  }
  const { controllers, listener } = followers;
  controllers.add(controller);
  return () => {
    controllers.delete(controller);
    if (controllers.size > 0 || bySignal.get(signal) !== followers) return;
    bySignal.delete(signal);
    signal.removeEventListener('abort', listener);
  };
}
