/**
 * The PostgreSQL inbox store: tables of migrations `0002_inbox` and `0011_inbox_redrive_requested_at` (apply with `migrate` from
 * `retrysafe/postgres`), handlers given the transaction's `pg.PoolClient`.
 *
 * @module
 */
import type pg from 'pg';
import { describe, requireOptions } from '../../core/validate.js';
import { DEFAULT_SCHEMA, schemaNames } from '../../stores/postgres/schema.js';
import { commit, onPoolClient } from '../../stores/postgres/transaction.js';
import { HandlerTimeoutError } from './errors.js';
import type { BeginResult, DeadLetter, FailureResult, InboxStore, StoredMessage, TransactionHandler } from './store.js';
import { runWithTimeout } from './timeout.js';

/** Options of {@link createPostgresInboxStore}. */
export interface PostgresInboxStoreOptions {
  /** The pool to run on; the store never ends it. Each delivery borrows one connection for its transaction. */
  readonly pool: pg.Pool;
  /** The schema migrated by `migrate` (letters, digits, `_`; at most 48; always quoted). @defaultValue 'retrysafe' */
  readonly schema?: string;
}

/**
 * Creates a PostgreSQL {@link InboxStore}. Run `migrate` from `retrysafe/postgres` on the schema first.
 *
 * Statements (each one round trip; parameters are listed where each is defined):
 * - begin: one statement, committed on its own before the handler's transaction: reads the processed mark
 *   and, when absent, upserts `attempts = attempts + 1` unless dead-lettered.
 * - process: `BEGIN ISOLATION LEVEL READ COMMITTED`; the mark `INSERT … ON CONFLICT DO NOTHING` plus the
 *   attempt row's delete in one statement; the handler's statements; `COMMIT`. A concurrent delivery's mark
 *   insert waits on this transaction's uncommitted row, then conflicts and reports `duplicate`.
 * - On a handler timeout the transaction's backend is ended (`pg_terminate_backend`, from another pooled
 *   connection; the role needs to be the same or hold `pg_signal_backend`) and its connection destroyed,
 *   rather than sent a ROLLBACK that would queue behind the handler's running query: the server rolls
 *   back at once, releasing the row locks, and COMMIT is never sent.
 * - reap: `WITH doomed AS (SELECT … LIMIT $2 FOR UPDATE SKIP LOCKED) DELETE … USING doomed`: bounded,
 *   never waits.
 *
 * @throws TypeError naming the option when `pool` is not a pg.Pool or `schema` is invalid
 * @example
 * ```ts
 * const store = createPostgresInboxStore({ pool, schema: 'retrysafe' });
 * const inbox = createInbox({ store });
 * ```
 */
export function createPostgresInboxStore(options: PostgresInboxStoreOptions): InboxStore<pg.PoolClient> {
  requireOptions('createPostgresInboxStore', options);
  const { pool } = options;
  if (typeof pool !== 'object' || pool === null || typeof pool.connect !== 'function') {
    throw new TypeError(`retrysafe: option "pool" must be a pg.Pool, got ${describe(pool)}`);
  }
  const { quoted } = schemaNames('schema', options.schema ?? DEFAULT_SCHEMA);
  return new PostgresInboxStore(pool, statements(quoted));
}

type Statements = ReturnType<typeof statements>;

function statements(s: string) {
  const processed = `${s}.inbox_processed`;
  const attempts = `${s}.inbox_attempts`;
  // A dead letter's columns under the names of `DeadLetter`'s fields (`DeadRow`).
  const deadColumns = `consumer, message_id AS "messageId", attempts, last_error AS "error", dead_lettered_at AS "deadLetteredAt",
    redrive_requested_at AS "redriveRequestedAt", headers, body`;
  return {
    // $1 consumer, $2 message id, $3 now
    begin: `
      WITH done AS (SELECT 1 FROM ${processed} WHERE consumer = $1 AND message_id = $2),
      counted AS (
        INSERT INTO ${attempts} AS a (consumer, message_id, attempts, first_attempt_at, last_attempt_at)
        SELECT $1, $2, 1, $3, $3 WHERE NOT EXISTS (SELECT 1 FROM done)
        ON CONFLICT (consumer, message_id) DO UPDATE SET attempts = a.attempts + 1, last_attempt_at = $3
          WHERE a.dead_lettered_at IS NULL
        RETURNING a.attempts)
      SELECT EXISTS (SELECT 1 FROM done) AS processed, (SELECT attempts FROM counted) AS attempts`,
    // $1 consumer, $2 message id, $3 now
    mark: `
      WITH marked AS (
        INSERT INTO ${processed} (consumer, message_id, processed_at) VALUES ($1, $2, $3)
        ON CONFLICT (consumer, message_id) DO NOTHING RETURNING 1),
      settled AS (
        DELETE FROM ${attempts} WHERE consumer = $1 AND message_id = $2 AND EXISTS (SELECT 1 FROM marked))
      SELECT count(*)::int AS marked, pg_backend_pid() AS pid FROM marked`,
    // $1 backend pid of a timed-out transaction
    terminate: 'SELECT pg_terminate_backend($1)',
    // $1 consumer, $2 message id: the attempt a duplicate counted after the winner deleted the row
    forget: `DELETE FROM ${attempts} WHERE consumer = $1 AND message_id = $2 AND dead_lettered_at IS NULL
      AND EXISTS (SELECT 1 FROM ${processed} WHERE consumer = $1 AND message_id = $2)`,
    // $1 consumer, $2 message id, $3 now, $4 error, $5 max attempts, $6 headers json, $7 body
    fail: `
      UPDATE ${attempts} SET last_error = $4,
        dead_lettered_at = CASE WHEN attempts >= $5::int THEN $3::bigint END,
        redrive_requested_at = CASE WHEN attempts >= $5::int THEN NULL ELSE redrive_requested_at END,
        headers = CASE WHEN attempts >= $5::int THEN $6::json ELSE headers END,
        body = CASE WHEN attempts >= $5::int THEN $7::bytea ELSE body END
      WHERE consumer = $1 AND message_id = $2 AND dead_lettered_at IS NULL
      RETURNING attempts, dead_lettered_at IS NOT NULL AS dead`,
    // $1 consumer or NULL for all, $2 limit
    deadLetters: `SELECT ${deadColumns} FROM ${attempts}
      WHERE dead_lettered_at IS NOT NULL AND ($1::text IS NULL OR consumer = $1)
      ORDER BY dead_lettered_at, consumer, message_id LIMIT $2`,
    // $1 consumer, $2 message id, $3 now
    requestRedrive: `UPDATE ${attempts} SET attempts = 0, dead_lettered_at = NULL, redrive_requested_at = $3
      WHERE consumer = $1 AND message_id = $2 AND dead_lettered_at IS NOT NULL`,
    // $1 consumer, $2 limit
    pendingRedrives: `SELECT ${deadColumns} FROM ${attempts}
      WHERE consumer = $1 AND redrive_requested_at IS NOT NULL ORDER BY redrive_requested_at, message_id LIMIT $2`,
    // $1 cutoff (ms), $2 limit. Each batch is a CTE, evaluated once: an `IN (SELECT … LIMIT … SKIP LOCKED)`
    // subquery may be rescanned by the plan, each rescan skipping the rows this statement already deleted
    // and locking the next ones, so one call deleted far more than the limit.
    reapMarks: `WITH doomed AS (
        SELECT consumer, message_id FROM ${processed} WHERE processed_at < $1
        ORDER BY processed_at LIMIT $2 FOR UPDATE SKIP LOCKED)
      DELETE FROM ${processed} p USING doomed WHERE p.consumer = doomed.consumer AND p.message_id = doomed.message_id`,
    // $1 cutoff (ms), $2 limit
    reapAttempts: `WITH doomed AS (
        SELECT consumer, message_id FROM ${attempts}
        WHERE last_attempt_at < $1 AND dead_lettered_at IS NULL AND redrive_requested_at IS NULL
        ORDER BY last_attempt_at LIMIT $2 FOR UPDATE SKIP LOCKED)
      DELETE FROM ${attempts} a USING doomed WHERE a.consumer = doomed.consumer AND a.message_id = doomed.message_id`,
  };
}

/** A dead letter as `deadColumns` reads it. */
interface DeadRow {
  consumer: string;
  messageId: string;
  attempts: number;
  error: string | null;
  deadLetteredAt: string | null;
  redriveRequestedAt: string | null;
  headers: Record<string, string> | null;
  body: Buffer | null;
}

class PostgresInboxStore implements InboxStore<pg.PoolClient> {
  constructor(
    private readonly pool: pg.Pool,
    private readonly sql: Statements,
  ) {}

  async begin(consumer: string, messageId: string, now: number): Promise<BeginResult> {
    const result = await this.pool.query<{ processed: boolean; attempts: number | null }>(this.sql.begin, [consumer, messageId, now]);
    const row = result.rows[0];
    if (row?.processed === true) return { state: 'processed' };
    if (row?.attempts === null || row?.attempts === undefined) return { state: 'dead' };
    return { state: 'attempt', attempts: row.attempts };
  }

  async process(
    consumer: string,
    messageId: string,
    now: number,
    timeoutMs: number,
    fn: TransactionHandler<pg.PoolClient>,
  ): Promise<'committed' | 'duplicate'> {
    return onPoolClient(this.pool, async (client, discard) => {
      await client.query('BEGIN ISOLATION LEVEL READ COMMITTED');
      const mark = await client.query<{ marked: number; pid: number }>(this.sql.mark, [consumer, messageId, now]);
      if (mark.rows[0]?.marked !== 1) {
        await client.query('ROLLBACK');
        await this.pool.query(this.sql.forget, [consumer, messageId]);
        return 'duplicate';
      }
      const pid = mark.rows[0].pid;
      try {
        await runWithTimeout(fn, client, timeoutMs, discard);
      } catch (error) {
        // The timed-out transaction may sit in a long query holding row locks (its attempt row among
        // them, which recording the failure must update); ending the backend rolls it back now.
        if (error instanceof HandlerTimeoutError) await this.pool.query(this.sql.terminate, [pid]).catch(() => undefined);
        throw error;
      }
      await commit(client, 'the inbox transaction');
      return 'committed';
    });
  }

  async fail(
    consumer: string,
    messageId: string,
    now: number,
    error: string,
    maxAttempts: number,
    message: StoredMessage,
  ): Promise<FailureResult | undefined> {
    const result = await this.pool.query<{ attempts: number; dead: boolean }>(this.sql.fail, [
      consumer,
      messageId,
      now,
      error,
      maxAttempts,
      JSON.stringify(message.headers),
      Buffer.from(message.body.buffer, message.body.byteOffset, message.body.byteLength),
    ]);
    const row = result.rows[0];
    return row === undefined ? undefined : { attempts: row.attempts, deadLettered: row.dead };
  }

  async deadLetters(consumer: string | undefined, limit: number): Promise<DeadLetter[]> {
    const result = await this.pool.query<DeadRow>(this.sql.deadLetters, [consumer ?? null, limit]);
    return result.rows.map(toDeadLetter);
  }

  async requestRedrive(consumer: string, messageId: string, now: number): Promise<boolean> {
    const result = await this.pool.query(this.sql.requestRedrive, [consumer, messageId, now]);
    return result.rowCount === 1;
  }

  async pendingRedrives(consumer: string, limit: number): Promise<DeadLetter[]> {
    const result = await this.pool.query<DeadRow>(this.sql.pendingRedrives, [consumer, limit]);
    return result.rows.map(toDeadLetter);
  }

  async reap(before: number, limit: number): Promise<number> {
    const marks = await this.pool.query(this.sql.reapMarks, [before, limit]);
    const attempts = await this.pool.query(this.sql.reapAttempts, [before, limit]);
    return (marks.rowCount ?? 0) + (attempts.rowCount ?? 0);
  }

  close(): Promise<void> {
    return Promise.resolve();
  }
}

function toDeadLetter(row: DeadRow): DeadLetter {
  return Object.freeze({
    consumer: row.consumer,
    messageId: row.messageId,
    attempts: row.attempts,
    error: row.error ?? undefined,
    // bigint columns arrive as strings from pg; milliseconds since the epoch fit a double exactly.
    deadLetteredAt: row.deadLetteredAt === null ? undefined : Number(row.deadLetteredAt),
    redriveRequestedAt: row.redriveRequestedAt === null ? undefined : Number(row.redriveRequestedAt),
    headers: Object.freeze({ ...(row.headers ?? {}) }),
    body: new Uint8Array(row.body ?? new Uint8Array()),
  });
}
