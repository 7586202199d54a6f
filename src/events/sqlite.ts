/**
 * The SQLite event store: the events table under a prefix, in a file of its own or in the application's
 * database, each append one `BEGIN IMMEDIATE` transaction.
 *
 * @module
 */
import type { Database, Statement } from 'better-sqlite3';
import { systemClock, type Clock } from '../core/clock.js';
import { requireClock, requireOptions } from '../core/validate.js';
import { openSqlite, quoteIdentifier } from '../stores/sqlite/open.js';
import { requireSqlitePrefix, requireSqliteSource } from '../stores/sqlite/source.js';
import { decideAppend, lookupIds, prepareAppend, type AppendOptions, type AppendResult, type EventInput, type EventStore, type RecordedEvent, type StoredEventHead } from './event.js';
import { eventsSqliteSchema } from './migrations/sqlite.js';
import { readLimits } from './read.js';

/** Options of {@link createSqliteEventStore}: at most one of `path` and `database`. */
export interface SqliteEventStoreOptions {
  /** Database file to open (WAL journal mode), or `':memory:'`. @defaultValue ':memory:' */
  readonly path?: string;
  /** A connection to use instead (left open on `close`), e.g. the one the business tables live in. */
  readonly database?: Database;
  /** Prefix of the tables `<prefix>_events` and `<prefix>_migrations`: letters, digits, `_`; at most 40. @defaultValue 'retrysafe_events' */
  readonly prefix?: string;
  /** The time recorded as each event's `appendedAt` (ms since the epoch). @defaultValue the system clock */
  readonly clock?: Clock;
}

/** The statements of one store, prepared once. */
interface Statements {
  readonly begin: Statement;
  readonly commit: Statement;
  readonly rollback: Statement;
  readonly current: Statement;
  readonly existing: Statement;
  readonly insert: Statement;
  readonly read: Statement;
}

function prepare(database: Database, events: string): Statements {
  return {
    begin: database.prepare('BEGIN IMMEDIATE'),
    commit: database.prepare('COMMIT'),
    rollback: database.prepare('ROLLBACK'),
    current: database.prepare(`SELECT coalesce(max(version), -1) FROM ${events} WHERE stream = ?`).pluck().safeIntegers(false),
    existing: database
      .prepare(`SELECT event_id AS eventId, version, position, content_hash AS contentHash FROM ${events} WHERE stream = ? AND event_id IN (SELECT value FROM json_each(?))`)
      .safeIntegers(false),
    insert: database
      .prepare(`INSERT INTO ${events} (stream, version, event_id, type, data, metadata, content_hash, appended_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING position`)
      .pluck()
      .safeIntegers(false),
    read: database
      .prepare(`SELECT event_id AS eventId, version, position, type, data, metadata, appended_at AS appendedAt FROM ${events} WHERE stream = ? AND version >= ? ORDER BY version LIMIT ?`)
      .safeIntegers(false),
  };
}

/**
 * Creates an {@link EventStore} on SQLite, migrating its table. Each `appendOnce` is one `BEGIN IMMEDIATE`
 * transaction (SQLite's write lock, so appenders in other processes on the same file queue up on its
 * `busy_timeout`): read the stream's version and whichever of the append's derived ids it holds, insert
 * every event, COMMIT. A process that dies before COMMIT leaves nothing (SQLite rolls the transaction back
 * when the file is next opened). Do not call it inside a transaction of your own on the same connection.
 *
 * @throws TypeError naming the option when an option is invalid
 * @throws the driver's error when the file cannot be opened or migrated
 * @example
 * ```ts
 * import { createSqliteEventStore } from 'retrysafe/events';
 *
 * const events = createSqliteEventStore({ path: 'app.db' });
 * await events.appendOnce('order-42', [{ type: 'OrderPlaced', data: { total: 1200 } }], { expectedVersion: 'no_stream', idempotencyKey: key });
 * ```
 */
export function createSqliteEventStore(options: SqliteEventStoreOptions = {}): EventStore {
  requireOptions('createSqliteEventStore', options);
  const source = requireSqliteSource(options.path, options.database);
  const prefix = requireSqlitePrefix(options.prefix, 'retrysafe_events');
  const clock = options.clock === undefined ? systemClock : requireClock(options.clock);
  const opening = { source, busyTimeoutMs: undefined, migrate: true, schema: eventsSqliteSchema(prefix), clock };
  return openSqlite(opening, (database, owned) => {
    const statements = prepare(database, quoteIdentifier(`${prefix}_events`));
    return {
      appendOnce: (stream: string, events: readonly EventInput[], append: AppendOptions) =>
        new Promise<AppendResult>((resolve) => resolve(appendOnce(statements, clock, stream, events, append))),
      read: (stream: string, limits: { readonly fromVersion?: number; readonly limit?: number } = {}) =>
        new Promise<RecordedEvent[]>((resolve) => {
          const { fromVersion, limit } = readLimits(limits);
          const rows = statements.read.all(stream, fromVersion, limit) as (Omit<RecordedEvent, 'stream' | 'data' | 'metadata'> & { data: string; metadata: string })[];
          resolve(rows.map((row) => ({ ...row, stream, data: JSON.parse(row.data) as unknown, metadata: JSON.parse(row.metadata) as unknown })));
        }),
      close: () => {
        if (owned) database.close();
        return Promise.resolve();
      },
    };
  });
}

/** One append, as {@link EventStore.appendOnce} documents; synchronous, inside its own transaction. */
function appendOnce(statements: Statements, clock: Clock, stream: string, events: readonly EventInput[], append: AppendOptions): AppendResult {
  const prepared = prepareAppend(stream, events, append);
  statements.begin.run();
  try {
    const existing = statements.existing.all(stream, JSON.stringify(lookupIds(stream, prepared, append.idempotencyKey))) as StoredEventHead[];
    const decision = decideAppend(stream, prepared, existing, statements.current.get(stream) as number, append.expectedVersion);
    if ('already' in decision) {
      statements.rollback.run();
      return decision.already;
    }
    const now = clock.now();
    const appended = prepared.map((event, i) => {
      const version = decision.firstVersion + i;
      const position = statements.insert.get(stream, version, event.eventId, event.type, event.data, event.metadata, event.contentHash, now) as number;
      return { eventId: event.eventId, version, position, status: 'appended' as const };
    });
    statements.commit.run();
    return { stream, events: appended };
  } catch (error) {
    if (statements.rollback.database.inTransaction) statements.rollback.run();
    throw error;
  }
}
