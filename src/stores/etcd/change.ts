/**
 * Read, decide, write conditioned on the revision read: how the etcd store changes a record it does not
 * create (complete, release, checkpoint, renew).
 *
 * @module
 */
import { decodeRecord, type StoredRecord } from './layout.js';
import { rangeOf, type ConditionalWriter, type Write } from './write.js';

/**
 * A decision on a record: the result to resolve, the write that must commit for it to hold, and what must
 * be done before that write is sent (`before`: the side store's copy of a large body).
 */
export interface Change<T> {
  readonly result: T;
  readonly write?: Write;
  readonly before?: () => Promise<void>;
}

/** A decision that writes nothing. */
export function decided<T>(result: T): Change<T> {
  return { result };
}

/**
 * Reads the record at `key`, lets `decide` (at the store's time `now()`) choose a result and a write, and
 * sends the write conditioned on the revision read (after the decision's `before`, when it has one). When another write came first, the transaction's
 * failure branch returns the record as it now stands and `decide` runs again on it: the result is always
 * that of a decision on the record the write replaced.
 */
export async function change<T>(
  writer: ConditionalWriter,
  key: Buffer,
  read: () => Promise<StoredRecord | undefined>,
  decide: (stored: StoredRecord | undefined, now: number) => Change<T>,
  now: () => number,
): Promise<T> {
  let stored = await read();
  for (;;) {
    const decision = decide(stored, now());
    if (decision.write === undefined) return decision.result;
    if (decision.before !== undefined) await decision.before();
    const reply = await writer.write(key, stored?.modRevision, decision.write);
    if (reply.succeeded) return decision.result;
    const kv = rangeOf(reply);
    stored = kv === undefined ? undefined : decodeRecord(kv.value, kv.mod_revision);
  }
}
