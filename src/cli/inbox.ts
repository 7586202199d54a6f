/**
 * `retrysafe inbox …`: operate the inbox (idempotent consumer) tables.
 *
 * - `inbox dead-letters --store URL [--consumer NAME] [--limit N] [--json]` lists dead letters, oldest first.
 * - `inbox replay ID --consumer NAME --store URL` asks for a dead letter to be replayed: its attempts are
 *   reset and the running consumer (its broker adapter polls pending replays) runs it through the inbox,
 *   so it is processed at most once however often it is replayed.
 * - `inbox cleanup --store URL --retention 7d [--retry-horizon 24h] [--limit N]` deletes processed marks
 *   older than the retention in batches of `--limit`, until caught up; safe beside running consumers.
 *
 * `--store` is a PostgreSQL URL (`postgres://…`, tables in `--schema`, as migrated by `retrysafe migrate`)
 * or `sqlite:PATH` (tables prefixed `--prefix`).
 *
 * Exit codes: 0 done; 1 the database refused, or `replay` found no such dead letter; 2 usage error.
 *
 * @module
 */
import { InvalidArgumentError, type Command } from 'commander';
import { createInbox, type Inbox } from '../messaging/inbox/inbox.js';
import type { DeadLetter, InboxStore } from '../messaging/inbox/store.js';
import { DEFAULT_SCHEMA } from '../stores/postgres/schema.js';
import { durationFlag, schemaFlag } from './store-flag.js';

interface StoreFlags {
  readonly store: string;
  readonly schema: string;
  readonly prefix: string;
}

/** Adds the `inbox` command group to `program`. */
export function register(program: Command): void {
  const inbox = program.command('inbox').description('Inspect and replay the inbox (idempotent consumer) dead letters; clean up old marks.');

  withStore(inbox.command('dead-letters'))
    .description('List dead-lettered messages, oldest first.')
    .option('--consumer <name>', 'only this consumer')
    .option('--limit <n>', 'at most this many', positiveInteger, 100)
    .option('--json', 'one JSON object per line (body base64)')
    .action(async (flags: StoreFlags & { consumer?: string; limit: number; json?: boolean }) => {
      await withInbox(flags, {}, async (box) => {
        const letters = await box.deadLetters({ ...(flags.consumer === undefined ? {} : { consumer: flags.consumer }), limit: flags.limit });
        process.stdout.write(letters.map((letter) => (flags.json === true ? toJson(letter) : toLine(letter))).join(''));
        if (letters.length === 0 && flags.json !== true) process.stdout.write('retrysafe: no dead letters\n');
      });
    });

  withStore(inbox.command('replay').argument('<messageId>', 'the dead letter\'s message id'))
    .description('Replay a dead letter through the running consumer (processed at most once).')
    .requiredOption('--consumer <name>', 'the consumer that dead-lettered it')
    .action(async (messageId: string, flags: StoreFlags & { consumer: string }) => {
      await withInbox(flags, {}, async (box) => {
        if (await box.replay(flags.consumer, messageId)) {
          process.stdout.write(`retrysafe: replay of ${JSON.stringify(messageId)} for consumer ${JSON.stringify(flags.consumer)} requested\n`);
        } else {
          process.stderr.write(`retrysafe: no dead letter ${JSON.stringify(messageId)} for consumer ${JSON.stringify(flags.consumer)}\n`);
          process.exitCode = 1;
        }
      });
    });

  const cleanup = withStore(inbox.command('cleanup'));
  cleanup
    .description('Delete processed marks older than the retention, in bounded batches.')
    .requiredOption('--retention <duration>', 'how long marks are kept, e.g. 7d (must exceed --retry-horizon)', durationFlag('--retention'))
    .option('--retry-horizon <duration>', 'the longest redelivery delay of your brokers', durationFlag('--retry-horizon'), 86_400_000)
    .option('--limit <n>', 'rows per batch', positiveInteger, 1_000)
    .action(async (flags: StoreFlags & { retention: number; retryHorizon: number; limit: number }) => {
      if (flags.retention <= flags.retryHorizon) {
        // A mark deleted before the last redelivery would let that redelivery run again.
        cleanup.error(`retrysafe: --retention (${flags.retention} ms) must exceed --retry-horizon (${flags.retryHorizon} ms)`, {
          exitCode: 2,
          code: 'retrysafe.retentionTooShort',
        });
      }
      const options = { retentionMs: flags.retention, retryHorizonMs: flags.retryHorizon };
      await withInbox(flags, options, async (box) => {
        let total = 0;
        for (let deleted = flags.limit; deleted === flags.limit; total += deleted) deleted = await box.cleanup(flags.limit);
        process.stdout.write(`retrysafe: deleted ${total} rows\n`);
      });
    });
}

function withStore(command: Command): Command {
  return command
    .requiredOption('--store <url>', 'postgres://user@host:5432/db or sqlite:PATH', storeUrl)
    .option('--schema <name>', 'PostgreSQL schema holding the inbox tables', schemaFlag, DEFAULT_SCHEMA)
    .option('--prefix <name>', 'SQLite table prefix', 'retrysafe_inbox');
}

async function withInbox(
  flags: StoreFlags,
  options: { retentionMs?: number; retryHorizonMs?: number },
  run: (inbox: Inbox<unknown>) => Promise<void>,
): Promise<void> {
  const { store, close } = await openStore(flags);
  try {
    await run(createInbox({ store, ...options }));
  } finally {
    await close();
  }
}

async function openStore(flags: StoreFlags): Promise<{ store: InboxStore<unknown>; close: () => Promise<void> }> {
  if (flags.store.startsWith('sqlite:')) {
    // Loaded on demand: a command against PostgreSQL never loads the SQLite driver, and the reverse.
    const { createSqliteInboxStore } = await import('../messaging/inbox/sqlite.js');
    const store = createSqliteInboxStore({ path: flags.store.slice('sqlite:'.length), prefix: flags.prefix });
    return { store, close: () => store.close() };
  }
  const [{ default: pg }, { createPostgresInboxStore }] = await Promise.all([import('pg'), import('../messaging/inbox/postgres.js')]);
  const pool = new pg.Pool({ connectionString: flags.store, max: 2 });
  const store = createPostgresInboxStore({ pool, schema: flags.schema });
  return { store, close: () => pool.end() };
}

function toLine(letter: DeadLetter): string {
  const at = letter.deadLetteredAt === undefined ? 'replay pending' : new Date(letter.deadLetteredAt).toISOString();
  return `${letter.consumer}\t${letter.messageId}\t${letter.attempts} attempts\t${at}\t${letter.error ?? ''}\n`;
}

function toJson(letter: DeadLetter): string {
  return `${JSON.stringify({ ...letter, body: Buffer.from(letter.body).toString('base64') })}\n`;
}

function storeUrl(text: string): string {
  if (text.startsWith('sqlite:') && text.length > 'sqlite:'.length) return text;
  try {
    const url = new URL(text);
    if (url.protocol === 'postgres:' || url.protocol === 'postgresql:') return text;
  } catch {
    // Reported below with the accepted forms.
  }
  throw new InvalidArgumentError(`--store must be a postgres:// URL or sqlite:PATH, got ${JSON.stringify(text)}.`);
}

function positiveInteger(text: string): number {
  const value = Number(text);
  if (!/^\d+$/.test(text) || !Number.isSafeInteger(value) || value <= 0) {
    throw new InvalidArgumentError(`must be a positive integer, got ${JSON.stringify(text)}.`);
  }
  return value;
}
