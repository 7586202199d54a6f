/**
 * The idempotent consumer (inbox) engine: at-least-once deliveries in, each effect committed once.
 *
 * @module
 */
import { performance } from 'node:perf_hooks';
import { describe, requireLimit } from '../../core/validate.js';
import { keyHash, logEvent } from '../../observability/logging.js';
import { MAX_MESSAGE_ID_LENGTH, MessageIdMissingError } from './errors.js';
import { InboxMetrics } from './metrics.js';
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
  /** Dead letters, oldest first. @defaultValue limit 100, all consumers */
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

class InboxImpl<Tx> implements Inbox<Tx> {
  private readonly metrics: InboxMetrics;
  private readonly traces: InboxTraces;
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

  /** The delivery itself; reports nothing (see {@link InboxImpl.report}). */
  private async deliver(consumer: string, messageId: string, delivery: Delivery, fn: InboxHandler<Tx>, span: DeliverySpan | undefined): Promise<InboxOutcome> {
    const { store, clock, maxAttempts, handlerTimeoutMs } = this.config;
    const stored = { headers: delivery.headers ?? {}, body: delivery.body ?? new Uint8Array() };
    const key = `${consumer}\0${messageId}`;
    this.running.set(key, (this.running.get(key) ?? 0) + 1);
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
      const left = (this.running.get(key) ?? 1) - 1;
      if (left === 0) this.running.delete(key);
      else this.running.set(key, left);
    }
  }

  /** Reports a delivery's outcome: the event (hook and metrics), the span, and a log line for a dead letter. */
  private report(consumer: string, messageId: string, outcome: InboxOutcome, seconds: number, span: DeliverySpan | undefined): void {
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

/**
 * The delivery's message id.
 * @throws MessageIdMissingError when it is absent, empty, over 255 characters or contains NUL
 */
function requireMessageId(messageId: unknown): string {
  const reason =
    typeof messageId !== 'string'
      ? 'no id'
      : messageId.length === 0
        ? 'an empty id'
        : messageId.length > MAX_MESSAGE_ID_LENGTH
          ? `an id longer than ${MAX_MESSAGE_ID_LENGTH} characters`
          : messageId.includes('\0')
            ? 'an id containing NUL'
            : undefined;
  if (reason !== undefined) throw new MessageIdMissingError(reason);
  return messageId as string;
}

function requireName(option: string, value: unknown): string {
  if (typeof value !== 'string' || value.length === 0 || value.length > MAX_MESSAGE_ID_LENGTH || value.includes('\0')) {
    throw new TypeError(`retrysafe: "${option}" must be a non-empty string of at most ${MAX_MESSAGE_ID_LENGTH} characters without NUL, got ${describe(value)}`);
  }
  return value;
}

function errorText(error: unknown): string {
  if (error instanceof CrashLoopVerdict) return error.message;
  return error instanceof Error ? `${error.name}: ${error.message}` : String(error);
}
