// The workload the store-level benches share: a store, its completed keys, and one operation at a time.
import { TextEncoder } from 'node:util';

const RETENTION_MS = 86_400_000;

/** The response the benches save: 201, a JSON content type, a short JSON body; `large` adds a header and a longer body. */
export function benchResponse(large = false) {
  return large
    ? {
        status: 201,
        headers: { 'content-type': 'application/json', 'x-request-id': 'abcdef0123456789' },
        body: new TextEncoder().encode('{"id":"pay_1","amount":1000,"currency":"EUR","customer":"cus_42","status":"ok"}'),
      }
    : { status: 201, headers: { 'content-type': 'application/json' }, body: new TextEncoder().encode('{"id":"pay_1","amount":1000}') };
}

/**
 * Completes `completedKeys` keys on `store` with `response`, then resolves with `one()`: for `replay`, a claim
 * of the next completed key (refused with the record, or it throws); otherwise a claim and completion of a
 * new key (or it throws).
 */
export async function storeWorkload(store, phase, { completedKeys, response }) {
  const input = (key) => ({ scope: '', key, fingerprint: 'f'.repeat(64), leaseMs: 30_000, retentionMs: RETENTION_MS });
  const completed = Array.from({ length: completedKeys }, (_, i) => `r-${i}`);
  for (const key of completed) {
    const result = await store.claim(input(key));
    await store.complete(result.claim, response, RETENTION_MS);
  }
  let k = 0;
  return async function one() {
    if (phase === 'replay') {
      if ((await store.claim(input(completed[k++ % completedKeys]))).acquired) throw new Error('a replay won its claim');
      return;
    }
    const result = await store.claim(input(`n-${k++}`));
    if (!result.acquired || !(await store.complete(result.claim, response, RETENTION_MS))) throw new Error('a new key was not claimed and completed');
  };
}
