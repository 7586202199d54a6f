/**
 * `retrysafe compensation --store URL [--scope S] KEY (--retry | --mark-compensated)`: the operator's two
 * ways out of a saga paused as `compensation_failed` (a compensation gave up; `retrysafe inspect` shows
 * it). `--retry` puts the saga back to `compensating` with a fresh attempt count; `--mark-compensated`
 * records the pending compensations as settled by hand and the saga as `compensated`. Either ends the
 * record's lease at once, fenced on its lease token, so the next client retry or
 * `retrysafe complete --plans MODULE` drives it on: through the remaining compensations, or straight to
 * the plan's compensated response, saved for replay.
 *
 * Exit codes: 0 done; 1 no such record, the record is not a paused saga, it changed meanwhile (or the
 * store failed); 2 usage error (neither or both of `--retry` and `--mark-compensated`).
 *
 * @module
 */
import type { Command } from 'commander';
import type { Claim, IdempotencyRecord } from '../core/record.js';
import { decodeRecoveryPoint, encodeRecoveryPoint, type RecoveryPoint, type SagaProgress } from '../phases/recovery-point.js';
import { CliFailure } from './failure.js';
import { storeFlag } from './store-flag.js';
import { loadPeer } from './peer.js';
import type { StoreTarget } from '../store-url.js';

interface CompensationFlags {
  readonly store: StoreTarget;
  readonly scope: string;
  readonly retry?: true;
  readonly markCompensated?: true;
}

/**
 * The recovery point text that resumes (`retry`) or settles (`mark-compensated`) the paused saga at `point`.
 * Exported for the CLI's tests.
 */
export function resolvedSaga(point: RecoveryPoint & { readonly saga: SagaProgress }, action: 'retry' | 'mark-compensated'): string {
  const { saga } = point;
  const next: SagaProgress =
    action === 'retry'
      ? { ...saga, status: 'compensating', attempts: 0 }
      : { ...saga, status: 'compensated', pending: [], attempts: 0, settled: [...(saga.settled ?? []), ...saga.pending] };
  return encodeRecoveryPoint({ ...point, saga: next });
}

/** The claim of the record's current lease holder, which a paused saga has none of but its token. */
function holderOf(record: IdempotencyRecord): Claim {
  const { scope, key, fingerprint, leaseToken, leaseExpiresAt } = record;
  return { scope, key, fingerprint, leaseToken, leaseExpiresAt, takeover: false };
}

/** Adds the `compensation` command to `program`. */
export function register(program: Command): void {
  program
    .command('compensation')
    .description('Resolve a saga paused as compensation_failed: retry its compensation, or mark it compensated by hand.')
    .argument('<key>', 'the idempotency key, exactly as the client sent it')
    .requiredOption('--store <url>', 'idempotency store, e.g. sqlite:./idempotency.db', storeFlag)
    .option('--scope <scope>', 'the scope (tenant/principal) the key lives in', '')
    .option('--retry', 'run the pending compensations again')
    .option('--mark-compensated', 'record the pending compensations as done by hand; the saga then answers its compensated response')
    .addHelpText('after', '\nExit codes: 0 done, 1 no such paused saga (or the store failed), 2 usage error.')
    .action(async (key: string, flags: CompensationFlags) => {
      if ((flags.retry === true) === (flags.markCompensated === true)) {
        throw new CliFailure('compensation takes exactly one of --retry and --mark-compensated (see --help)');
      }
      const action = flags.retry === true ? 'retry' : 'mark-compensated';
      const opened = await loadPeer(() => flags.store.open('existing'));
      try {
        const { store } = opened;
        const name = `key ${JSON.stringify(key)} in scope ${JSON.stringify(flags.scope)}`;
        const record = await store.get(flags.scope, key);
        if (record === undefined) throw new CliFailure(`no record for ${name}`, 1);
        const point = record.recoveryPoint === undefined ? undefined : decodeRecoveryPoint(record.recoveryPoint);
        if (record.state !== 'in_progress' || point?.saga?.status !== 'compensation_failed') {
          throw new CliFailure(`the record for ${name} is not a saga paused as compensation_failed (it is ${point?.saga?.status ?? record.state})`, 1);
        }
        if (typeof store.checkpoint !== 'function') throw new CliFailure('the store cannot record recovery points', 1);
        const text = resolvedSaga({ ...point, saga: point.saga }, action);
        if ((await store.checkpoint(holderOf(record), text, 0)) === undefined) {
          throw new CliFailure(`the record for ${name} changed meanwhile; inspect it again`, 1);
        }
        const now = action === 'retry' ? 'compensating' : 'compensated';
        process.stdout.write(
          `retrysafe: ${name} is ${now}; the next retry or \`retrysafe complete --plans MODULE\` drives it to its compensated response\n`,
        );
      } finally {
        await opened.store.close();
      }
    });
}
