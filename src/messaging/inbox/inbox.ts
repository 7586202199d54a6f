/**
 * The idempotent consumer (inbox) engine: at-least-once deliveries in, each effect committed once.
 *
 * @module
 */
import { performance } from 'node:perf_hooks';
import { requireLimit } from '../../core/validate.js';
import { keyHash, logEvent } from '../../observability/logging.js';
import { handleInboxBatch, type BatchHost, type InboxBatchHandler, type InboxBatchOutcome } from './batch.js';
import { failureText } from './errors.js';
import { InboxMetrics } from './metrics.js';
import { requireMessageId, requireName } from './names.js';
import { resolveInboxOptions, type InboxOptions, type ResolvedInboxOptions } from './options.js';
import type { DeadLetter } from './store.js';
import { InboxTraces, type DeliverySpan } from './traces.js';

/** One delivery handed to {@link Inbox.handle}. */
export interface Delivery {
  /** The consumer's name: dedup is per (consumer, message id), so two consumers of one message each run it once. */
  readonly consumer: string;
  /** The message's id, stable across redeliveries (AMQP `messageId`, `Nats-Msg-Id`, …). Required. */
  readonly messageId: string | undefined;
  /**
   * The message's headers: saved with a dead letter for a redrive, and read for the trace context the message
   * was enqueued in (`traceparent`), which the delivery's span continues. @defaultValue `{}`
   */
  readonly headers?: Readonly<Record<string, string>>;
  /** Body saved with a dead letter for a redrive. @defaultValue empty */
  readonly body?: Uint8Array;
}

/** What the handler gets besides the transaction. */
export interface HandlerContext {
  /** This run's attempt number, from 1. */
  readonly attempt: number;
  /** Aborted when the handler exceeds `handlerTimeoutMs` (its transaction is then rolled back). */
  readonly signal: AbortSignal;
}

/** The business code of one message; its writes go through `tx` and commit with the processed mark. */
export type InboxHandler<Tx> = (tx: Tx, context: HandlerContext) => Promise<void>;

/** The result of {@link Inbox.handle}. Brokers ack `processed`, `duplicate` and `dead_lettered`, and redeliver `retry`. */
export type InboxOutcome =
  /** The handler ran and its writes committed with the mark. */
  | { readonly status: 'processed'; readonly attempts: number }
  /** Already processed by this consumer: the handler did not run. */
  | { readonly status: 'duplicate' }
  /** The handler threw or timed out; everything rolled back; the attempt was counted. */
  | { readonly status: 'retry'; readonly attempts: number; readonly error: unknown }
  /**
   * Dead-lettered now (after `maxAttempts` failures, or found started-but-unfinished `maxAttempts` times),
   * or earlier (`attempts` and `error` undefined). The handler's writes, if it ran, rolled back.
   */
  | { readonly status: 'dead_lettered'; readonly attempts: number | undefined; readonly error: unknown };

/** An inbox bound to one store. */
export interface Inbox<Tx> {
  /** The validated, frozen configuration. */
  readonly config: ResolvedInboxOptions<Tx>;
  /**
   * Runs `fn` for a delivery unless (consumer, message id) was already processed; `fn`'s writes through
   * `tx` and the processed mark commit in one transaction. Round trips: one committed step that counts the
   * attempt (so a crash inside `fn` still counts, which is how crash-looping messages are caught), then the
   * transaction (BEGIN, mark, `fn`'s statements, COMMIT); a failure adds one to record it.
   *
   * Concurrent deliveries of one id: the second blocks on the first's uncommitted mark and, once it commits,
   * returns `duplicate` without running `fn`. Each concurrent delivery counts an attempt; those running in
   * this process are not mistaken for crashes, those in other processes are (keep `maxAttempts` above the
   * number of copies of one message you expect at once).
   *
   * @throws MessageIdMissingError when `messageId` is absent, empty, over 255 characters or contains NUL
   * @throws TypeError when `consumer` is not a non-empty string of at most 255 characters without NUL
   * @throws the database driver's error when the store fails (nothing committed; the broker should redeliver)
   */
  handle(delivery: Delivery, fn: InboxHandler<Tx>): Promise<InboxOutcome>;
  /**
   * Handles many deliveries of one consumer in one transaction and answers one outcome per delivery, in
   * input order. Round trips on PostgreSQL: one committed statement that reads every id's mark and counts an
   * attempt for each new one (one statement over an array), then one transaction: one statement inserting
   * every processed mark, each new message's `fn` under a savepoint of its own, one statement settling the
   * failures, `COMMIT`. SQLite: the same steps, in two transactions.
   *
   * - Already processed: `duplicate`, `fn` not run. Dead-lettered: `dead_lettered` (attempts undefined).
   * - A throw (or a timeout) in `fn` rolls back that message's savepoint only: its writes and mark go, the
   *   others commit. It is `retry` with its attempts, or `dead_lettered` once they reach `maxAttempts`.
   * - A message with an earlier attempt on record (it failed, its consumer crashed, a redrive is pending, or
   *   another process is running it) runs alone after the batch, through {@link Inbox.handle}, which counts
   *   its attempt just before running it: a message that crashes its consumer is dead-lettered after
   *   `maxAttempts` started attempts, and the messages batched with it are not. A crash mid-batch counts
   *   one started attempt for every message of the batch (the batch's first step committed them); with
   *   `maxAttempts` 1 that dead-letters them all on redelivery, so keep it at 2 or more.
   * - A later copy of an id within the batch shares the first copy's outcome, except that a processed first
   *   copy makes it `duplicate`; `fn` runs at most once per id.
   * - A delivery without a usable id is `rejected` (`MessageIdMissingError`); the others run.
   * - On PostgreSQL a handler past `handlerTimeoutMs` ends the batch's connection, as `handle` does: the
   *   whole transaction rolls back, the timed-out message records its `HandlerTimeoutError`, and every
   *   message that shared the transaction is `retry` with that error (its attempt counted, as after a crash).
   *   On SQLite only the timed-out message's savepoint is rolled back, once `fn` settles.
   *
   * A store without `beginBatch`/`processBatch` (a store of your own) handles the batch one message at a
   * time through {@link Inbox.handle}, with the same outcomes.
   *
   * @throws TypeError when `deliveries` is not an array, `fn` is not a function, or the deliveries do not
   *   all name one valid consumer
   * @throws the database driver's error when the store fails (nothing of the batch committed, unless the
   *   failure came while running the suspects alone; the broker should redeliver every message, and the
   *   marks make that safe)
   * @example
   * ```ts
   * const outcomes = await inbox.handleBatch(
   *   messages.map((m) => ({ consumer: 'billing', messageId: m.id, body: m.body })),
   *   async (tx, delivery) => {
   *     await tx.query('INSERT INTO invoices (order_id) VALUES ($1)', [delivery.messageId]);
   *   },
   * );
   * outcomes.forEach((outcome, i) => (outcome.status === 'retry' ? nack(messages[i]) : ack(messages[i])));
   * ```
   */
  handleBatch<D extends Delivery>(deliveries: readonly D[], fn: InboxBatchHandler<Tx, D>): Promise<InboxBatchOutcome[]>;
  /**
   * Dead letters, oldest first, with the ones whose redrive is pending (`deadLetteredAt` undefined,
   * `redriveRequestedAt` set) until the consumer processes them or dead-letters them again.
   * @defaultValue limit 100, all consumers
   */
  deadLetters(query?: { readonly consumer?: string; readonly limit?: number }): Promise<DeadLetter[]>;
  /**
   * Marks a dead letter for redrive (attempts reset to 0). The consumer runs it through {@link Inbox.handle}
   * again (broker adapters poll {@link Inbox.pendingRedrives}); the processed mark makes a redrive run at
   * most once however often it is requested. Returns whether a dead letter was found.
   */
  redrive(consumer: string, messageId: string): Promise<boolean>;
  /** Pending redrives of `consumer`, oldest request first, with their saved headers and body. @defaultValue limit 100 */
  pendingRedrives(consumer: string, limit?: number): Promise<DeadLetter[]>;
  /**
   * The reaper: deletes one bounded batch of processed marks older than `retentionMs` (and abandoned
   * attempt rows), skipping rows other transactions hold, so it never blocks consumers and several
   * instances may run it. Call it on an interval; returns how many rows went (fewer than `limit` means
   * caught up).
   * @defaultValue limit 1000
   */
  reap(limit?: number): Promise<number>;
  /** Closes the store. */
  close(): Promise<void>;
}

/**
 * Creates an inbox (idempotent consumer; Hohpe and Woolf, "Enterprise Integration
 * Patterns": Idempotent Receiver).
 *
 * @throws TypeError naming the option when an option is invalid (see `InboxOptions`)
 * @example
 * ```ts
 * import pg from 'pg';
 * import { migrate } from 'retrysafe/postgres';
 * import { createInbox, createPostgresInboxStore } from 'retrysafe/inbox';
 *
 * const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL });
 * await migrate({ pool });
 * const inbox = createInbox({ store: createPostgresInboxStore({ pool }), maxAttempts: 5 });
 * const outcome = await inbox.handle({ consumer: 'billing', messageId: msg.id }, async (tx) => {
 *   await tx.query('UPDATE accounts SET balance = balance - $1 WHERE id = $2', [msg.amount, msg.account]);
 * });
 * if (outcome.status === 'retry') redeliverLater(); else ack();
 * ```
 */
export function createInbox<Tx>(options: InboxOptions<Tx>): Inbox<Tx> {
  return new InboxImpl(resolveInboxOptions(options));
}

class InboxImpl<Tx> implements Inbox<Tx>, BatchHost<Tx> {
  readonly metrics: InboxMetrics;
  readonly traces: InboxTraces;
  /** Deliveries in progress in this process, per (consumer, message id). */
  private readonly running = new Map<string, number>();

  constructor(readonly config: ResolvedInboxOptions<Tx>) {
    this.metrics = new InboxMetrics(config.meter, config.onEvent);
    this.traces = new InboxTraces(config.tracerProvider);
  }

  async handle(delivery: Delivery, fn: InboxHandler<Tx>): Promise<InboxOutcome> {
    const consumer = requireName('consumer', delivery.consumer);
    const started = performance.now();
    const span = this.traces.start(consumer, delivery.messageId, delivery.headers ?? {});
    let messageId: string;
    try {
      messageId = requireMessageId(delivery.messageId);
    } catch (error) {
      this.metrics.emit({ type: 'rejected', consumer, messageId: undefined, attempts: undefined }, undefined);
      this.traces.end(span, 'rejected', undefined, { error });
      throw error;
    }
    let outcome: InboxOutcome;
    try {
      outcome = await this.traces.within(span, () => this.deliver(consumer, messageId, delivery, fn, span));
    } catch (error) {
      this.metrics.storeUnavailable(consumer, (performance.now() - started) / 1000);
      this.traces.end(span, 'store_unavailable', undefined, { error });
      throw error;
    }
    this.report(consumer, messageId, outcome, (performance.now() - started) / 1000, span);
    return outcome;
  }

  handleBatch<D extends Delivery>(deliveries: readonly D[], fn: InboxBatchHandler<Tx, D>): Promise<InboxBatchOutcome[]> {
    return handleInboxBatch(this, deliveries, fn);
  }

  track(key: string, step: 1 | -1): void {
    const count = (this.running.get(key) ?? 0) + step;
    if (count === 0) this.running.delete(key);
    else this.running.set(key, count);
  }

  /** The delivery itself; reports nothing (see {@link InboxImpl.report}). */
  private async deliver(consumer: string, messageId: string, delivery: Delivery, fn: InboxHandler<Tx>, span: DeliverySpan | undefined): Promise<InboxOutcome> {
    const { store, clock, maxAttempts, handlerTimeoutMs } = this.config;
    const stored = { headers: delivery.headers ?? {}, body: delivery.body ?? new Uint8Array() };
    const key = `${consumer}\0${messageId}`;
    this.track(key, 1);
    try {
      const begun = await store.begin(consumer, messageId, clock.now());
      if (begun.state === 'processed') return { status: 'duplicate' };
      if (begun.state === 'dead') return { status: 'dead_lettered', attempts: undefined, error: undefined };
      const attempt = begun.attempts;
      // Deliveries of this id running in this process right now each counted an attempt too; they are not
      // crashes, so the crash-loop verdict leaves them out. All of them, counted after this begin: their
      // begins run on other connections, so the database may have counted a delivery that started later
      // before this one (counting only those that started earlier took them for crashed runs).
      const othersRunning = (this.running.get(key) ?? 1) - 1;
      const unfinished = attempt - 1 - othersRunning;
      // Every earlier start counted itself before running and none finished or failed for good: the process
      // died inside the handler each time, and running it again would likely crash again. The verdict is
      // acted on inside the transaction, after the mark insert, so a concurrent delivery that commits first
      // wins and this one becomes a duplicate instead of a dead letter.
      const verdict = unfinished >= maxAttempts ? new CrashLoopVerdict(unfinished, maxAttempts) : undefined;
      try {
        // The handler runs inside the delivery's span however the store schedules it (a pool's queue may
        // hand the connection over in another async context).
        const result = await store.process(consumer, messageId, clock.now(), handlerTimeoutMs, (tx, signal) =>
          verdict === undefined ? this.traces.within(span, () => fn(tx, { attempt, signal })) : Promise.reject(verdict),
        );
        if (result === 'duplicate') return { status: 'duplicate' };
      } catch (error) {
        const failed = await store.fail(consumer, messageId, clock.now(), errorText(error), error === verdict ? 0 : maxAttempts, stored);
        // No attempt row left: a concurrent delivery processed the message meanwhile; a redelivery finds out.
        const attempts = failed?.attempts ?? attempt;
        return failed?.deadLettered === true ? { status: 'dead_lettered', attempts, error } : { status: 'retry', attempts, error };
      }
      return { status: 'processed', attempts: attempt };
    } finally {
      this.track(key, -1);
    }
  }

  /** Reports a delivery's outcome: the event (hook and metrics), the span, and a log line for a dead letter. */
  report(consumer: string, messageId: string, outcome: InboxOutcome, seconds: number, span: DeliverySpan | undefined): void {
    if (outcome.status === 'duplicate') {
      this.metrics.emit({ type: 'duplicate', consumer, messageId, attempts: undefined }, seconds);
      this.traces.end(span, 'duplicate', undefined);
      return;
    }
    const { status, attempts } = outcome;
    if (status === 'dead_lettered' && attempts === undefined) {
      // Dead-lettered by an earlier delivery: nothing new happened to it.
      this.traces.end(span, status, undefined);
      return;
    }
    this.metrics.emit({ type: status, consumer, messageId, attempts }, seconds);
    if (status === 'processed') {
      this.traces.end(span, status, attempts);
      return;
    }
    this.traces.end(span, status, attempts, { error: outcome.error });
    if (status === 'dead_lettered') {
      logEvent(this.config.logger, 'dead_letter', { consumer, messageIdHash: keyHash(consumer, messageId), reason: errorText(outcome.error), attempts });
    }
  }

  deadLetters(query: { readonly consumer?: string; readonly limit?: number } = {}): Promise<DeadLetter[]> {
    const consumer = query.consumer === undefined ? undefined : requireName('consumer', query.consumer);
    return this.config.store.deadLetters(consumer, requireLimit('deadLetters', query.limit ?? 100));
  }

  redrive(consumer: string, messageId: string): Promise<boolean> {
    return this.config.store.requestRedrive(requireName('consumer', consumer), requireName('messageId', messageId), this.config.clock.now());
  }

  pendingRedrives(consumer: string, limit = 100): Promise<DeadLetter[]> {
    return this.config.store.pendingRedrives(requireName('consumer', consumer), requireLimit('pendingRedrives', limit));
  }

  reap(limit = 1000): Promise<number> {
    return this.config.store.reap(this.config.clock.now() - this.config.retentionMs, requireLimit('reap', limit));
  }

  close(): Promise<void> {
    return this.config.store.close();
  }
}

/** Why a message that kept crashing its consumer was dead-lettered without running. */
class CrashLoopVerdict extends Error {
  override readonly name = 'CrashLoopVerdict';
  constructor(unfinished: number, maxAttempts: number) {
    super(`started ${unfinished} times without finishing (maxAttempts ${maxAttempts})`);
  }
}

function errorText(error: unknown): string {
  if (error instanceof CrashLoopVerdict) return error.message;
  return failureText(error);
}
