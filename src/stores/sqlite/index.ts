/**
 * `retrysafe/sqlite`: the SQLite idempotency store (`better-sqlite3`), with transactional mode.
 *
 * @module
 */
export { createSqliteStore, type SqliteStore } from './store.js';
export type { SqliteStoreOptions, SqliteSynchronous } from './options.js';
export { fencedUpdate } from './fenced-update.js';
export type { FencedUpdate } from '../../core/fenced-update.js';
