/**
 * The SQLite store's in-process waiters (`waitFor`): duplicates waiting for a record in progress, woken by
 * this process's own completions and releases after their COMMIT, and by a poll that sees other processes'.
 *
 * @module
 */
import type { IdempotencyRecord } from '../../core/record.js';
import { asError } from './attempt.js';

/** How often a waiter re-reads the record to see completions made by other processes, in milliseconds. */
const POLL_INTERVAL_MS = 50;

type Waiter = (record: IdempotencyRecord | undefined) => void;

/** The waiters of one store, by (scope, key). */
export class Waiters {
  private readonly bySlot = new Map<string, Set<Waiter>>();

  /**
   * Resolves with the record once it is no longer `initial`'s lease in progress (completed, released,
   * taken over), or with the last record read after `timeoutMs` milliseconds.
   *
   * @param read - reads the record again (the poll); its rejection rejects the wait
   */
  wait(initial: IdempotencyRecord, timeoutMs: number, read: () => Promise<IdempotencyRecord | undefined>): Promise<IdempotencyRecord | undefined> {
    const id = slot(initial.scope, initial.key);
    return new Promise((resolve, reject) => {
      const waiters = this.bySlot.get(id) ?? new Set<Waiter>();
      this.bySlot.set(id, waiters);
      let settled = false;
      const finish = (outcome: () => void): void => {
        if (settled) return;
        settled = true;
        clearTimeout(deadline);
        clearInterval(poll);
        waiters.delete(wake);
        if (waiters.size === 0 && this.bySlot.get(id) === waiters) this.bySlot.delete(id);
        outcome();
      };
      const wake: Waiter = (record) => finish(() => resolve(record));
      const fail = (error: unknown): void => finish(() => reject(asError(error)));
      let latest: IdempotencyRecord | undefined = initial;
      let polling = false;
      // Another process's completion or release is seen only by reading the row again. One read at a
      // time, so that a long transaction holding the mutex does not pile reads up behind it.
      const poll = setInterval(() => {
        if (polling) return;
        polling = true;
        read().then((record) => {
          polling = false;
          latest = record;
          if (record?.state !== 'in_progress' || record.leaseToken !== initial.leaseToken) wake(record);
        }, fail);
      }, POLL_INTERVAL_MS);
      // The deadline does not queue a read behind a transaction: it answers with what it saw last.
      const deadline = setTimeout(() => wake(latest), timeoutMs);
      waiters.add(wake);
    });
  }

  /** Whether anyone waits on (scope, key). */
  waiting(scope: string, key: string): boolean {
    return this.bySlot.size !== 0 && this.bySlot.has(slot(scope, key));
  }

  /** Wakes the waiters on (scope, key) with `record` as it now stands (`undefined` once released). */
  wake(scope: string, key: string, record: IdempotencyRecord | undefined): void {
    const waiters = this.bySlot.get(slot(scope, key));
    if (waiters) for (const wake of [...waiters]) wake(record);
  }

  /** Wakes every waiter with `undefined` (the store is closing). */
  wakeAll(): void {
    for (const waiters of this.bySlot.values()) for (const wake of [...waiters]) wake(undefined);
  }
}

function slot(scope: string, key: string): string {
  return JSON.stringify([scope, key]);
}
