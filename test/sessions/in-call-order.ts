/**
 * A session store whose calls are answered one at a time, for the shared suite over a real database.
 */
import type { SessionStore } from '../../src/sessions/index.js';

/**
 * The store with its calls answered one at a time, in the order they were made. The suite was written
 * against in-process stores, which answer before the next macrotask: three of its tests fire a request,
 * wait one `setImmediate`, and expect the store to have seen it (duplicates held in flight, a takeover
 * after a live holder, a pipelining client's stored-response bound). Queueing gives the suite that order
 * over a real database; concurrency on the database itself is raced by the two-pool tests.
 */
export function inCallOrder(store: SessionStore): SessionStore {
  let tail: Promise<unknown> = Promise.resolve();
  const list = store.listSessions?.bind(store);
  const serial =
    <A extends unknown[], R>(operation: (...args: A) => Promise<R>) =>
    (...args: A): Promise<R> => {
      const answer = tail.then(() => operation(...args));
      tail = answer.catch(() => undefined);
      return answer;
    };
  return {
    create: serial((...args: Parameters<SessionStore['create']>) => store.create(...args)),
    begin: serial((...args: Parameters<SessionStore['begin']>) => store.begin(...args)),
    complete: serial((...args: Parameters<SessionStore['complete']>) => store.complete(...args)),
    release: serial((...args: Parameters<SessionStore['release']>) => store.release(...args)),
    keepAlive: serial((...args: Parameters<SessionStore['keepAlive']>) => store.keepAlive(...args)),
    end: serial((...args: Parameters<SessionStore['end']>) => store.end(...args)),
    reap: serial((...args: Parameters<SessionStore['reap']>) => store.reap(...args)),
    stats: serial((...args: Parameters<SessionStore['stats']>) => store.stats(...args)),
    ...(list && { listSessions: serial(list) }),
    close: () => store.close(),
  };
}
