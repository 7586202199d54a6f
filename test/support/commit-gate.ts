/**
 * A transactional store wrapper for tests that must see WHEN a transaction commits: it parks COMMIT until
 * `commit` settles and records `before-commit` / `committed` in `events`, so a test can prove a response
 * left only after COMMIT.
 */
import type { IdempotencyStore, TransactionalStore } from '../../src/core/store.js';

/** Wraps `store`; its other operations pass through unchanged. */
export function gateCommits<Tx>(
  store: TransactionalStore<Tx> & Required<Pick<IdempotencyStore, 'waitFor'>>,
  events: string[],
  commit: Promise<void> | undefined,
): TransactionalStore<Tx> {
  return {
    claim: (input) => store.claim(input),
    complete: (claim, response, retentionMs) => store.complete(claim, response, retentionMs),
    release: (claim) => store.release(claim),
    renew: (claim, leaseMs) => store.renew(claim, leaseMs),
    get: (scope, key) => store.get(scope, key),
    reap: (limit) => store.reap(limit),
    close: () => store.close(),
    waitFor: (scope, key, timeoutMs) => store.waitFor(scope, key, timeoutMs),
    transaction: async (fn) => {
      const result = await store.transaction(async (tx, view) => {
        const value = await fn(tx, view);
        events.push('before-commit');
        await commit;
        return value;
      });
      events.push('committed');
      return result;
    },
    claimTransaction: async (input, fn, bounds) => {
      const result = await store.claimTransaction(input, async (tx, view, claim) => {
        const value = await fn(tx, view, claim);
        events.push('before-commit');
        await commit;
        return value;
      }, bounds);
      if (result.acquired) events.push('committed');
      return result;
    },
  };
}
