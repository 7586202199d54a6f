/**
 * `retrysafe/sqlite`: the SQLite idempotency store (`better-sqlite3`), with transactional mode, and the side store
 * of large response bodies (`createSqliteResponseBodies`, for etcd's `responseStore`).
 *
 * @module
 */
export { createSqliteStore, type SqliteStore } from './store.js';
export type { SqliteStoreOptions, SqliteSynchronous } from './options.js';
export { fencedUpdate } from './fenced-update.js';
export { createSqliteResponseBodies, type SqliteResponseBodiesOptions } from './response-bodies.js';
export type { FencedUpdate } from '../../core/fenced-update.js';
