/**
 * Applies a sequence of numbered PostgreSQL migrations to a schema, recording each in the schema's ledger.
 * Safe to run at every deploy, twice, or from several processes at once. `migrate()` (`src/migrate.ts`)
 * runs it with every module's migrations.
 *
 * @module
 */
import pg from 'pg';
import type { Migration } from './migration.js';
import { requirePostgresSource } from './source.js';
import { DEFAULT_SCHEMA, schemaNames } from './schema.js';
import { SchemaTooNewError } from '../../core/errors.js';
import { requireOptions } from '../../core/validate.js';

/** Options of `migrate` and {@link applyMigrations}: exactly one of `pool` and `connectionString`. */
export interface MigrateOptions {
  /** A pool to borrow one connection from (not ended by `migrate`). */
  readonly pool?: pg.Pool;
  /** A PostgreSQL URL (`postgres://user@host:5432/db`); `migrate` opens and closes its own connection. */
  readonly connectionString?: string;
  /** The schema to create and migrate; validated and always quoted. @defaultValue 'retrysafe' */
  readonly schema?: string;
}

/** What `migrate` (or {@link applyMigrations}) did. */
export interface MigrateResult {
  /** The schema migrated. */
  readonly schema: string;
  /** Names of the migrations this call applied, in order; empty when the schema was already up to date. */
  readonly applied: readonly string[];
  /** The schema's version after the call (the highest applied migration). */
  readonly version: number;
}

/**
 * The advisory-lock namespace of retrysafe migrations (the first key of PostgreSQL's two-key advisory
 * locks); the second key is `hashtext(schema)`, so two schemas migrate independently.
 */
const MIGRATION_LOCK_CLASS = 0x52_53_4d_47; // "RSMG"

/**
 * Creates the schema (if missing) and applies every one of `migrations` (in order; see `sequence`) not yet
 * in its ledger table `<schema>.schema_migrations (version, name, applied_at)`.
 *
 * Concurrency: the whole run holds a session advisory lock per schema (`pg_advisory_lock`), so concurrent
 * runs queue up and each later one finds the ledger complete. Each migration runs in its own transaction
 * together with its ledger row, so a failure leaves the schema at the last complete version.
 *
 * @throws TypeError naming the option when the options are invalid (neither or both of `pool` and
 *   `connectionString`, a bad `schema`)
 * @throws SchemaTooNewError when the ledger records a version newer than the last of `migrations` (a newer
 *   retrysafe migrated the schema; downgrading is not supported); nothing is applied then
 * @throws the driver's error when the database refuses (connection, permissions, SQL); the failing
 *   migration is rolled back
 */
export async function applyMigrations(migrations: readonly Migration[], options: MigrateOptions): Promise<MigrateResult> {
  requireOptions('migrate', options);
  const names = schemaNames('schema', options.schema ?? DEFAULT_SCHEMA);
  const source = requirePostgresSource('migrate', options.pool, options.connectionString);

  if ('pool' in source) {
    const client = await source.pool.connect();
    let failure: unknown;
    try {
      return await migrateOn(client, migrations, names.name, names.quoted);
    } catch (error) {
      failure = error;
      throw error;
    } finally {
      // A failed run may leave the connection mid-transaction; the pool must not hand it out again.
      client.release(failure instanceof Error ? failure : undefined);
    }
  }
  const client = new pg.Client({ connectionString: source.connectionString });
  await client.connect();
  try {
    return await migrateOn(client, migrations, names.name, names.quoted);
  } finally {
    await client.end();
  }
}

async function migrateOn(client: pg.ClientBase, migrations: readonly Migration[], schema: string, quoted: string): Promise<MigrateResult> {
  // $1 lock class, $2 schema name
  await client.query('SELECT pg_advisory_lock($1, hashtext($2))', [MIGRATION_LOCK_CLASS, schema]);
  try {
    await client.query(`CREATE SCHEMA IF NOT EXISTS ${quoted}`);
    await client.query(
      `CREATE TABLE IF NOT EXISTS ${quoted}.schema_migrations (
         version    integer     PRIMARY KEY,
         name       text        NOT NULL,
         applied_at timestamptz NOT NULL DEFAULT now()
       )`,
    );
    const done = await client.query<{ version: number }>(`SELECT version FROM ${quoted}.schema_migrations`);
    const appliedBefore = new Set(done.rows.map((row) => row.version));
    const known = migrations.at(-1)?.version ?? 0;
    const newest = Math.max(0, ...appliedBefore);
    if (newest > known) throw new SchemaTooNewError(`schema "${schema}"`, newest, known);
    const applied: Migration[] = [];
    for (const migration of migrations) {
      if (appliedBefore.has(migration.version)) continue;
      await apply(client, quoted, migration);
      applied.push(migration);
    }
    const version = Math.max(0, ...appliedBefore, ...applied.map((m) => m.version));
    return Object.freeze({ schema, applied: Object.freeze(applied.map((m) => m.name)), version });
  } finally {
    // $1 lock class, $2 schema name
    await client.query('SELECT pg_advisory_unlock($1, hashtext($2))', [MIGRATION_LOCK_CLASS, schema]);
  }
}

async function apply(client: pg.ClientBase, quoted: string, migration: Migration): Promise<void> {
  await client.query('BEGIN');
  try {
    // Simple-query protocol: a migration may hold several statements.
    await client.query(migration.sql(quoted));
    // $1 version, $2 name
    await client.query(`INSERT INTO ${quoted}.schema_migrations (version, name) VALUES ($1, $2)`, [
      migration.version,
      migration.name,
    ]);
    await client.query('COMMIT');
  } catch (error) {
    await client.query('ROLLBACK');
    throw error;
  }
}
