/**
 * The items of the batch tests (no test framework here: the crash child imports it too).
 */
import type { BatchItem } from '../../src/core/batch.js';

/** The fingerprint of item `n` (`variant` changes it). */
export function fingerprintOf(n: number, variant = ''): string {
  return `${n.toString(16).padStart(8, '0')}${variant}`.padEnd(64, 'a');
}

/** Items for the keys `keys` in order, each input the key's number. */
export function batchItems(keys: readonly number[], scope = 'batch'): BatchItem<number>[] {
  return keys.map((n) => ({ scope, key: `k${n}`, fingerprint: fingerprintOf(n), input: n }));
}
