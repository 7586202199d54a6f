/**
 * The PostgreSQL event store: the events table of migration 0012 (`retrysafe migrate` creates it), each
 * append one transaction serialized per stream.
 *
 * @module
 */
import { createHash } from 'node:crypto';
import type pg from 'pg';
import { DEFAULT_SCHEMA, schemaNames } from '../stores/postgres/schema.js';
import { describe, requireOptions } from '../core/validate.js';
import { decideAppend, lookupIds, prepareAppend, type AppendOptions, type AppendResult, type EventInput, type EventStore, type RecordedEvent, type StoredEventHead } from './event.js';
import { readLimits } from './read.js';

/** Options of {@link createPostgresEventStore}. */
export interface PostgresEventStoreOptions {
  /** The pool the store takes a connection from for each append and read. Caller-owned: `close()` leaves it open. */
  readonly pool: pg.Pool;
  /** The schema `migrate()` created the events table in. @defaultValue 'retrysafe' */
  readonly schema?: string;
}

/** The advisory lock of a stream's appends: 8 bytes of the SHA-256 of a domain and the stream, as a signed bigint. */
function streamLock(stream: string): string {
  return createHash('sha256').update('retrysafe/events-lock/v1:').update(stream).digest().readBigInt64BE(0).toString();
}

/**
 * Creates an {@link EventStore} on PostgreSQL. Each `appendOnce` is one transaction on a connection of the
 * pool: a transaction-scoped advisory lock on the stream (so appends to one stream queue up, and appends to
 * different streams do not), one statement reading the stream's version and whichever of the append's
 * derived ids it holds, then one `INSERT` of every event, and COMMIT. A crash anywhere before COMMIT leaves
 * nothing; the unique constraints on (stream, version) and (stream, event_id) hold whatever the lock.
 *
 * @throws TypeError naming the option when an option is invalid
 * @example
 * ```ts
 * import pg from 'pg';
 * import { migrate } from 'retrysafe/postgres';
 * import { createPostgresEventStore } from 'retrysafe/events';
 *
 * const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL });
 * await migrate({ pool });
 * const events = createPostgresEventStore({ pool });
 * await events.appendOnce('order-42', [{ type: 'OrderPlaced', data: { total: 1200 } }], { expectedVersion: 'no_stream', idempotencyKey: key });
 * ```
 */
export function createPostgresEventStore(options: PostgresEventStoreOptions): EventStore {
  requireOptions('createPostgresEventStore', options);
  if (typeof (options.pool as Partial<pg.Pool> | undefined)?.connect !== 'function') {
    throw new TypeError(`retrysafe: option "pool" must be a pg Pool, got ${describe(options.pool)}`);
  }
  const { pool } = options;
  const s = schemaNames('schema', options.schema ?? DEFAULT_SCHEMA).quoted;
  const state = `
    SELECT (SELECT coalesce(max(version), -1) FROM ${s}.events WHERE stream = $1) AS current,
           (SELECT coalesce(json_agg(json_build_array(event_id, version, position, content_hash)), '[]'::json)
              FROM ${s}.events WHERE stream = $1 AND event_id = ANY($2::uuid[])) AS existing`;
  const insert = `
    INSERT INTO ${s}.events (stream, version, event_id, type, data, metadata, content_hash)
    SELECT $1, $2::bigint + e.i - 1, e.id, e.type, e.data, e.metadata, e.hash
      FROM unnest($3::uuid[], $4::text[], $5::jsonb[], $6::jsonb[], $7::text[]) WITH ORDINALITY AS e(id, type, data, metadata, hash, i)
     ORDER BY e.i
    RETURNING event_id, version, position`;
  return {
    async appendOnce(stream: string, events: readonly EventInput[], append: AppendOptions): Promise<AppendResult> {
      const prepared = prepareAppend(stream, events, append);
      const client = await pool.connect();
      let broken: Error | undefined;
      try {
        await client.query('BEGIN');
        await client.query('SELECT pg_advisory_xact_lock($1::bigint)', [streamLock(stream)]);
        const found = await client.query<{ current: string; existing: [string, string, string, string][] }>(state, [stream, lookupIds(stream, prepared, append.idempotencyKey)]);
        const row = found.rows[0];
        const existing: StoredEventHead[] = (row?.existing ?? []).map(([eventId, version, position, contentHash]) => ({ eventId, version: Number(version), position: Number(position), contentHash }));
        const decision = decideAppend(stream, prepared, existing, Number(row?.current ?? -1), append.expectedVersion);
        if ('already' in decision) {
          await client.query('ROLLBACK');
          return decision.already;
        }
        const inserted = await client.query<{ event_id: string; version: string; position: string }>(insert, [
          stream,
          decision.firstVersion,
          prepared.map((event) => event.eventId),
          prepared.map((event) => event.type),
          prepared.map((event) => event.data),
          prepared.map((event) => event.metadata),
          prepared.map((event) => event.contentHash),
        ]);
        await client.query('COMMIT');
        return {
          stream,
          events: inserted.rows.map((r) => ({ eventId: r.event_id, version: Number(r.version), position: Number(r.position), status: 'appended' as const })),
        };
      } catch (error) {
        await client.query('ROLLBACK').catch((rollback: unknown) => {
          broken = rollback instanceof Error ? rollback : new Error(String(rollback));
        });
        throw error;
      } finally {
        // A connection whose ROLLBACK failed is destroyed rather than handed to the next caller mid-transaction.
        client.release(broken);
      }
    },

    async read(stream, options = {}): Promise<RecordedEvent[]> {
      const { fromVersion, limit } = readLimits(options);
      const { rows } = await pool.query<{ event_id: string; version: string; position: string; type: string; data: unknown; metadata: unknown; appended_at: Date }>(
        `SELECT event_id, version, position, type, data, metadata, appended_at FROM ${s}.events WHERE stream = $1 AND version >= $2 ORDER BY version LIMIT $3`,
        [stream, fromVersion, limit],
      );
      return rows.map((r) => ({
        stream,
        eventId: r.event_id,
        version: Number(r.version),
        position: Number(r.position),
        type: r.type,
        data: r.data,
        metadata: r.metadata,
        appendedAt: r.appended_at.getTime(),
      }));
    },

    close: () => Promise.resolve(),
  };
}
