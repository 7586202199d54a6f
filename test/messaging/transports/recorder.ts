/** Wraps a processor (per message or per batch) to record each delivery's disposition and let a test wait for a condition on them. */
import type { BatchProcessor, Disposition, MessageProcessor } from '../../../src/messaging/inbox/index.js';

/** Every (id, disposition) settled so far, in order. */
type Seen = { readonly id: string | undefined; readonly disposition: Disposition }[];

export interface Recorder<P = MessageProcessor> {
  readonly process: P;
  /** Every (id, disposition) settled so far, in order. */
  readonly seen: Seen;
  /** Resolves once `done(seen)` holds (checked on each delivery and every 25 ms); rejects after `timeoutMs`. */
  until(done: (seen: Seen) => boolean, timeoutMs?: number): Promise<void>;
}

/** A recorder of a batch processor, which also keeps the size of every batch it was given. */
export interface BatchRecorder extends Recorder<BatchProcessor> {
  readonly batches: number[];
}

export function record(inner: MessageProcessor): Recorder {
  const { seen, until, wake } = watcher();
  const wrapped = async (message: Parameters<MessageProcessor>[0]): Promise<Disposition> => {
    const disposition = await inner(message);
    seen.push({ id: message.id, disposition });
    wake();
    return disposition;
  };
  const process: MessageProcessor = inner.redrivePending === undefined ? wrapped : Object.assign(wrapped, { redrivePending: inner.redrivePending });
  return { process, seen, until };
}

export function recordBatch(inner: BatchProcessor): BatchRecorder {
  const { seen, until, wake } = watcher();
  const batches: number[] = [];
  const wrapped = async (messages: Parameters<BatchProcessor>[0]): Promise<readonly Disposition[]> => {
    const dispositions = await inner(messages);
    batches.push(messages.length);
    messages.forEach((message, index) => seen.push({ id: message.id, disposition: dispositions[index] as Disposition }));
    wake();
    return dispositions;
  };
  const process: BatchProcessor = inner.redrivePending === undefined ? wrapped : Object.assign(wrapped, { redrivePending: inner.redrivePending });
  return { process, seen, until, batches };
}

function watcher(): { seen: Seen; until: Recorder['until']; wake: () => void } {
  const seen: Seen = [];
  const waiters = new Set<() => void>();
  const until: Recorder['until'] = (done, timeoutMs = 15_000) =>
    new Promise<void>((resolve, reject) => {
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
  return { seen, until, wake: () => waiters.forEach((check) => check()) };
}

/** How many times `id` was settled with `disposition` (any disposition when omitted). */
export function count(seen: Recorder['seen'], id: string, disposition?: Disposition): number {
  return seen.filter((s) => s.id === id && (disposition === undefined || s.disposition === disposition)).length;
}
