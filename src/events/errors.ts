/**
 * The typed errors of `retrysafe/events`.
 *
 * @module
 */
import { ModuleError } from '../core/errors.js';

/** The codes of `retrysafe/events`'s errors. */
export type EventsErrorCode = 'event-conflict' | 'event-wrong-expected-version';

/** Root of the errors `appendOnce` throws on purpose. */
export class EventsError extends ModuleError<EventsErrorCode> {
  override readonly name: string = 'EventsError';
}

/**
 * The idempotency key was already used on the stream for other events: an event id derived from it names
 * an event of another type, data or metadata, or the earlier append had another number of events. Nothing
 * was appended. KurrentDB answers the same case by treating the id as already written; here it is an error,
 * so a key reused for a different command cannot pass silently.
 */
export class EventConflictError extends EventsError {
  override readonly name = 'EventConflictError';
  constructor(
    readonly stream: string,
    /** The id (derived from the key and the event's index) whose stored content differs. */
    readonly eventId: string,
  ) {
    super('event-conflict', `retrysafe: event ${eventId} of stream ${JSON.stringify(stream)} was already appended with other content (idempotency key reused for other events)`);
  }
}

/**
 * The stream was not at the version the append expected (optimistic concurrency): another writer appended
 * first. Nothing was appended; read the stream again, decide again, and append with the new version.
 */
export class WrongExpectedVersionError extends EventsError {
  override readonly name = 'WrongExpectedVersionError';
  constructor(
    readonly stream: string,
    /** What the append expected: a version, `'no_stream'` or `'stream_exists'`. */
    readonly expected: number | 'no_stream' | 'stream_exists',
    /** The version of the stream's last event, or -1 when the stream has none. */
    readonly actual: number,
  ) {
    super('event-wrong-expected-version', `retrysafe: stream ${JSON.stringify(stream)} is at version ${actual}, the append expected ${String(expected)}`);
  }
}
