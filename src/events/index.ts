/**
 * `retrysafe/events`: idempotent event appends on PostgreSQL and SQLite. `appendOnce` derives each event's
 * id from the command's idempotency key and the event's index, so the same append sent again writes
 * nothing and answers the first one's positions; the key reused for other events is an
 * {@link EventConflictError}; a stream at another version than expected is a
 * {@link WrongExpectedVersionError}, and nothing is appended. `projectOnce` and `runProjection` apply each
 * event to a read model once, through an inbox (`retrysafe/inbox`) whose transaction the projection writes in.
 *
 * @module
 */
export { EventConflictError, EventsError, WrongExpectedVersionError, type EventsErrorCode } from './errors.js';
export {
  eventIdOf,
  type AppendedEvent,
  type AppendOptions,
  type AppendResult,
  type EventInput,
  type EventStore,
  type ExpectedVersion,
  type RecordedEvent,
} from './event.js';
export { createPostgresEventStore, type PostgresEventStoreOptions } from './postgres.js';
export { createSqliteEventStore, type SqliteEventStoreOptions } from './sqlite.js';
export { projectOnce, runProjection, type Projection, type ProjectionContext, type ProjectionInbox, type ProjectionRun } from './projection.js';
