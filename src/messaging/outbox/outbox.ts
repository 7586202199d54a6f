/**
 * The outbox itself: `enqueue` writes a message in the caller's transaction, and the operator's reads and
 * chores (`status`, `reap`, `deadLetters`, `redrive`). Publishing is the relay's job (`relay.ts`), which
 * reaches the outbox's statements through `statementsOf`, not through the public interface.
 *
 * @module
 */
import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import { systemClock, type Clock } from '../../core/clock.js';
import { describe, requireClock, requireCount, requireDurationMs, requireGenerateId, requireOptions } from '../../core/validate.js';
import { traceHeaders } from '../../observability/propagation.js';
import { DEFAULT_SCHEMA, schemaNames } from '../../stores/postgres/schema.js';
import { derivedMessageId } from './ids.js';
import { bindStatements, outboxStatements, type ClaimedRow } from './statements.js';

/**
 * Anything that runs a parameterised query: a `pg.PoolClient` inside the caller's transaction for
 * `enqueue`, or a `pg.Pool` / `pg.Client` for the other operations.
 */
export interface Queryable {
  query<R extends pg.QueryResultRow>(text: string, values?: unknown[]): Promise<pg.QueryResult<R>>;
}

/** A message to enqueue. */
export interface OutboxInput {
  /** Where it goes (routing key, subject or webhook name, as the relay's publisher reads it); non-empty. */
  readonly topic: string;
  /** Ordering key: messages of one key are published in commit order, one at a time. */
  readonly key: string;
  /** The body: bytes, or a string sent as UTF-8. */
  readonly payload: Uint8Array | string;
  /**
   * Headers to send along (AMQP headers, NATS headers, HTTP headers, Kafka headers). `enqueue` adds the
   * active trace context to them (see {@link Outbox.enqueue}). @defaultValue `{}`
   */
  readonly headers?: Readonly<Record<string, string>>;
}

/**
 * Makes the id deterministic for a message emitted while handling another one (an inbox handler), so a
 * handler that runs again emits the same ids: the id is a version-5 UUID of (consumer, causationId, index).
 */
export interface EnqueueOptions {
  /** The id of the incoming message being handled. */
  readonly causationId: string;
  /** This message's position among those the handler emits (0, 1, …). */
  readonly index: number;
  /** The consuming handler's name, so two consumers of one message derive different ids. @defaultValue '' */
  readonly consumer?: string;
}

/** What `status` reports. Ages and latencies in milliseconds. */
export interface OutboxStatus {
  /** Rows not yet sent and not dead-lettered (in flight included). */
  readonly pending: number;
  /** Age of the oldest pending row, by the outbox's clock; 0 when none. */
  readonly oldestPendingAgeMs: number;
  /** Pending rows currently leased by a relay. */
  readonly inFlight: number;
  /** Dead-lettered rows. */
  readonly deadLetters: number;
  /** Sent rows not yet cleaned up. */
  readonly sent: number;
  /** Pending rows whose publishing failed at least once (the relay retries them). */
  readonly retrying: number;
  /** The last publish error of the oldest pending row that has one (why it is stuck); undefined when none. */
  readonly oldestPendingError: string | undefined;
  /** Median enqueue-to-sent time of rows sent within `latencyWindowMs`; undefined when none. */
  readonly latencyP50Ms: number | undefined;
  /** 99th percentile of the same; undefined when none. */
  readonly latencyP99Ms: number | undefined;
}

/** A dead-lettered message. */
export interface OutboxDeadLetter {
  readonly id: string;
  readonly topic: string;
  readonly key: string;
  readonly headers: Readonly<Record<string, string>>;
  readonly payload: Uint8Array;
  readonly attempts: number;
  /** The last publish error's message. */
  readonly error: string | undefined;
  /** Milliseconds since the epoch. */
  readonly createdAt: number;
  /** Milliseconds since the epoch. */
  readonly deadLetteredAt: number;
}

/** Options of {@link createOutbox}. */
export interface OutboxOptions {
  /** The schema migrated with `retrysafe migrate` (migration `0003_outbox`). @defaultValue 'retrysafe' */
  readonly schema?: string;
  /** Time source for `created_at`, ages and the reaper's cutoffs (milliseconds). @defaultValue the system clock */
  readonly clock?: Clock;
  /** Id of a message enqueued without causation; must return a UUID. @defaultValue `crypto.randomUUID` */
  readonly generateId?: () => string;
  /** The window of `status`'s latency percentiles, in milliseconds. @defaultValue 300_000 (5 minutes) */
  readonly latencyWindowMs?: number;
}

/** Options of {@link Outbox.reap}. */
export interface ReapOptions {
  /** Sent rows older than this many milliseconds (since being sent) are deleted. */
  readonly retentionMs: number;
  /** Rows per DELETE statement. @defaultValue 1000 */
  readonly batchSize?: number;
  /** Statements per call at most, so one call stays bounded. @defaultValue 100 */
  readonly maxBatches?: number;
}

/** The outbox of one schema. */
export interface Outbox {
  /** The schema (unquoted). */
  readonly schema: string;
  /** The NOTIFY channel the relay listens on: `<schema>_outbox`. */
  readonly channel: string;
  /** The clock given to the factory. */
  readonly clock: Clock;
  /**
   * Writes `message` as a pending row through `tx`, which must be the connection of the caller's open
   * transaction: the row commits or rolls back with the business writes (a rolled-back transaction
   * publishes nothing). Resolves with the message id, fixed now for every publish attempt: derived from
   * `options` when given, else `generateId()`. Writing a derived id that already exists keeps the first.
   *
   * Inside an active span, the row's headers also get the span's trace context, written by the global
   * propagator of `@opentelemetry/api` (W3C `traceparent`, and `tracestate` when set, with the SDK's
   * default setup; nothing without an SDK): the relay publishes them with the message, and the consumer's
   * inbox continues the trace. A header of the same name in `message.headers` wins.
   *
   * @throws TypeError when the message or options are malformed (empty topic, non-string key or header,
   *   payload neither bytes nor string, negative index)
   * @throws the driver's error when the insert fails (the caller's transaction is then aborted)
   */
  enqueue(tx: Queryable, message: OutboxInput, options?: EnqueueOptions): Promise<string>;
  /** Counts and ages for monitoring (see {@link OutboxStatus}); cheap reads of the pending and dead rows in one statement. */
  status(db: Queryable): Promise<OutboxStatus>;
  /**
   * The reaper: deletes sent rows older than `retentionMs`, `batchSize` per statement, until a statement
   * deletes fewer or `maxBatches` ran. Pending and dead-lettered rows are never deleted. Resolves with the
   * number deleted.
   *
   * @throws TypeError when an option is invalid
   */
  reap(db: Queryable, options: ReapOptions): Promise<number>;
  /** Dead-lettered messages, oldest first, at most `limit` (a positive integer). */
  deadLetters(db: Queryable, limit: number): Promise<OutboxDeadLetter[]>;
  /**
   * Makes a dead-lettered message pending again with its original id (so consumers still deduplicate it)
   * and zero attempts. It keeps its place in its key's order, so it is published before any later pending
   * message of that key. Resolves with whether such a dead letter existed.
   *
   * @throws TypeError when `id` is not a UUID
   */
  redrive(db: Queryable, id: string): Promise<boolean>;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/**
 * Creates the outbox of a schema. Run `migrate` (or `retrysafe migrate`) first; then run a relay
 * (`createRelay`) to publish what is enqueued. See docs/outbox.md.
 *
 * @throws TypeError naming the option when an option is invalid
 * @example
 * ```ts
 * import { createOutbox } from 'retrysafe/outbox';
 * const outbox = createOutbox({ schema: 'retrysafe' });
 * await store.transaction(async (tx) => {
 *   await tx.query('INSERT INTO orders (id, total) VALUES ($1, $2)', [orderId, total]);
 *   await outbox.enqueue(tx, { topic: 'orders.created', key: orderId, payload: JSON.stringify({ orderId, total }) });
 * });
 * ```
 */
export function createOutbox(options: OutboxOptions = {}): Outbox {
  requireOptions('createOutbox', options);
  const names = schemaNames('schema', options.schema ?? DEFAULT_SCHEMA);
  const clock = requireClock(options.clock ?? systemClock);
  const generateId = requireGenerateId(options.generateId ?? randomUUID);
  const latencyWindowMs = requireDurationMs('latencyWindowMs', options.latencyWindowMs ?? 300_000);
  const channel = `${names.name}_outbox`;
  const sql = outboxStatements(names.quoted, channel);

  const outbox: Outbox = {
    schema: names.name,
    channel,
    clock,

    async enqueue(tx, message, enqueueOptions) {
      const { topic, key, payload, headers } = checkMessage(message);
      const id = enqueueOptions === undefined ? newId(generateId) : derivedId(enqueueOptions);
      await tx.query(sql.enqueue, [id, topic, key, JSON.stringify({ ...traceHeaders(), ...headers }), payload, clock.now()]);
      return id;
    },

    async status(db) {
      const now = clock.now();
      const result = await db.query<StatusRow>(sql.status, [now, now - latencyWindowMs]);
      const row = result.rows[0];
      if (row === undefined) throw new Error('retrysafe: the outbox status query returned no row');
      return Object.freeze({
        pending: Number(row.pending),
        oldestPendingAgeMs: row.oldestPendingCreatedAt === null ? 0 : Math.max(0, now - Number(row.oldestPendingCreatedAt)),
        inFlight: Number(row.inFlight),
        deadLetters: Number(row.deadLetters),
        sent: Number(row.sent),
        retrying: Number(row.retrying),
        oldestPendingError: row.oldestPendingError ?? undefined,
        latencyP50Ms: row.latencyP50Ms ?? undefined,
        latencyP99Ms: row.latencyP99Ms ?? undefined,
      });
    },

    async reap(db, reapOptions) {
      requireOptions('reap', reapOptions);
      const retentionMs = requireDurationMs('retentionMs', reapOptions.retentionMs);
      const batchSize = requireCount('batchSize', reapOptions.batchSize ?? 1000);
      const maxBatches = requireCount('maxBatches', reapOptions.maxBatches ?? 100);
      const cutoff = clock.now() - retentionMs;
      let deleted = 0;
      for (let batch = 0; batch < maxBatches; batch++) {
        const result = await db.query(sql.reap, [cutoff, batchSize]);
        const count = result.rowCount ?? 0;
        deleted += count;
        if (count < batchSize) break;
      }
      return deleted;
    },

    async deadLetters(db, limit) {
      const result = await db.query<DeadRow>(sql.deadLetters, [requireCount('limit', limit)]);
      return result.rows.map((row) =>
        Object.freeze({
          id: row.id,
          topic: row.topic,
          key: row.key,
          headers: row.headers,
          payload: Uint8Array.from(row.payload),
          attempts: row.attempts,
          error: row.error ?? undefined,
          createdAt: Number(row.createdAt),
          deadLetteredAt: Number(row.deadLetteredAt),
        }),
      );
    },

    async redrive(db, id) {
      if (typeof id !== 'string' || !UUID.test(id)) {
        throw new TypeError(`retrysafe: redrive needs a message id (a UUID), got ${describe(id)}`);
      }
      const result = await db.query(sql.redrive, [id, clock.now()]);
      return (result.rowCount ?? 0) > 0;
    },
  };
  // The relay runs the outbox's statements; they reach it through `statementsOf`, not a property.
  return bindStatements(Object.freeze(outbox), sql);
}

/** The row of the `status` statement; counts (`bigint`) and times arrive as decimal strings. */
interface StatusRow {
  readonly pending: string;
  readonly oldestPendingCreatedAt: string | null;
  readonly inFlight: string;
  readonly deadLetters: string;
  readonly sent: string;
  readonly retrying: string;
  readonly oldestPendingError: string | null;
  readonly latencyP50Ms: number | null;
  readonly latencyP99Ms: number | null;
}

/** A row of the `deadLetters` statement: the message's fields as a claim reads them, with its last error and when it died. */
interface DeadRow extends Omit<ClaimedRow, 'seq' | 'xid'> {
  readonly error: string | null;
  readonly deadLetteredAt: string;
}

function checkMessage(message: OutboxInput): {
  readonly topic: string;
  readonly key: string;
  readonly payload: Buffer;
  readonly headers: Readonly<Record<string, string>>;
} {
  if (typeof message !== 'object' || message === null) {
    throw new TypeError(`retrysafe: enqueue expects a message object, got ${describe(message)}`);
  }
  const { topic, key, payload } = message;
  const headers = message.headers ?? {};
  if (typeof topic !== 'string' || topic === '' || topic.includes('\0')) {
    throw new TypeError(`retrysafe: message "topic" must be a non-empty string without NUL, got ${describe(topic)}`);
  }
  if (typeof key !== 'string' || key.includes('\0')) {
    throw new TypeError(`retrysafe: message "key" must be a string without NUL, got ${describe(key)}`);
  }
  let bytes: Buffer;
  if (typeof payload === 'string') bytes = Buffer.from(payload, 'utf8');
  else if (payload instanceof Uint8Array) bytes = Buffer.from(payload.buffer, payload.byteOffset, payload.byteLength);
  else throw new TypeError(`retrysafe: message "payload" must be a Uint8Array or a string, got ${describe(payload)}`);
  if (typeof headers !== 'object' || headers === null || Object.values(headers).some((v) => typeof v !== 'string')) {
    throw new TypeError(`retrysafe: message "headers" must be an object of strings, got ${describe(headers)}`);
  }
  return { topic, key, payload: bytes, headers };
}

function newId(generateId: () => string): string {
  const id = generateId();
  if (typeof id !== 'string' || !UUID.test(id)) {
    throw new TypeError(`retrysafe: option "generateId" must return a UUID, got ${describe(id)}`);
  }
  return id.toLowerCase();
}

function derivedId(options: EnqueueOptions): string {
  if (typeof options !== 'object' || options === null) {
    throw new TypeError(`retrysafe: enqueue options must be an object, got ${describe(options)}`);
  }
  const { causationId, index } = options;
  const consumer = options.consumer ?? '';
  if (typeof causationId !== 'string' || causationId === '') {
    throw new TypeError(`retrysafe: enqueue option "causationId" must be a non-empty string, got ${describe(causationId)}`);
  }
  if (typeof index !== 'number' || !Number.isSafeInteger(index) || index < 0) {
    throw new TypeError(`retrysafe: enqueue option "index" must be a non-negative integer, got ${describe(index)}`);
  }
  if (typeof consumer !== 'string') {
    throw new TypeError(`retrysafe: enqueue option "consumer" must be a string, got ${describe(consumer)}`);
  }
  return derivedMessageId(consumer, causationId, index);
}
