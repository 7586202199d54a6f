/**
 * `retrysafe reap --store URL [--batch 1000] [--max-batches N]`: deletes records whose retention has
 * expired, in bounded batches so that no single statement holds the store for long. Records still under a
 * live lease are never deleted (see `IdempotencyStore.reap`).
 *
 * Exit codes: 0 done (including "nothing to reap"); 1 the store failed; 2 usage error.
 *
 * @module
 */
import type { Command } from 'commander';
import type { IdempotencyStore } from '../core/store.js';
import { ReceiverMetrics } from '../observability/metrics.js';
import { integerFlag, storeFlag } from './store-flag.js';
import { loadPeer } from './peer.js';
import type { StoreTarget } from '../store-url.js';

interface ReapFlags {
  readonly store: StoreTarget;
  readonly batch: number;
  readonly maxBatches?: number;
}

/** What {@link reapInBatches} did. */
interface ReapSummary {
  /** Records deleted, in total. */
  readonly deleted: number;
  /** Deleted count of each batch, in order. */
  readonly batches: readonly number[];
  /** `true` when the last batch came back short, so no expired record was left; `false` when `maxBatches` stopped it. */
  readonly exhausted: boolean;
}

/**
 * Calls `store.reap(batch)` until a batch deletes fewer than `batch` records, or `maxBatches` batches ran.
 *
 * @param batch - most records deleted per call (a positive integer)
 * @param maxBatches - most calls; `undefined` for no bound
 * @throws the store's error, as the store rejects
 */
export async function reapInBatches(store: IdempotencyStore, batch: number, maxBatches?: number): Promise<ReapSummary> {
  const reapedMetric = new ReceiverMetrics({}, store.kind ?? 'custom');
  const batches: number[] = [];
  let deleted = 0;
  while (maxBatches === undefined || batches.length < maxBatches) {
    const count = await store.reap(batch);
    reapedMetric.reaped(count);
    batches.push(count);
    deleted += count;
    if (count < batch) return { deleted, batches, exhausted: true };
  }
  return { deleted, batches, exhausted: false };
}

/** Adds the `reap` command to `program`. */
export function register(program: Command): void {
  program
    .command('reap')
    .description('Delete idempotency records whose retention has expired, in bounded batches.')
    .requiredOption('--store <url>', 'idempotency store, e.g. sqlite:./idempotency.db', storeFlag)
    .option('--batch <n>', 'most records deleted per batch', integerFlag('--batch', 1, 1_000_000), 1_000)
    .option('--max-batches <n>', 'stop after this many batches (default: until none is left)', integerFlag('--max-batches', 1, Number.MAX_SAFE_INTEGER))
    .addHelpText('after', '\nExit codes: 0 done, 1 the store failed, 2 usage error.')
    .action(async (flags: ReapFlags) => {
      const opened = await loadPeer(() => flags.store.open('existing'));
      try {
        const summary = await reapInBatches(opened.store, flags.batch, flags.maxBatches);
        for (const [index, count] of summary.batches.entries()) {
          process.stdout.write(`batch ${index + 1}: deleted ${count}\n`);
        }
        const more = summary.exhausted ? '' : ' (stopped at --max-batches; expired records may remain)';
        process.stdout.write(`retrysafe: reaped ${summary.deleted} expired records in ${summary.batches.length} batches${more}\n`);
      } finally {
        await opened.store.close();
      }
    });
}
