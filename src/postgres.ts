/**
 * `retrysafe/postgres`: the PostgreSQL idempotency store (driver `pg`), its pool adapter, the side store of large
 * response bodies (`createPostgresResponseBodies`, for etcd's `responseStore`), and `migrate`,
 * which creates the schema of every module (records, inbox, outbox, recovery points, sessions).
 *
 * @module
 */
export { createPostgresResponseBodies, createPostgresStore, DEFAULT_SCHEMA, fencedUpdate, poolOf, WAIT_POLL_MS } from './stores/postgres/index.js';
export type { FencedUpdate, MigrateOptions, PostgresResponseBodiesOptions, MigrateResult, PostgresStore, PostgresStoreOptions, TransactionPool, TransactionPoolClient } from './stores/postgres/index.js';
export { migrate } from './migrate.js';
