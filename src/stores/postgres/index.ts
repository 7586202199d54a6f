/**
 * `retrysafe/postgres`: the PostgreSQL idempotency store (driver `pg`) and its migrations.
 *
 * @module
 */
export { createPostgresStore, type PostgresStore, type PostgresStoreOptions, WAIT_POLL_MS } from './store.js';
export { migrate, type MigrateOptions, type MigrateResult } from './migrate.js';
export { DEFAULT_SCHEMA } from './schema.js';
export { poolOf, type TransactionPool, type TransactionPoolClient } from './pool-of.js';
