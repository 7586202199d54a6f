/** Wraps a processor to record each delivery's disposition and let a test wait for a condition on them. */
import type { Disposition, MessageProcessor } from '../../../src/messaging/inbox/index.js';

export interface Recorder {
  readonly process: MessageProcessor;
  /** Every (id, disposition) settled so far, in order. */
  readonly seen: { readonly id: string | undefined; readonly disposition: Disposition }[];
  /** Resolves once `done(seen)` holds (checked on each delivery and every 25 ms); rejects after `timeoutMs`. */
  until(done: (seen: Recorder['seen']) => boolean, timeoutMs?: number): Promise<void>;
}

export function record(inner: MessageProcessor): Recorder {
  const seen: Recorder['seen'] = [];
  const waiters = new Set<() => void>();
  const wrapped = async (message: Parameters<MessageProcessor>[0]): Promise<Disposition> => {
    const disposition = await inner(message);
    seen.push({ id: message.id, disposition });
    for (const wake of waiters) wake();
    return disposition;
  };
  const process: MessageProcessor = inner.redrivePending === undefined ? wrapped : Object.assign(wrapped, { redrivePending: inner.redrivePending });
  return {
    process,
    seen,
    until(done, timeoutMs = 15_000) {
      return new Promise<void>((resolve, reject) => {
        const check = (): void => {
          if (!done(seen)) return;
          waiters.delete(check);
          clearTimeout(timer);
          clearInterval(poll);
          resolve();
        };
        // Conditions may also depend on other recorders or on the database.
        const poll = setInterval(check, 25);
        const timer = setTimeout(() => {
          waiters.delete(check);
          clearInterval(poll);
          reject(new Error(`condition not met within ${timeoutMs} ms; seen ${JSON.stringify(seen)}`));
        }, timeoutMs);
        waiters.add(check);
        check();
      });
    },
  };
}

/** How many times `id` was settled with `disposition` (any disposition when omitted). */
export function count(seen: Recorder['seen'], id: string, disposition?: Disposition): number {
  return seen.filter((s) => s.id === id && (disposition === undefined || s.disposition === disposition)).length;
}
