/**
 * The side store of large response bodies on SQLite: the table `<prefix>_bodies`, with its own schema
 * steps and ledger `<prefix>_migrations`.
 *
 * @module
 */
import type { Database } from 'better-sqlite3';
import { systemClock } from '../../core/clock.js';
import type { ResponseBodyId, ResponseBodyStore } from '../../core/response-bodies.js';
import { requireLimit, requireOptions } from '../../core/validate.js';
import { openSqlite, quoteIdentifier, type SqliteSchema } from './open.js';
import { requireSqlitePrefix, requireSqliteSource } from './source.js';

/** Options of {@link createSqliteResponseBodies}: at most one of `path` and `database`. */
export interface SqliteResponseBodiesOptions {
  /** Database file to open (WAL journal mode), or `':memory:'`. @defaultValue ':memory:' */
  readonly path?: string;
  /** A connection to use instead, left open on `close`. */
  readonly database?: Database;
  /** Prefix of the tables `<prefix>_bodies` and `<prefix>_migrations`: letters, digits, `_`; at most 40. @defaultValue 'retrysafe_bodies' */
  readonly prefix?: string;
}

/** The schema of the bodies table under `prefix`. Never edit a released step; append a new one. */
function bodiesSchema(prefix: string): SqliteSchema {
  const bodies = quoteIdentifier(`${prefix}_bodies`);
  return {
    table: `${prefix}_bodies`,
    ledger: `${prefix}_migrations`,
    ledgerColumns: ['name', 'applied_at'],
    steps: [
      {
        version: 1,
        name: 'init',
        sql: `
          CREATE TABLE ${bodies} (
            scope         TEXT    NOT NULL,
            key           TEXT    NOT NULL,
            fencing_token TEXT    NOT NULL,
            body          BLOB    NOT NULL,
            expires_at    INTEGER NOT NULL,
            PRIMARY KEY (scope, key, fencing_token)
          );
          CREATE INDEX ${quoteIdentifier(`${prefix}_bodies_expires_at`)} ON ${bodies} (expires_at);
        `,
      },
    ],
  };
}

/**
 * A {@link ResponseBodyStore} on SQLite, for etcd's `responseStore` option, migrating its table. Each
 * operation is one statement (`put` an upsert, committed before it resolves); bytes are kept in a BLOB,
 * so every byte replays as written.
 *
 * @throws TypeError naming the option when an option is invalid
 * @throws the driver's error when the file cannot be opened or migrated
 * @example
 * ```ts
 * import { createSqliteResponseBodies } from 'retrysafe/sqlite';
 * import { createEtcdStore } from 'retrysafe/etcd';
 * const store = createEtcdStore({ client, responseStore: createSqliteResponseBodies({ path: 'bodies.db' }) });
 * ```
 */
export function createSqliteResponseBodies(options: SqliteResponseBodiesOptions = {}): ResponseBodyStore {
  requireOptions('createSqliteResponseBodies', options);
  const source = requireSqliteSource(options.path, options.database);
  const prefix = requireSqlitePrefix(options.prefix, 'retrysafe_bodies');
  const opening = { source, busyTimeoutMs: undefined, migrate: true, schema: bodiesSchema(prefix), clock: systemClock };
  return openSqlite(opening, (database, owned) => {
    const bodies = quoteIdentifier(`${prefix}_bodies`);
    const where = 'scope = ? AND key = ? AND fencing_token = ?';
    const put = database.prepare(
      `INSERT INTO ${bodies} (scope, key, fencing_token, body, expires_at) VALUES (?, ?, ?, ?, ?)
       ON CONFLICT (scope, key, fencing_token) DO UPDATE SET body = excluded.body, expires_at = excluded.expires_at`,
    );
    const get = database.prepare(`SELECT body FROM ${bodies} WHERE ${where}`).pluck();
    const remove = database.prepare(`DELETE FROM ${bodies} WHERE ${where}`);
    const expired = database.prepare(`DELETE FROM ${bodies} WHERE rowid IN (SELECT rowid FROM ${bodies} WHERE expires_at <= ? LIMIT ?)`);
    const ids = (id: ResponseBodyId): string[] => [id.scope, id.key, id.fencingToken];
    const run = <T>(fn: () => T): Promise<T> => new Promise<T>((resolve) => resolve(fn()));
    return {
      put: (id, body, expiresAt) => run(() => void put.run(...ids(id), Buffer.from(body.buffer, body.byteOffset, body.byteLength), expiresAt)),
      get: (id) => run(() => get.get(...ids(id)) as Buffer | undefined),
      delete: (id) => run(() => remove.run(...ids(id)).changes === 1),
      deleteExpired: (now, limit) => run(() => expired.run(now, requireLimit('deleteExpired', limit)).changes),
      close: () => run(() => void (owned && database.close())),
    };
  });
}
