/**
 * `retrysafe inbox …`: operate the inbox (idempotent consumer) tables.
 *
 * - `inbox dead-letters --store URL [--consumer NAME] [--limit N] [--json]` lists dead letters, oldest first.
 * - `inbox redrive ID --consumer NAME --store URL` asks for a dead letter to be redriven: its attempts are
 *   reset and the running consumer (its broker adapter polls pending redrives) runs it through the inbox,
 *   so it is processed at most once however often it is redriven.
 * - `inbox reap --store URL --retention 7d [--retry-horizon 24h] [--limit N]` deletes processed marks
 *   older than the retention in batches of `--limit`, until caught up; safe beside running consumers.
 *
 * `--store` is a PostgreSQL URL (`postgres://…`, tables in the URL's `?schema=` or `--schema`, as migrated
 * by `retrysafe migrate`) or `sqlite:PATH` (tables prefixed `--prefix`). No command creates the schema, the
 * file or the tables: a missing one (or an unreachable database) is one line and exit 2.
 *
 * Exit codes: 0 done; 1 the database refused a statement, or `redrive` found no such dead letter; 2 usage
 * error, database unreachable, schema, file or tables missing, or the driver package not installed.
 *
 * @module
 */
import { existsSync } from 'node:fs';
import type BetterSqlite3 from 'better-sqlite3';
import { InvalidArgumentError, type Command } from 'commander';
import type { Inbox } from '../messaging/inbox/inbox.js';
import type { DeadLetter, InboxStore } from '../messaging/inbox/store.js';
import { DEFAULT_SCHEMA } from '../stores/postgres/schema.js';
import { CliFailure, EXIT_USAGE } from './failure.js';
import { loadPeer } from './peer.js';
import { durationFlag, durationOption, integerFlag, schemaFlag, schemaOf, storeFlag } from './store-flag.js';
import { requirePostgresSchema, type StoreTarget } from '../store-url.js';

interface StoreFlags {
  readonly store: StoreTarget;
  readonly prefix: string;
}

/** Adds the `inbox` command group to `program`. */
export function register(program: Command): void {
  const inbox = program.command('inbox').description('Inspect and redrive the inbox (idempotent consumer) dead letters; reap old marks.');

  withStore(inbox.command('dead-letters'))
    .description('List dead-lettered messages, oldest first.')
    .option('--consumer <name>', 'only this consumer')
    .option('--limit <n>', 'at most this many', integerFlag('--limit', 1, 1_000_000), 100)
    .option('--json', 'one JSON object per line (body base64)')
    .action(async (flags: StoreFlags & { consumer?: string; limit: number; json?: boolean }, command: Command) => {
      await withInbox(flags, command, {}, async (box) => {
        const letters = await box.deadLetters({ ...(flags.consumer === undefined ? {} : { consumer: flags.consumer }), limit: flags.limit });
        process.stdout.write(letters.map((letter) => (flags.json === true ? toJson(letter) : toLine(letter))).join(''));
        if (letters.length === 0 && flags.json !== true) process.stdout.write('retrysafe: no dead letters\n');
      });
    });

  withStore(inbox.command('redrive').argument('<messageId>', 'the dead letter\'s message id'))
    .description('Redrive a dead letter through the running consumer (processed at most once).')
    .requiredOption('--consumer <name>', 'the consumer that dead-lettered it')
    .action(async (messageId: string, flags: StoreFlags & { consumer: string }, command: Command) => {
      await withInbox(flags, command, {}, async (box) => {
        if (await box.redrive(flags.consumer, messageId)) {
          process.stdout.write(`retrysafe: redrive of ${JSON.stringify(messageId)} for consumer ${JSON.stringify(flags.consumer)} requested\n`);
        } else {
          process.stderr.write(`retrysafe: no dead letter ${JSON.stringify(messageId)} for consumer ${JSON.stringify(flags.consumer)}\n`);
          process.exitCode = 1;
        }
      });
    });

  withStore(inbox.command('reap'))
    .description('Delete processed marks older than the retention, in bounded batches.')
    .requiredOption('--retention <duration>', 'how long marks are kept, e.g. 7d (must exceed --retry-horizon)', durationFlag('--retention'))
    .addOption(durationOption('--retry-horizon <duration>', 'the longest redelivery delay of your brokers, e.g. 6h', '24h'))
    .option('--limit <n>', 'rows per batch', integerFlag('--limit', 1, 1_000_000), 1_000)
    .action(async (flags: StoreFlags & { retention: number; retryHorizon: number; limit: number }, command: Command) => {
      if (flags.retention <= flags.retryHorizon) {
        // A mark deleted before the last redelivery would let that redelivery run again.
        throw new CliFailure(`--retention (${seconds(flags.retention)}) must exceed --retry-horizon (${seconds(flags.retryHorizon)})`);
      }
      const options = { retentionMs: flags.retention, retryHorizonMs: flags.retryHorizon };
      await withInbox(flags, command, options, async (box) => {
        let total = 0;
        for (let deleted = flags.limit; deleted === flags.limit; total += deleted) deleted = await box.reap(flags.limit);
        process.stdout.write(`retrysafe: deleted ${total} rows\n`);
      });
    });
}

function withStore(command: Command): Command {
  return command
    .requiredOption('--store <url>', 'postgres://user@host:5432/db[?schema=NAME] or sqlite:PATH', inboxStoreFlag)
    .option('--schema <name>', 'PostgreSQL schema holding the inbox tables, unless the URL names one', schemaFlag, DEFAULT_SCHEMA)
    .option('--prefix <name>', 'SQLite table prefix', 'retrysafe_inbox')
    .addHelpText(
      'after',
      '\nExit codes: 0 done, 1 the database refused (or no such dead letter), 2 usage error, database unreachable, schema or tables missing.',
    );
}

async function withInbox(
  flags: StoreFlags,
  command: Command,
  options: { retentionMs?: number; retryHorizonMs?: number },
  run: (inbox: Inbox<unknown>) => Promise<void>,
): Promise<void> {
  const { store, close } = await openStore(flags, command);
  try {
    const { createInbox } = await import('../messaging/inbox/inbox.js');
    await run(createInbox({ store, ...options }));
  } finally {
    await close();
  }
}

/** Opens the inbox tables as they are: creates no file, schema or table. */
async function openStore(flags: StoreFlags, command: Command): Promise<{ store: InboxStore<unknown>; close: () => Promise<void> }> {
  const target = flags.store;
  if (target.scheme === 'sqlite') {
    const path = target.url.slice('sqlite:'.length);
    if (!existsSync(path)) throw new CliFailure(`the SQLite file ${path} does not exist (check --store ${target.url})`);
    // Loaded on demand: a command against PostgreSQL never loads the SQLite driver, and the reverse.
    const [driver, { createSqliteInboxStore }] = await loadPeer(() => Promise.all([import('better-sqlite3'), import('../messaging/inbox/sqlite.js')]));
    // A CommonJS module: its constructor is the namespace's default export at run time.
    const Database = (driver as unknown as { default: typeof BetterSqlite3 }).default;
    const database = new Database(path, { fileMustExist: true });
    const table = `${flags.prefix}_processed`;
    if (database.prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?").get(table) === undefined) {
      database.close();
      throw new CliFailure(`the SQLite file ${path} has no inbox table "${table}" (check --prefix)`, EXIT_USAGE);
    }
    const store = createSqliteInboxStore({ database, prefix: flags.prefix });
    return {
      store,
      close: async () => {
        await store.close();
        database.close();
      },
    };
  }
  const schema = schemaOf(target, command);
  const [{ default: pg }, { createPostgresInboxStore }] = await loadPeer(() => Promise.all([import('pg'), import('../messaging/inbox/postgres.js')]));
  const pool = new pg.Pool({ connectionString: target.driverUrl, max: 2 });
  pool.on('error', () => undefined);
  try {
    await requirePostgresSchema(pool, schema, target.url);
  } catch (error) {
    await pool.end();
    throw error;
  }
  return { store: createPostgresInboxStore({ pool, schema }), close: () => pool.end() };
}

function toLine(letter: DeadLetter): string {
  const at = letter.deadLetteredAt === undefined ? 'redrive pending' : new Date(letter.deadLetteredAt).toISOString();
  return `${letter.consumer}\t${letter.messageId}\t${letter.attempts} attempts\t${at}\t${letter.error ?? ''}\n`;
}

function toJson(letter: DeadLetter): string {
  return `${JSON.stringify({ ...letter, body: Buffer.from(letter.body).toString('base64') })}\n`;
}

/**
 * Commander argument parser for the inbox's `--store`: a PostgreSQL URL or `sqlite:PATH`.
 *
 * @throws InvalidArgumentError (exit 2) for any other value
 */
function inboxStoreFlag(text: string): StoreTarget {
  const target = storeFlag(text);
  if (target.scheme === 'postgres' || target.scheme === 'postgresql' || (target.scheme === 'sqlite' && target.durable)) return target;
  throw new InvalidArgumentError(`--store must be a postgres:// URL or sqlite:PATH, got ${JSON.stringify(text)}.`);
}

function seconds(ms: number): string {
  return `${ms / 1000} s`;
}
