/**
 * `retrysafe/sessions`: client sessions — the session-based Idempotent Receiver of *Patterns of
 * Distributed Systems* and Raft (Ongaro's thesis, section 6.3). The server half
 * ({@link createSessionReceiver}) applies each (client id, request number) once and keeps memory bounded
 * by the low-water mark; the client half ({@link SessionClient}) numbers requests, tracks the low-water
 * mark and sends keep-alives. Sessions live in a {@link SessionStore}: memory, SQLite, PostgreSQL or Redis,
 * or DynamoDB (`createDynamodbSessionStore` of `retrysafe/dynamodb`, which loads the AWS SDK); each passes
 * the shared suite in `test/sessions/contract.ts`.
 *
 * @module
 */
export { createMemorySessionStore } from './memory.js';
export { SessionClient, type SessionClientOptions } from './client.js';
export {
  SessionError,
  SessionExpiredError,
  SessionLeaseLostError,
  SessionRequestInProgressError,
  SessionRequestInvalidError,
  SessionUnknownError,
  StaleRequestError,
  type SessionErrorCode,
} from './errors.js';
export { SESSION_INSTRUMENTS, type SessionOutcome } from './metrics.js';
export { createPostgresSessionStore, type PostgresSessionStoreOptions } from './postgres.js';
export { createRedisSessionStore, REDIS_SESSION_TTL_GRACE_MS, type RedisSessionStoreOptions } from './redis.js';
export { createSessionReceiver, type Applied, type SessionReceiver, type SessionReceiverOptions } from './receiver.js';
export type { BeginInput, BeginResult, KeepAliveResult, SessionQuery, SessionRequest, SessionStats, SessionStore, SessionSummary } from './store.js';
export { createSqliteSessionStore, type SqliteSessionStoreOptions } from './sqlite.js';
