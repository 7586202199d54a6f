/**
 * The SQLite inbox store's implementation: the statements over `<prefix>_processed` and `<prefix>_attempts`,
 * run one at a time behind a FIFO mutex. `createSqliteInboxStore` (./sqlite.ts) checks the options, opens
 * and migrates the file, and builds it.
 *
 * @module
 */
import type { Database } from 'better-sqlite3';
import { Mutex } from '../../stores/sqlite/mutex.js';
import type { SqliteInboxStore as SqliteInboxStoreApi } from './sqlite.js';
import type { BatchBeginResult, BatchItem, BatchItemResult, BeginResult, DeadLetter, FailureResult, StoredMessage, TransactionHandler } from './store.js';
import { failureText } from './errors.js';
import { runWithTimeout } from './timeout.js';

/** A dead letter as the statements read it (`headers` is JSON text). */
interface DeadRow {
  consumer: string;
  messageId: string;
  attempts: number;
  error: string | null;
  deadLetteredAt: number | null;
  redriveRequestedAt: number | null;
  headers: string | null;
  body: Buffer | null;
}

/** The SQLite inbox store's class; {@link createSqliteInboxStore} builds it. */
export class SqliteInboxStore implements SqliteInboxStoreApi {
  private readonly mutex = new Mutex();
  private readonly sql;

  constructor(
    readonly database: Database,
    private readonly owned: boolean,
    name: (suffix: string) => string,
  ) {
    const processed = name('processed');
    const attempts = name('attempts');
    // A dead letter's columns under the names of `DeadLetter`'s fields (`DeadRow`).
    const columns =
      'consumer, message_id AS "messageId", attempts, last_error AS "error", dead_lettered_at AS "deadLetteredAt", ' +
      'redrive_requested_at AS "redriveRequestedAt", headers, body';
    const prepare = (text: string) => database.prepare(text);
    this.sql = {
      attemptsOf: prepare(`SELECT dead_lettered_at IS NOT NULL FROM ${attempts} WHERE consumer = ? AND message_id = ?`).pluck(),
      fresh: prepare(`INSERT INTO ${attempts} (consumer, message_id, attempts, first_attempt_at, last_attempt_at) VALUES (?, ?, 1, ?, ?)`),
      unmark: prepare(`DELETE FROM ${processed} WHERE consumer = ? AND message_id = ?`),
      isProcessed: prepare(`SELECT 1 FROM ${processed} WHERE consumer = ? AND message_id = ?`).pluck(),
      count: prepare(`INSERT INTO ${attempts} AS a (consumer, message_id, attempts, first_attempt_at, last_attempt_at)
        VALUES (?, ?, 1, ?, ?)
        ON CONFLICT (consumer, message_id) DO UPDATE SET attempts = a.attempts + 1, last_attempt_at = excluded.last_attempt_at
          WHERE a.dead_lettered_at IS NULL
        RETURNING attempts`).pluck(),
      mark: prepare(`INSERT INTO ${processed} (consumer, message_id, processed_at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING`),
      settle: prepare(`DELETE FROM ${attempts} WHERE consumer = ? AND message_id = ?`),
      fail: prepare(`UPDATE ${attempts} SET last_error = @error,
          dead_lettered_at = CASE WHEN attempts >= @max THEN @now END,
          redrive_requested_at = CASE WHEN attempts >= @max THEN NULL ELSE redrive_requested_at END,
          headers = CASE WHEN attempts >= @max THEN @headers ELSE headers END,
          body = CASE WHEN attempts >= @max THEN @body ELSE body END
        WHERE consumer = @consumer AND message_id = @id AND dead_lettered_at IS NULL
        RETURNING attempts, dead_lettered_at IS NOT NULL AS dead`),
      // Redrive-pending rows too (dead_lettered_at NULL), until the consumer processes or dead-letters them again.
      deadLetters: prepare(`SELECT ${columns} FROM ${attempts}
        WHERE (dead_lettered_at IS NOT NULL OR redrive_requested_at IS NOT NULL) AND (@consumer IS NULL OR consumer = @consumer)
        ORDER BY coalesce(dead_lettered_at, redrive_requested_at), consumer, message_id LIMIT @limit`),
      requestRedrive: prepare(`UPDATE ${attempts} SET attempts = 0, dead_lettered_at = NULL, redrive_requested_at = ?
        WHERE consumer = ? AND message_id = ? AND dead_lettered_at IS NOT NULL`),
      pendingRedrives: prepare(`SELECT ${columns} FROM ${attempts}
        WHERE consumer = ? AND redrive_requested_at IS NOT NULL ORDER BY redrive_requested_at, message_id LIMIT ?`),
      reapMarks: prepare(`DELETE FROM ${processed} WHERE rowid IN (
        SELECT rowid FROM ${processed} WHERE processed_at < ? ORDER BY processed_at LIMIT ?)`),
      reapAttempts: prepare(`DELETE FROM ${attempts} WHERE rowid IN (
        SELECT rowid FROM ${attempts} WHERE last_attempt_at < ? AND dead_lettered_at IS NULL
          AND redrive_requested_at IS NULL ORDER BY last_attempt_at LIMIT ?)`),
    };
  }

  begin(consumer: string, messageId: string, now: number): Promise<BeginResult> {
    return this.mutex.run(() =>
      this.database
        .transaction((): BeginResult => {
          if (this.sql.isProcessed.get(consumer, messageId) !== undefined) return { state: 'processed' };
          const attempts = this.sql.count.get(consumer, messageId, now, now) as number | undefined;
          return attempts === undefined ? { state: 'dead' } : { state: 'attempt', attempts };
        })
        .immediate(),
    );
  }

  process(
    consumer: string,
    messageId: string,
    now: number,
    timeoutMs: number,
    fn: TransactionHandler<Database>,
  ): Promise<'committed' | 'duplicate'> {
    return this.mutex.run(async () => {
      this.database.exec('BEGIN IMMEDIATE');
      try {
        if (this.sql.mark.run(consumer, messageId, now).changes === 0) {
          this.database.exec('ROLLBACK');
          return 'duplicate';
        }
        this.sql.settle.run(consumer, messageId);
        await runWithTimeout(fn, this.database, timeoutMs, () => undefined, true);
        this.database.exec('COMMIT');
        return 'committed';
      } catch (error) {
        if (this.database.inTransaction) this.database.exec('ROLLBACK');
        throw error;
      }
    });
  }

  beginBatch(consumer: string, messageIds: readonly string[], now: number): Promise<BatchBeginResult[]> {
    return this.mutex.run(() =>
      this.database
        .transaction(() =>
          messageIds.map((messageId): BatchBeginResult => {
            if (this.sql.isProcessed.get(consumer, messageId) !== undefined) return { state: 'processed' };
            const dead = this.sql.attemptsOf.get(consumer, messageId) as number | undefined;
            if (dead !== undefined) return dead === 1 ? { state: 'dead' } : { state: 'suspect' };
            this.sql.fresh.run(consumer, messageId, now, now);
            return { state: 'attempt', attempts: 1 };
          }),
        )
        .immediate(),
    );
  }

  processBatch(consumer: string, items: readonly BatchItem<Database>[], now: number, timeoutMs: number, maxAttempts: number): Promise<BatchItemResult[]> {
    return this.mutex.run(async () => {
      this.database.exec('BEGIN IMMEDIATE');
      try {
        const marked = items.map((item) => this.sql.mark.run(consumer, item.messageId, now).changes === 1);
        const errors = new Map<string, unknown>();
        for (const [n, item] of items.entries()) {
          if (marked[n] !== true) continue;
          this.database.exec('SAVEPOINT item');
          try {
            await runWithTimeout(item.run, this.database, timeoutMs, () => undefined, true);
            this.database.exec('RELEASE item');
          } catch (error) {
            errors.set(item.messageId, error);
            this.database.exec('ROLLBACK TO item; RELEASE item');
          }
        }
        const results = items.map((item, n): BatchItemResult => {
          if (!errors.has(item.messageId)) {
            this.sql.settle.run(consumer, item.messageId);
            return { state: marked[n] === true ? 'committed' : 'duplicate' };
          }
          this.sql.unmark.run(consumer, item.messageId);
          const error = errors.get(item.messageId);
          const failure = this.recordFailure(consumer, item.messageId, now, failureText(error), maxAttempts, item.message);
          return { state: 'failed', error, attempts: failure?.attempts ?? 1, deadLettered: failure?.deadLettered === true };
        });
        this.database.exec('COMMIT');
        return results;
      } catch (error) {
        if (this.database.inTransaction) this.database.exec('ROLLBACK');
        throw error;
      }
    });
  }

  fail(consumer: string, messageId: string, now: number, error: string, maxAttempts: number, message: StoredMessage): Promise<FailureResult | undefined> {
    return this.mutex.run(() => this.recordFailure(consumer, messageId, now, error, maxAttempts, message));
  }

  /** The failure's record, as {@link SqliteInboxStore.fail} describes it, inside whatever transaction is open. */
  private recordFailure(consumer: string, messageId: string, now: number, error: string, maxAttempts: number, message: StoredMessage): FailureResult | undefined {
    const row = this.sql.fail.get({
      consumer,
      id: messageId,
      now,
      error,
      max: maxAttempts,
      headers: JSON.stringify(message.headers),
      body: Buffer.from(message.body.buffer, message.body.byteOffset, message.body.byteLength),
    }) as { attempts: number; dead: number } | undefined;
    return row === undefined ? undefined : { attempts: row.attempts, deadLettered: row.dead === 1 };
  }

  deadLetters(consumer: string | undefined, limit: number): Promise<DeadLetter[]> {
    return this.mutex.run(() => (this.sql.deadLetters.all({ consumer: consumer ?? null, limit }) as DeadRow[]).map(toDeadLetter));
  }

  requestRedrive(consumer: string, messageId: string, now: number): Promise<boolean> {
    return this.mutex.run(() => this.sql.requestRedrive.run(now, consumer, messageId).changes === 1);
  }

  pendingRedrives(consumer: string, limit: number): Promise<DeadLetter[]> {
    return this.mutex.run(() => (this.sql.pendingRedrives.all(consumer, limit) as DeadRow[]).map(toDeadLetter));
  }

  reap(before: number, limit: number): Promise<number> {
    // Each DELETE is its own short transaction, so a batch holds the write lock only briefly.
    return this.mutex.run(() => this.sql.reapMarks.run(before, limit).changes + this.sql.reapAttempts.run(before, limit).changes);
  }

  close(): Promise<void> {
    return this.mutex.run(() => {
      if (this.owned) this.database.close();
    });
  }
}

function toDeadLetter(row: DeadRow): DeadLetter {
  return Object.freeze({
    consumer: row.consumer,
    messageId: row.messageId,
    attempts: row.attempts,
    error: row.error ?? undefined,
    deadLetteredAt: row.deadLetteredAt ?? undefined,
    redriveRequestedAt: row.redriveRequestedAt ?? undefined,
    headers: Object.freeze(row.headers === null ? {} : (JSON.parse(row.headers) as Record<string, string>)),
    body: new Uint8Array(row.body ?? new Uint8Array()),
  });
}
