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
import { failureText, HandlerTimeoutError } from './errors.js';
import type { BatchBeginResult, BatchItem, BatchItemResult, BeginResult, DeadLetter, FailureResult, InboxStore, StoredMessage, TransactionHandler } from './store.js';
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
 * - beginBatch: one statement over an array of ids: reads their marks and attempt rows, inserts an attempt
 *   row for each new id (in id order, so concurrent batches never deadlock).
 * - processBatch: `BEGIN`; one `INSERT … SELECT unnest($2) … ON CONFLICT DO NOTHING` of every mark; per
 *   message a savepoint round trip (`RELEASE SAVEPOINT item; SAVEPOINT item`, or `ROLLBACK TO SAVEPOINT
 *   item` after a throw) around its handler's statements; one statement deleting the failures' marks,
 *   recording their errors (dead-lettering at `maxAttempts`) and deleting the others' attempt rows; `COMMIT`.
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
    // $1 consumer, $2 message ids (distinct), $3 now
    beginBatch: `
      WITH input AS (SELECT m AS message_id, n FROM unnest($2::text[]) WITH ORDINALITY AS u(m, n)),
      done AS (SELECT message_id FROM ${processed} WHERE consumer = $1 AND message_id = ANY($2::text[])),
      known AS (SELECT message_id, dead_lettered_at IS NOT NULL AS dead FROM ${attempts} WHERE consumer = $1 AND message_id = ANY($2::text[])),
      counted AS (
        INSERT INTO ${attempts} (consumer, message_id, attempts, first_attempt_at, last_attempt_at)
        SELECT $1, i.message_id, 1, $3, $3 FROM input i
        WHERE NOT EXISTS (SELECT 1 FROM done d WHERE d.message_id = i.message_id)
          AND NOT EXISTS (SELECT 1 FROM known k WHERE k.message_id = i.message_id)
        ORDER BY i.message_id
        ON CONFLICT (consumer, message_id) DO NOTHING
        RETURNING message_id)
      SELECT CASE WHEN d.message_id IS NOT NULL THEN 'processed' WHEN c.message_id IS NOT NULL THEN 'attempt'
        WHEN k.dead THEN 'dead' ELSE 'suspect' END AS state
      FROM input i LEFT JOIN done d USING (message_id) LEFT JOIN counted c USING (message_id) LEFT JOIN known k USING (message_id)
      ORDER BY i.n`,
    // $1 consumer, $2 message ids (distinct), $3 now
    markBatch: `
      WITH marked AS (
        INSERT INTO ${processed} (consumer, message_id, processed_at) SELECT $1, m, $3 FROM unnest($2::text[]) AS m ORDER BY m
        ON CONFLICT (consumer, message_id) DO NOTHING RETURNING message_id)
      SELECT coalesce(array_agg(message_id), '{}') AS marked, pg_backend_pid() AS pid FROM marked`,
    // $1 consumer, $2 ids whose attempt rows go (committed, duplicates), $3 failed ids, $4 their errors,
    // $5 their headers (json text), $6 their bodies, $7 now, $8 max attempts
    settleBatch: `
      WITH unmarked AS (DELETE FROM ${processed} WHERE consumer = $1 AND message_id = ANY($3::text[])),
      settled AS (DELETE FROM ${attempts} WHERE consumer = $1 AND message_id = ANY($2::text[]) AND dead_lettered_at IS NULL),
      f AS (SELECT * FROM unnest($3::text[], $4::text[], $5::text[], $6::bytea[]) AS f(message_id, error, headers, body))
      UPDATE ${attempts} a SET last_error = f.error,
        dead_lettered_at = CASE WHEN a.attempts >= $8::int THEN $7::bigint END,
        redrive_requested_at = CASE WHEN a.attempts >= $8::int THEN NULL ELSE a.redrive_requested_at END,
        headers = CASE WHEN a.attempts >= $8::int THEN f.headers::json ELSE a.headers END,
        body = CASE WHEN a.attempts >= $8::int THEN f.body ELSE a.body END
      FROM f WHERE a.consumer = $1 AND a.message_id = f.message_id AND a.dead_lettered_at IS NULL
      RETURNING a.message_id AS "messageId", a.attempts, a.dead_lettered_at IS NOT NULL AS dead`,
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
    // Redrive-pending rows too (dead_lettered_at NULL), until the consumer processes or dead-letters them again.
    deadLetters: `SELECT ${deadColumns} FROM ${attempts}
      WHERE (dead_lettered_at IS NOT NULL OR redrive_requested_at IS NOT NULL) AND ($1::text IS NULL OR consumer = $1)
      ORDER BY coalesce(dead_lettered_at, redrive_requested_at), consumer, message_id LIMIT $2`,
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

  async beginBatch(consumer: string, messageIds: readonly string[], now: number): Promise<BatchBeginResult[]> {
    const result = await this.pool.query<{ state: 'processed' | 'attempt' | 'dead' | 'suspect' }>(this.sql.beginBatch, [consumer, messageIds, now]);
    return result.rows.map(({ state }) => (state === 'attempt' ? { state, attempts: 1 } : { state }));
  }

  async processBatch(consumer: string, items: readonly BatchItem<pg.PoolClient>[], now: number, timeoutMs: number, maxAttempts: number): Promise<BatchItemResult[]> {
    let timedOut: { readonly item: BatchItem<pg.PoolClient>; readonly error: HandlerTimeoutError } | undefined;
    try {
      return await onPoolClient(this.pool, async (client, discard) => {
        await client.query('BEGIN ISOLATION LEVEL READ COMMITTED');
        const mark = await client.query<{ marked: string[]; pid: number }>(this.sql.markBatch, [consumer, items.map((item) => item.messageId), now]);
        const marked = new Set(mark.rows[0]?.marked);
        const pid = mark.rows[0]?.pid;
        const errors = new Map<string, unknown>();
        let open = false;
        for (const item of items) {
          if (!marked.has(item.messageId)) continue;
          if (!open) await client.query('SAVEPOINT item');
          open = true;
          try {
            await runWithTimeout(item.run, client, timeoutMs, discard);
            // A handler that swallowed a statement's error leaves the transaction aborted: RELEASE fails.
            await client.query('RELEASE SAVEPOINT item; SAVEPOINT item');
          } catch (error) {
            if (error instanceof HandlerTimeoutError) {
              timedOut = { item, error };
              await this.pool.query(this.sql.terminate, [pid]).catch(() => undefined);
              throw error;
            }
            errors.set(item.messageId, error);
            await client.query('ROLLBACK TO SAVEPOINT item');
          }
        }
        const failed = items.filter((item) => errors.has(item.messageId));
        const settledIds = items.filter((item) => !errors.has(item.messageId)).map((item) => item.messageId);
        const recorded = await client.query<{ messageId: string; attempts: number; dead: boolean }>(this.sql.settleBatch, [
          consumer,
          settledIds,
          failed.map((item) => item.messageId),
          failed.map((item) => failureText(errors.get(item.messageId))),
          failed.map((item) => JSON.stringify(item.message.headers)),
          failed.map((item) => toBuffer(item.message.body)),
          now,
          maxAttempts,
        ]);
        await commit(client, 'the inbox batch transaction');
        const records = new Map(recorded.rows.map((row) => [row.messageId, row]));
        return items.map((item): BatchItemResult => {
          if (!marked.has(item.messageId)) return { state: 'duplicate' };
          if (!errors.has(item.messageId)) return { state: 'committed' };
          const record = records.get(item.messageId);
          return { state: 'failed', error: errors.get(item.messageId), attempts: record?.attempts ?? 1, deadLettered: record?.dead === true };
        });
      });
    } catch (error) {
      if (timedOut === undefined) throw error;
      return this.timedOutBatch(consumer, items, now, maxAttempts, timedOut);
    }
  }

  /** The batch after a handler timeout ended its transaction: see {@link Inbox.handleBatch}. */
  private async timedOutBatch(
    consumer: string,
    items: readonly BatchItem<pg.PoolClient>[],
    now: number,
    maxAttempts: number,
    timedOut: { readonly item: BatchItem<pg.PoolClient>; readonly error: HandlerTimeoutError },
  ): Promise<BatchItemResult[]> {
    const { item, error } = timedOut;
    const failure = await this.fail(consumer, item.messageId, now, failureText(error), maxAttempts, item.message);
    return items.map((other) =>
      other === item ? { state: 'failed', error, attempts: failure?.attempts ?? 1, deadLettered: failure?.deadLettered === true } : { state: 'failed', error, attempts: 1, deadLettered: false },
    );
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
      toBuffer(message.body),
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

function toBuffer(body: Uint8Array): Buffer {
  return Buffer.from(body.buffer, body.byteOffset, body.byteLength);
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
