/**
 * `retrysafe outbox …`: operate the transactional outbox on PostgreSQL (tables in `--schema`, as migrated
 * by `retrysafe migrate`).
 *
 * - `outbox status --store URL [--json]` prints the pending count, the oldest pending message's age, rows
 *   in flight, rows the relay is retrying and the last error of the oldest of them, dead letters, sent
 *   rows awaiting the reaper, and the enqueue-to-sent latency (p50/p99) of the last 5 minutes.
 * - `outbox dead-letters --store URL [--limit N] [--json]` lists dead letters, oldest first.
 * - `outbox redrive ID --store URL` makes a dead letter pending again, with its original id.
 * - `outbox reap --store URL --retention 7d [--limit N]` deletes sent rows older than the retention in
 *   batches of `--limit`, until caught up; never pending or dead-lettered rows.
 *
 * The schema is the `--store` URL's `?schema=`, else `--schema`. No command creates it: a missing schema
 * (or an unreachable database) is one line and exit 2; run `retrysafe migrate` first.
 *
 * Exit codes: 0 done; 1 the database refused a statement, or `redrive` found no such dead letter; 2 usage
 * error, database unreachable, schema missing, or `pg` not installed.
 *
 * @module
 */
import { InvalidArgumentError, type Command } from 'commander';
import type pg from 'pg';
import type { Outbox, OutboxDeadLetter, OutboxStatus } from '../messaging/outbox/outbox.js';
import { DEFAULT_SCHEMA } from '../stores/postgres/schema.js';
import { loadPeer } from './peer.js';
import { durationFlag, integerFlag, postgresStoreFlag, schemaFlag, schemaOf } from './store-flag.js';
import { requirePostgresSchema, type StoreTarget } from '../store-url.js';

interface StoreFlags {
  readonly store: StoreTarget;
}

/** Adds the `outbox` command group to `program`. */
export function register(program: Command): void {
  const outbox = program.command('outbox').description('Monitor the transactional outbox; list and redrive dead letters; reap sent rows.');

  withStore(outbox.command('status'))
    .description('Pending count, oldest pending age, dead letters and publish latency.')
    .option('--json', 'print one JSON object')
    .action(async (flags: StoreFlags & { json?: boolean }, command: Command) => {
      await withOutbox(flags, command, async (box, pool) => {
        const status = await box.status(pool);
        process.stdout.write(flags.json === true ? `${JSON.stringify({ schema: box.schema, ...status })}\n` : formatStatus(box.schema, status));
      });
    });

  withStore(outbox.command('dead-letters'))
    .description('List dead-lettered messages, oldest first.')
    .option('--limit <n>', 'at most this many', integerFlag('--limit', 1, 1_000_000), 100)
    .option('--json', 'one JSON object per line (payload base64)')
    .action(async (flags: StoreFlags & { limit: number; json?: boolean }, command: Command) => {
      await withOutbox(flags, command, async (box, pool) => {
        const letters = await box.deadLetters(pool, flags.limit);
        process.stdout.write(letters.map((letter) => (flags.json === true ? deadLetterJson(letter) : deadLetterLine(letter))).join(''));
        if (letters.length === 0 && flags.json !== true) process.stdout.write('retrysafe: no dead letters\n');
      });
    });

  withStore(outbox.command('redrive').argument('<id>', 'the dead letter\'s message id (a UUID)', uuid))
    .description('Make a dead letter pending again; the relay publishes it with its original id.')
    .action(async (id: string, flags: StoreFlags, command: Command) => {
      await withOutbox(flags, command, async (box, pool) => {
        if (await box.redrive(pool, id)) {
          process.stdout.write(`retrysafe: ${id} redriven\n`);
        } else {
          process.stderr.write(`retrysafe: no dead letter ${id}\n`);
          process.exitCode = 1;
        }
      });
    });

  withStore(outbox.command('reap'))
    .description('Delete sent rows older than the retention, in bounded batches (never unsent rows).')
    .requiredOption('--retention <duration>', 'how long sent rows are kept, e.g. 7d', durationFlag('--retention'))
    .option('--limit <n>', 'rows per batch', integerFlag('--limit', 1, 1_000_000), 1_000)
    .action(async (flags: StoreFlags & { retention: number; limit: number }, command: Command) => {
      await withOutbox(flags, command, async (box, pool) => {
        let total = 0;
        for (;;) {
          const deleted = await box.reap(pool, { retentionMs: flags.retention, batchSize: flags.limit, maxBatches: 100 });
          total += deleted;
          if (deleted < flags.limit * 100) break;
        }
        process.stdout.write(`retrysafe: deleted ${total} sent rows\n`);
      });
    });
}

function withStore(command: Command): Command {
  return command
    .requiredOption('--store <url>', 'PostgreSQL URL, e.g. postgres://user@127.0.0.1:5432/app[?schema=NAME]', postgresStoreFlag('the outbox lives on PostgreSQL'))
    .option('--schema <name>', 'schema holding the outbox table (letters, digits, _), unless the URL names one', schemaFlag, DEFAULT_SCHEMA)
    .addHelpText(
      'after',
      '\nExit codes: 0 done, 1 the database refused (or no such dead letter), 2 usage error, database unreachable or schema missing.',
    );
}

async function withOutbox(flags: StoreFlags, command: Command, fn: (outbox: Outbox, pool: pg.Pool) => Promise<void>): Promise<void> {
  const schema = schemaOf(flags.store, command);
  const [{ default: pg }, { createOutbox }] = await loadPeer(() => Promise.all([import('pg'), import('../messaging/outbox/outbox.js')]));
  const pool = new pg.Pool({ connectionString: flags.store.driverUrl, max: 1 });
  pool.on('error', () => undefined);
  try {
    await requirePostgresSchema(pool, schema, flags.store.url);
    await fn(createOutbox({ schema }), pool);
  } finally {
    await pool.end();
  }
}

function formatStatus(schema: string, s: OutboxStatus): string {
  const latency =
    s.latencyP50Ms === undefined
      ? 'no message sent in the last 5 minutes'
      : `p50 ${milliseconds(s.latencyP50Ms)}, p99 ${milliseconds(s.latencyP99Ms ?? s.latencyP50Ms)} (last 5 minutes)`;
  return [
    `retrysafe outbox in schema "${schema}"`,
    `  pending             ${s.pending}`,
    `  oldest pending age  ${milliseconds(s.oldestPendingAgeMs)}`,
    `  in flight           ${s.inFlight}`,
    `  retrying            ${s.retrying}${s.oldestPendingError === undefined ? '' : ` (oldest's last error: ${s.oldestPendingError})`}`,
    `  dead letters        ${s.deadLetters}`,
    `  sent (retained)     ${s.sent}`,
    `  publish latency     ${latency}`,
    '',
  ].join('\n');
}

function milliseconds(ms: number): string {
  return ms < 10_000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(1)} s`;
}

function deadLetterLine(letter: OutboxDeadLetter): string {
  const when = new Date(letter.deadLetteredAt).toISOString();
  return `${letter.id}  ${when}  topic=${JSON.stringify(letter.topic)} key=${JSON.stringify(letter.key)} attempts=${letter.attempts}  ${letter.error ?? ''}\n`;
}

function deadLetterJson(letter: OutboxDeadLetter): string {
  return `${JSON.stringify({ ...letter, payload: Buffer.from(letter.payload).toString('base64') })}\n`;
}

function uuid(text: string): string {
  if (!/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i.test(text)) {
    throw new InvalidArgumentError(`the message id must be a UUID, got ${JSON.stringify(text)}.`);
  }
  return text.toLowerCase();
}
