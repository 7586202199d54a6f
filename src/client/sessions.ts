/**
 * `retrysafe/sessions`: client sessions — the session-based Idempotent Receiver of *Patterns of
 * Distributed Systems* and Raft (Ongaro's thesis, section 6.3). The server half
 * ({@link createSessionReceiver}) applies each (client id, request number) once and keeps memory bounded
 * by the low-water mark; the client half ({@link SessionClient}) numbers requests, tracks the low-water
 * mark and sends keep-alives. Sessions live in a {@link SessionStore}: memory, SQLite, PostgreSQL or Redis
 * (each passes the shared suite in `test/client/session-suite.ts`).
 *
 * @module
 */
export { createMemorySessionStore } from './memory-session-store.js';
export { SessionClient, type SessionClientOptions } from './session-client.js';
export {
  SessionError,
  SessionExpiredError,
  SessionLeaseLostError,
  SessionRequestInProgressError,
  SessionRequestInvalidError,
  SessionUnknownError,
  StaleRequestError,
  type SessionErrorCode,
} from './session-errors.js';
export { createPostgresSessionStore, type PostgresSessionStoreOptions } from './postgres-session-store.js';
export { createRedisSessionStore, REDIS_SESSION_TTL_GRACE_MS, type RedisSessionStoreOptions } from './redis-session-store.js';
export { createSessionReceiver, type Applied, type SessionReceiver, type SessionReceiverOptions } from './session-receiver.js';
export type { BeginInput, BeginResult, KeepAliveResult, SessionRequest, SessionStats, SessionStore } from './session-store.js';
export { createSqliteSessionStore, type SqliteSessionStoreOptions } from './sqlite-session-store.js';
