/**
 * The contract between the inbox engine (`inbox.ts`) and a database: PostgreSQL (`postgres.ts`) or
 * SQLite (`sqlite.ts`). Times are milliseconds since the epoch from the inbox's clock.
 *
 * @module
 */

/** What the separately committed first step of a delivery found. */
export type BeginResult =
  /** A processed mark exists: the delivery is a duplicate. */
  | { readonly state: 'processed' }
  /** The message is dead-lettered (and no redrive is pending): it is not run again. */
  | { readonly state: 'dead' }
  /** An attempt was counted and committed; `attempts` includes this one. */
  | { readonly state: 'attempt'; readonly attempts: number };

/** The outcome of a failed attempt as recorded. */
export interface FailureResult {
  /** Attempts counted so far. */
  readonly attempts: number;
  /** Whether the message is now dead-lettered. */
  readonly deadLettered: boolean;
}

/** The message content saved with a dead letter, so it can be redriven after the broker let it go. */
export interface StoredMessage {
  /** Message headers (AMQP properties/headers or NATS headers), flattened to strings. */
  readonly headers: Readonly<Record<string, string>>;
  /** The message body bytes. */
  readonly body: Uint8Array;
}

/** A dead-lettered (or redrive-pending) message. */
export interface DeadLetter extends StoredMessage {
  readonly consumer: string;
  readonly messageId: string;
  /** Attempts counted before it was dead-lettered (0 once a redrive was requested). */
  readonly attempts: number;
  /** The last error's message (`HandlerTimeoutError`, a handler throw, or the crash-loop verdict). */
  readonly error: string | undefined;
  /** When it was dead-lettered, or `undefined` while a redrive is pending. */
  readonly deadLetteredAt: number | undefined;
  /** When a redrive was requested ({@link InboxStore.requestRedrive}), or `undefined`. */
  readonly redriveRequestedAt: number | undefined;
}

/**
 * What the batch's committed first step ({@link InboxStore.beginBatch}) found for one id: as
 * {@link BeginResult}, or `suspect` when an attempt row already existed (an earlier delivery failed, crashed,
 * or is running elsewhere, or a redrive is pending). A suspect message is not counted by the batch: the
 * inbox runs it alone, through the single-message path that counts its own attempt just before it runs, so a
 * message that crashes its consumer is dead-lettered without dragging the rest of a batch along.
 */
export type BatchBeginResult = BeginResult | { readonly state: 'suspect' };

/** One message of {@link InboxStore.processBatch}: its id, what a dead letter saves, and its handler. */
export interface BatchItem<Tx> {
  readonly messageId: string;
  readonly message: StoredMessage;
  readonly run: TransactionHandler<Tx>;
}

/** How one message of {@link InboxStore.processBatch} ended. */
export type BatchItemResult =
  /** Its handler's writes and its mark committed with the batch. */
  | { readonly state: 'committed' }
  /** Another delivery committed its mark first; its handler did not run. */
  | { readonly state: 'duplicate' }
  /** Its handler threw or timed out; its writes and mark rolled back; the failure is recorded as by `fail`. */
  | { readonly state: 'failed'; readonly error: unknown; readonly attempts: number; readonly deadLettered: boolean };

/** The handler of one delivery, run inside the store's transaction. */
export type TransactionHandler<Tx> = (tx: Tx, signal: AbortSignal) => Promise<void>;

/**
 * An inbox store. On PostgreSQL every method is one statement (one round trip), except `process` (the
 * transaction) and `reap` (two bounded deletes).
 *
 * @typeParam Tx - the transaction handle given to handlers (`pg.PoolClient`, a better-sqlite3 `Database`)
 */
export interface InboxStore<Tx> {
  /**
   * The separate, committed first step: if (consumer, id) is processed, says so; if it is dead-lettered,
   * says so; otherwise counts one more attempt and commits it before the handler runs, so a process that
   * dies inside the handler still leaves the count behind.
   */
  begin(consumer: string, messageId: string, now: number): Promise<BeginResult>;
  /**
   * Opens a transaction, inserts the processed mark (primary key (consumer, message id)) and deletes the
   * attempt row, runs `fn` and commits. Returns `'duplicate'` without running `fn` when another delivery
   * committed the mark first. When `fn` throws or exceeds `timeoutMs`, rolls everything back (the mark
   * too) and rethrows (a `HandlerTimeoutError` for the timeout); `fn`'s `signal` is aborted on timeout.
   */
  process(consumer: string, messageId: string, now: number, timeoutMs: number, fn: TransactionHandler<Tx>): Promise<'committed' | 'duplicate'>;
  /**
   * Records a failed attempt's error; dead-letters the message (saving `message` for a redrive) when its
   * attempts reached `maxAttempts` (pass 0 to dead-letter at once). Returns `undefined` when no live
   * attempt row exists (processed or dead-lettered meanwhile by a concurrent delivery).
   */
  fail(consumer: string, messageId: string, now: number, error: string, maxAttempts: number, message: StoredMessage): Promise<FailureResult | undefined>;
  /**
   * The batch's committed first step, for distinct `messageIds` (results in the same order): processed
   * marks and dead letters are reported as by `begin`; an id without an attempt row gets one with 1
   * attempt; an id that has one is `suspect` and left uncounted. Optional: without it the inbox handles a
   * batch one message at a time. PostgreSQL: one statement over an array.
   */
  beginBatch?(consumer: string, messageIds: readonly string[], now: number): Promise<BatchBeginResult[]>;
  /**
   * One transaction for messages `beginBatch` counted: inserts every processed mark in one statement
   * (`duplicate` for those another delivery committed first), runs each item's handler under a savepoint
   * of its own (a throw or a timeout rolls back that item's writes only), then in one step deletes the
   * failed items' marks, records their errors and dead-letters those whose attempts reached `maxAttempts`,
   * deletes the attempt rows of the others, and commits. Results are in the order of `items`. Required
   * with `beginBatch`.
   *
   * @throws the driver's error when the transaction cannot commit (nothing of the batch committed; the
   *   attempts `beginBatch` counted stay, as after a crash)
   */
  processBatch?(consumer: string, items: readonly BatchItem<Tx>[], now: number, timeoutMs: number, maxAttempts: number): Promise<BatchItemResult[]>;
  /**
   * Dead letters and the redrive-pending ones (`deadLetteredAt` undefined) until the consumer processes
   * them or dead-letters them again, oldest first (by when they died or their redrive was asked for); all
   * consumers when `consumer` is undefined.
   */
  deadLetters(consumer: string | undefined, limit: number): Promise<DeadLetter[]>;
  /**
   * Turns a dead letter back into a pending redrive (attempts reset to 0); returns whether one was found.
   */
  requestRedrive(consumer: string, messageId: string, now: number): Promise<boolean>;
  /** Messages of `consumer` whose redrive is pending, oldest request first. */
  pendingRedrives(consumer: string, limit: number): Promise<DeadLetter[]>;
  /**
   * The reaper's step: deletes at most `limit` processed marks older than `before`, and at most `limit`
   * abandoned attempt rows (neither dead-lettered nor redrive-pending) last tried before `before`, skipping
   * rows other transactions hold. Returns how many rows it deleted.
   */
  reap(before: number, limit: number): Promise<number>;
  /** Releases what the store owns. */
  close(): Promise<void>;
}
