/**
 * Projections read through the inbox: each appended event applied to a read model once, its writes
 * committed with the inbox's processed mark.
 *
 * @module
 */
import { requireFunction, requireNonEmptyString, requireObject } from '../core/validate.js';
import type { EventStore, RecordedEvent } from './event.js';
import { readLimits } from './read.js';

/** What a projection's `apply` gets besides the transaction: the inbox's handler context. */
export interface ProjectionContext {
  /** This run's attempt number for the event, from 1. */
  readonly attempt: number;
  /** Aborted when `apply` exceeds the inbox's `handlerTimeoutMs` (its transaction is then rolled back). */
  readonly signal: AbortSignal;
}

/** A read model built from events. */
export interface Projection<Tx> {
  /**
   * The projection's name, the inbox consumer its marks are kept under: two projections of one event each
   * apply it once. At most 255 characters, no NUL.
   */
  readonly name: string;
  /**
   * Applies one event: writes the projection's rows, and its checkpoint if it keeps one, through `tx`, the
   * inbox's transaction, so they commit with the mark that the event was applied, or roll back with it. A
   * throw rolls everything back and counts an attempt (the inbox's `retry`, then `dead_lettered`).
   */
  apply(tx: Tx, event: RecordedEvent, context: ProjectionContext): Promise<void>;
}

/**
 * What {@link projectOnce} needs of an inbox: `createInbox` of `retrysafe/inbox` on a PostgreSQL or SQLite
 * inbox store, whose transaction (`Tx`: a `pg` `PoolClient`, a `better-sqlite3` `Database`) the projection
 * writes through. `O` is the inbox's outcome.
 */
export interface ProjectionInbox<Tx, O extends { readonly status: string }> {
  handle(
    delivery: { readonly consumer: string; readonly messageId: string; readonly body: Uint8Array },
    fn: (tx: Tx, context: ProjectionContext) => Promise<void>,
  ): Promise<O>;
}

/**
 * Applies `event` to `projection` once, however often it is delivered: the event id is the inbox's
 * message id and the projection's name its consumer, so `apply` runs inside the inbox's transaction only
 * while (name, event id) has no processed mark, and its writes commit with that mark. A second delivery,
 * after the first committed or concurrently with it (it waits on the first's uncommitted mark), is the
 * inbox's `duplicate` and runs nothing; a delivery whose process dies before COMMIT leaves neither the
 * writes nor the mark, so the next one applies the event once. The event, as JSON, is the body a dead
 * letter keeps. Marks are kept for the inbox's `retentionMs`: a delivery later than that applies the event
 * again unless the projection's own checkpoint refuses it (see docs/events.md).
 *
 * @returns the inbox's outcome: `processed`, `duplicate`, `retry` (apply threw; rolled back) or `dead_lettered`
 * @throws TypeError when `projection` has no name or no `apply`
 * @throws what the inbox's `handle` throws (the store failed: nothing committed)
 * @example
 * ```ts
 * const outcome = await projectOnce(inbox, {
 *   name: 'order-totals',
 *   apply: async (tx, event) => {
 *     await tx.query('UPDATE order_totals SET total = total + $1 WHERE id = $2', [event.data.amount, event.stream]);
 *   },
 * }, event);
 * ```
 */
export function projectOnce<Tx, O extends { readonly status: string }>(inbox: ProjectionInbox<Tx, O>, projection: Projection<Tx>, event: RecordedEvent): Promise<O> {
  requireProjection(projection);
  const body = Buffer.from(JSON.stringify(event), 'utf8');
  return inbox.handle({ consumer: projection.name, messageId: event.eventId, body }, (tx, context) => projection.apply(tx, event, context));
}

/** What {@link runProjection} did. */
export interface ProjectionRun<O> {
  /** Events applied now (`processed`). */
  readonly applied: number;
  /** Events found applied before (`duplicate`). */
  readonly duplicates: number;
  /** The version to read from next: one past the last event applied or found applied, else `fromVersion`. */
  readonly nextVersion: number;
  /** The outcome that stopped the run (`retry` or `dead_lettered`), when one did. */
  readonly stoppedAt?: { readonly event: RecordedEvent; readonly outcome: O };
}

/**
 * Reads up to `limit` events of `stream` from `fromVersion` on and applies each with {@link projectOnce},
 * in version order, stopping at the first that is neither applied nor a duplicate, so a projection never
 * applies an event before the ones under it. Run it again from `nextVersion` (or from the checkpoint the
 * projection wrote in its transaction).
 *
 * @throws TypeError when an option is invalid (`fromVersion` a non-negative integer, `limit` 1 to 100 000)
 * @throws what the event store's `read` or the inbox's `handle` throws
 */
export async function runProjection<Tx, O extends { readonly status: string }>(
  inbox: ProjectionInbox<Tx, O>,
  events: Pick<EventStore, 'read'>,
  projection: Projection<Tx>,
  options: { readonly stream: string; readonly fromVersion?: number; readonly limit?: number },
): Promise<ProjectionRun<O>> {
  requireProjection(projection);
  const stream = requireNonEmptyString('stream', options.stream);
  const { fromVersion, limit } = readLimits(options);
  let applied = 0;
  let duplicates = 0;
  let nextVersion = fromVersion;
  for (const event of await events.read(stream, { fromVersion, limit })) {
    const outcome = await projectOnce(inbox, projection, event);
    if (outcome.status === 'processed') applied++;
    else if (outcome.status === 'duplicate') duplicates++;
    else return { applied, duplicates, nextVersion, stoppedAt: { event, outcome } };
    nextVersion = event.version + 1;
  }
  return { applied, duplicates, nextVersion };
}

/**
 * Checks a projection's name and `apply`.
 *
 * @throws TypeError naming the field otherwise
 */
function requireProjection(projection: unknown): void {
  const { name, apply } = requireObject<{ readonly name?: unknown; readonly apply?: unknown }>('projection', projection);
  requireNonEmptyString('name', name, 255, 'projection');
  requireFunction('apply', apply, 'projection');
}
