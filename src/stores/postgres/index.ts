/**
 * The PostgreSQL kit: the idempotency store (driver `pg`), its pool adapter, the migration runner and
 * the side store of large response bodies.
 * `retrysafe/postgres` (`src/postgres.ts`) adds `migrate`, which runs every module's migrations.
 *
 * @module
 */
export { WAIT_POLL_MS } from './postgres-store.js';
export { createPostgresStore, type PostgresStore, type PostgresStoreOptions } from './store.js';
export { applyMigrations, type MigrateOptions, type MigrateResult } from './migrate.js';
export { DEFAULT_SCHEMA } from './schema.js';
export { poolOf, type TransactionPool, type TransactionPoolClient } from './pool-of.js';
export { fencedUpdate } from './fenced-update.js';
export { createPostgresResponseBodies, type PostgresResponseBodiesOptions } from './response-bodies.js';
export type { FencedUpdate } from '../../core/fenced-update.js';
