/**
 * `retrysafe complete --store URL [--plans MODULE] [--limit 100] [--lease 30s] [--retention 24h]`: finds abandoned
 * multi-phase operations (in progress at a recovery point, lease expired) and, given the plans, re-drives
 * them to completion with `completeAbandoned`.
 *
 * The CLI can only run plans it is given: without `--plans` it lists the abandoned records and changes
 * nothing. `--plans` names an ES module (path relative to the working directory) whose export `plans` is
 * an array of plans from `definePhases`; their phases receive the store's transaction handle (`tx`, the
 * `better-sqlite3` connection for `sqlite:` stores, the `pg` `PoolClient` for `postgres:` ones) or `undefined` on a
 * plain store (`memory:`, `redis:`).
 *
 * Exit codes: 0 listed, or every record re-driven or skipped; 1 a re-drive failed (the record stays
 * resumable), the store cannot list abandoned records, or the plans module is unusable; 2 usage error.
 *
 * @module
 */
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { Command } from 'commander';
import { completeAbandoned, type CompletionReport } from '../phases/completer.js';
import type { PhasePlan } from '../phases/plan.js';
import { createPhaseRunner, storeName } from '../phases/runner.js';
import type { IdempotencyRecord } from '../core/record.js';
import { decodeRecoveryPoint } from '../phases/recovery-point.js';
import { durationOption, integerFlag, storeFlag } from './store-flag.js';
import { loadPeer } from './peer.js';
import type { OpenedStore, StoreTarget } from '../store-url.js';

interface CompleteFlags {
  readonly store: StoreTarget;
  readonly plans?: string;
  readonly limit: number;
  readonly lease: number;
  readonly retention: number;
}

/**
 * Loads the `plans` export of the module at `path` (resolved against the working directory).
 *
 * @throws Error when the module cannot be imported or has no `plans` array
 */
async function loadPlans(path: string): Promise<readonly PhasePlan<unknown, never>[]> {
  const module = (await import(pathToFileURL(resolve(path)).href)) as { plans?: unknown };
  if (!Array.isArray(module.plans)) {
    throw new Error(`the module ${JSON.stringify(path)} must export "plans", an array of plans from definePhases`);
  }
  return module.plans as PhasePlan<unknown, never>[];
}

/** One line describing an abandoned record: scope, key, plan, phase reached and when its lease ended. */
function describeAbandoned(record: IdempotencyRecord): string {
  const point = record.recoveryPoint === undefined ? undefined : decodeRecoveryPoint(record.recoveryPoint);
  const at =
    point === undefined
      ? `recovery point ${JSON.stringify(record.recoveryPoint)}`
      : `plan ${JSON.stringify(point.plan)} after phase ${JSON.stringify(point.phase)}${point.saga === undefined ? '' : `, ${point.saga.status}`}`;
  return `scope ${JSON.stringify(record.scope)} key ${JSON.stringify(record.key)}: ${at}, lease ended ${new Date(record.leaseExpiresAt).toISOString()}`;
}

/** The report of a re-drive, one line per record that was not simply completed. */
export function formatCompletion(report: CompletionReport): string {
  const lines = [
    `retrysafe: ${report.found} abandoned; completed ${report.completed.length}, compensated ${report.compensated.length}, ` +
      `paused ${report.paused.length}, skipped ${report.skipped.length}, failed ${report.failed.length}`,
  ];
  const name = (ref: { scope: string; key: string }): string => `scope ${JSON.stringify(ref.scope)} key ${JSON.stringify(ref.key)}`;
  for (const ref of report.completed) lines.push(`completed ${name(ref)}`);
  for (const ref of report.compensated) lines.push(`compensated ${name(ref)}`);
  for (const ref of report.paused) lines.push(`paused ${name(ref)}: ${ref.error.message} (retrysafe compensation --retry or --mark-compensated)`);
  for (const ref of report.skipped) lines.push(`skipped ${name(ref)}: ${ref.reason}`);
  for (const ref of report.failed) {
    lines.push(`failed ${name(ref)}: ${ref.error instanceof Error ? ref.error.message : String(ref.error)}`);
  }
  return `${lines.join('\n')}\n`;
}

/** Adds the `complete` command to `program`. */
export function register(program: Command): void {
  program
    .command('complete')
    .description('List abandoned multi-phase operations; with --plans, re-drive them to completion from their recovery points.')
    .requiredOption('--store <url>', 'idempotency store, e.g. sqlite:./idempotency.db', storeFlag)
    .option('--plans <module>', 'ES module exporting `plans` (an array of definePhases plans) to re-drive the records with')
    .option('--limit <n>', 'most records handled', integerFlag('--limit', 1, 1_000_000), 100)
    .addOption(durationOption('--lease <duration>', 'lease taken on each record while re-driving it, e.g. 30s', '30s'))
    .addOption(durationOption('--retention <duration>', 'how long a completed record is kept for replay, as your service keeps it, e.g. 7d', '24h'))
    .addHelpText('after', '\nExit codes: 0 listed or all re-driven, 1 a re-drive failed or the store cannot list, 2 usage error.')
    .action(async (flags: CompleteFlags) => {
      const opened = await loadPeer(() => flags.store.open('existing'));
      try {
        if (flags.plans === undefined) await list(opened, flags.limit);
        else await redrive(opened, await loadPlans(flags.plans), flags);
      } finally {
        await opened.store.close();
      }
    });
}

async function list(opened: OpenedStore, limit: number): Promise<void> {
  if (typeof opened.store.listAbandoned !== 'function') {
    throw new Error(`the store (${storeName(opened.store)}) cannot list abandoned records`);
  }
  const records = await opened.store.listAbandoned(limit);
  process.stdout.write(`retrysafe: ${records.length} abandoned multi-phase records${records.length === limit ? ' (limit reached)' : ''}\n`);
  for (const record of records) process.stdout.write(`${describeAbandoned(record)}\n`);
  if (records.length > 0) process.stdout.write('Pass --plans MODULE to re-drive them.\n');
}

async function redrive(opened: OpenedStore, plans: readonly PhasePlan<unknown, never>[], flags: CompleteFlags): Promise<void> {
  const leaseMs = flags.lease;
  const retentionMs = flags.retention;
  const limit = flags.limit;
  let report: CompletionReport;
  switch (opened.scheme) {
    case 'sqlite':
      report = await completeAbandoned({ runner: createPhaseRunner({ store: opened.store, transactional: true, leaseMs, retentionMs }), plans, limit });
      break;
    case 'postgres':
    case 'postgresql':
      report = await completeAbandoned({ runner: createPhaseRunner({ store: opened.store, transactional: true, leaseMs, retentionMs }), plans, limit });
      break;
    case 'memory':
    case 'redis':
    case 'rediss':
    case 'etcd':
    case 'dynamodb':
      report = await completeAbandoned({ runner: createPhaseRunner({ store: opened.store, leaseMs, retentionMs }), plans, limit });
  }
  process.stdout.write(formatCompletion(report));
  if (report.failed.length > 0) process.exitCode = 1;
}
