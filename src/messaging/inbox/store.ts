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
  /** Dead letters, oldest first; all consumers when `consumer` is undefined. */
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
