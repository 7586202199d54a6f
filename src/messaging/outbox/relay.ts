/**
 * The relay: claims committed outbox rows, publishes them through an {@link OutboxPublisher}, and marks
 * them sent only after the broker's confirm. At-least-once with stable ids; the consumer's inbox makes the
 * effect once.
 *
 * @module
 */
import { randomUUID } from 'node:crypto';
import type { Meter } from '@opentelemetry/api';
import type pg from 'pg';
import type { Clock } from '../../core/clock.js';
import { isListenOption, listenClient, type ListenOption, poolerProblem } from '../../stores/postgres/listen-session.js';
import { describe, requireClock, requireCount, requireDurationMs, requireFunction, requireOptions } from '../../core/validate.js';
import { PublishError, PublishTimeoutError } from './errors.js';
import { OutboxMetrics, type OutboxEvent, type RelayWakeCause } from './metrics.js';
import type { Outbox } from './outbox.js';
import type { OutboxMessage, OutboxPublisher } from './publisher.js';
import { statementsOf, type ClaimedRow, type OutboxStatements } from './statements.js';

/** Options of {@link createRelay}. Durations in milliseconds. */
export interface RelayOptions {
  /** The pool claims and updates run on (never ended by the relay); LISTEN opens one extra connection with its settings. */
  readonly pool: pg.Pool;
  /**
   * The connection the relay LISTENs (and holds the outbox's waiting lock) on: a `pg.ClientConfig` (e.g.
   * `{ connectionString }`) for a session straight to PostgreSQL, or `false` for none, the relay then
   * polling every `pollIntervalMs`. Behind PgBouncer in transaction mode the pool's own settings cannot
   * work (a LISTEN through the pooler never hears a notification): the relay reports an error naming this
   * option once, through `onEvent`, and polls.
   * @defaultValue a dedicated connection with the pool's settings
   */
  readonly listen?: pg.ClientConfig | false;
  /** The outbox whose rows to publish, as `createOutbox` made it (the relay runs its statements). */
  readonly outbox: Outbox;
  /** Where messages go. The relay never closes it: its owner does, after `stop()`. */
  readonly publisher: OutboxPublisher;
  /** Rows claimed per statement at most. @defaultValue 500 */
  readonly batchSize?: number;
  /**
   * Batches in flight at once in this relay (`start()` runs this many claim-publish loops, so one batch's
   * claim overlaps another's publishing). Loops coordinate like separate relays, except that a claim which
   * found nothing while another batch of this relay was in flight waits for one to finish before claiming
   * again (its keys are the ones leased). @defaultValue 1
   */
  readonly concurrency?: number;
  /**
   * Rows of one key per batch at most; a key's rows are published one after another, so this bounds how
   * long one key holds a batch. @defaultValue 20
   */
  readonly perKeyLimit?: number;
  /**
   * How long a claim holds its rows; after it, another relay may take them over (a killed relay loses
   * nothing). Must exceed `publishTimeoutMs`. @defaultValue 30_000
   */
  readonly leaseMs?: number;
  /** How long one publish may wait for the broker's confirm before it counts as failed. @defaultValue 10_000 */
  readonly publishTimeoutMs?: number;
  /** Poll interval when no NOTIFY arrives (NOTIFY is an optimisation; polling is the guarantee). @defaultValue 1_000 */
  readonly pollIntervalMs?: number;
  /** Attempts (claims) after which a failing message is dead-lettered. @defaultValue 10 */
  readonly maxAttempts?: number;
  /** Wait before the second attempt; doubles per attempt (exponential backoff). @defaultValue 500 */
  readonly backoffBaseMs?: number;
  /** Longest wait between attempts. @defaultValue 60_000 */
  readonly backoffMaxMs?: number;
  /** Time source for leases, backoff and latencies (milliseconds). @defaultValue the outbox's clock */
  readonly clock?: Clock;
  /**
   * OpenTelemetry meter for the counter, histograms and status gauges (see `OUTBOX_INSTRUMENTS`).
   * @defaultValue the global provider's `retrysafe` meter (`metrics.getMeterProvider()`), read as each claim
   * starts: an SDK registered after the relay was created is recorded to, and its gauges observed on, from
   * the next claim on
   */
  readonly meter?: Meter;
  /** Called synchronously with every outcome; a throw from it is ignored. @defaultValue none */
  readonly onEvent?: (event: OutboxEvent) => void;
}

/** A running (or runnable) relay. */
export interface Relay {
  /**
   * Starts the loop: claim and publish while rows are ready, else wait for a NOTIFY or the poll interval.
   * Before it waits, the relay takes the outbox's waiting lock on its LISTEN connection, so enqueues
   * NOTIFY only while it waits (migration `0007_outbox_waiting`; docs/outbox.md, "Who gets a NOTIFY").
   */
  start(): void;
  /**
   * Stops gracefully: publishes already handed to the broker finish (and are marked), rows not yet handed
   * over are released at once for other relays, the LISTEN connection closes. Resolves when done.
   */
  stop(): Promise<void>;
  /**
   * Claims one batch, publishes it (keys in parallel, each key in order) and records the outcomes.
   * Resolves with the number of rows claimed (0 when nothing was ready). Used by the loop; call it
   * directly to drive a relay by hand (tests, benchmarks) without `start()`. Calls may overlap; after one
   * came back empty while another was in flight, the next waits for an in-flight one to finish first.
   *
   * @throws the driver's error when PostgreSQL fails
   */
  runOnce(): Promise<number>;
}

/** Defaults of {@link RelayOptions}. */
export const RELAY_DEFAULTS = Object.freeze({
  batchSize: 500,
  concurrency: 1,
  perKeyLimit: 20,
  leaseMs: 30_000,
  publishTimeoutMs: 10_000,
  pollIntervalMs: 1_000,
  maxAttempts: 10,
  backoffBaseMs: 500,
  backoffMaxMs: 60_000,
});

/**
 * Creates a relay for an outbox. Several relays (in one process or many) may run on one outbox at once:
 * claims use `FOR UPDATE SKIP LOCKED` and leases, and a key is only ever in flight on one relay.
 *
 * Ordering: a row becomes eligible once its inserting transaction id is below the xmin of the claim's
 * snapshot (every transaction that could still add an earlier row has ended); rows are published per key
 * in (transaction id, sequence) order, and a key's next row waits until the previous one is sent or
 * dead-lettered. Other keys keep flowing past a failing one.
 *
 * Wake-up: while busy, the relay claims again as soon as a batch is recorded; before it sleeps it takes the
 * outbox's waiting lock (needs migration `0007_outbox_waiting`), so enqueues NOTIFY only while a relay
 * waits and concurrent writers do not queue on NOTIFY's commit lock while it is busy. Polling every
 * `pollIntervalMs` remains the guarantee.
 *
 * Failures: a publish that rejects or times out is retried after `backoffBaseMs * 2^(attempt-1)` (capped
 * at `backoffMaxMs`); after `maxAttempts` attempts, or at once for a `PublishError` with `permanent`, it
 * is dead-lettered with the error's message. A relay that dies mid-batch leaves leased rows that any
 * relay claims again once `leaseMs` passed; they are published again with the same id.
 *
 * @throws TypeError naming the option when an option is invalid
 * @example
 * ```ts
 * import pg from 'pg';
 * import { createOutbox, createRelay } from 'retrysafe/outbox';
 * import { createAmqpPublisher } from 'retrysafe/amqp-publisher';
 *
 * const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL });
 * const publisher = createAmqpPublisher({ url: 'amqp://localhost', exchange: 'events' });
 * const relay = createRelay({ pool, outbox: createOutbox(), publisher });
 * relay.start();
 * process.once('SIGTERM', () => void relay.stop().then(() => publisher.close()));
 * ```
 */
export function createRelay(options: RelayOptions): Relay {
  return new OutboxRelay(resolveRelayOptions(options));
}

interface ResolvedRelayOptions {
  readonly pool: pg.Pool;
  readonly listen: ListenOption;
  readonly outbox: Outbox;
  /** The outbox's statements, from `createOutbox` through `statementsOf`. */
  readonly sql: OutboxStatements;
  readonly publisher: OutboxPublisher;
  readonly batchSize: number;
  readonly concurrency: number;
  readonly perKeyLimit: number;
  readonly leaseMs: number;
  readonly publishTimeoutMs: number;
  readonly pollIntervalMs: number;
  readonly maxAttempts: number;
  readonly backoffBaseMs: number;
  readonly backoffMaxMs: number;
  readonly clock: Clock;
  readonly meter: Meter | undefined;
  readonly onEvent: ((event: OutboxEvent) => void) | undefined;
}

function resolveRelayOptions(options: RelayOptions): ResolvedRelayOptions {
  requireOptions('createRelay', options);
  const { pool, outbox, publisher, onEvent } = options;
  if (typeof pool !== 'object' || pool === null || typeof pool.connect !== 'function') {
    throw new TypeError(`retrysafe: option "pool" must be a pg.Pool, got ${describe(pool)}`);
  }
  const sql = typeof outbox === 'object' && outbox !== null ? statementsOf(outbox) : undefined;
  if (sql === undefined) {
    throw new TypeError(`retrysafe: option "outbox" must come from createOutbox, got ${describe(outbox)}`);
  }
  if (typeof publisher !== 'object' || publisher === null || typeof publisher.publish !== 'function') {
    throw new TypeError(`retrysafe: option "publisher" must have a publish() method, got ${describe(publisher)}`);
  }
  const clock = requireClock(options.clock ?? outbox.clock);
  if (onEvent !== undefined) requireFunction('onEvent', onEvent);
  const { meter } = options;
  if (meter !== undefined && (typeof meter !== 'object' || meter === null || typeof meter.createCounter !== 'function')) {
    throw new TypeError(`retrysafe: option "meter" must be an OpenTelemetry Meter, got ${describe(meter)}`);
  }
  if (!isListenOption(options.listen)) {
    throw new TypeError(`retrysafe: option "listen" must be a pg.ClientConfig or false, got ${describe(options.listen)}`);
  }
  const d = RELAY_DEFAULTS;
  const resolved: ResolvedRelayOptions = {
    pool,
    listen: options.listen,
    outbox,
    sql,
    publisher,
    batchSize: requireCount('batchSize', options.batchSize ?? d.batchSize),
    concurrency: requireCount('concurrency', options.concurrency ?? d.concurrency),
    perKeyLimit: requireCount('perKeyLimit', options.perKeyLimit ?? d.perKeyLimit),
    leaseMs: requireDurationMs('leaseMs', options.leaseMs ?? d.leaseMs),
    publishTimeoutMs: requireDurationMs('publishTimeoutMs', options.publishTimeoutMs ?? d.publishTimeoutMs),
    pollIntervalMs: requireDurationMs('pollIntervalMs', options.pollIntervalMs ?? d.pollIntervalMs),
    maxAttempts: requireCount('maxAttempts', options.maxAttempts ?? d.maxAttempts),
    backoffBaseMs: requireDurationMs('backoffBaseMs', options.backoffBaseMs ?? d.backoffBaseMs),
    backoffMaxMs: requireDurationMs('backoffMaxMs', options.backoffMaxMs ?? d.backoffMaxMs),
    clock,
    meter,
    onEvent,
  };
  if (resolved.leaseMs <= resolved.publishTimeoutMs) {
    throw new TypeError(
      `retrysafe: option "leaseMs" (${resolved.leaseMs}) must exceed "publishTimeoutMs" (${resolved.publishTimeoutMs}), or a slow publish would lose its lease`,
    );
  }
  return Object.freeze(resolved);
}

/**
 * First wait (milliseconds) when chasing a notified row the claim could not see yet; each empty claim
 * doubles it (2, 4, 8, …) until it reaches the poll interval. A row held back by a long transaction is
 * then claimed within about the time it was held, not a whole poll interval after it became visible.
 */
const CHASE_FIRST_MS = 2;

/**
 * Where a relay loop stands before it sleeps a whole poll interval (see `prepareToWait`):
 * - `waiting`: the relay holds the waiting lock and every transaction that enqueued without a NOTIFY has
 *   ended and been claimed from, so any later enqueue NOTIFYs;
 * - `claim`: those transactions just ended; claim once more before sleeping;
 * - `retry`: the lock is not free (another relay waits, or a transaction that enqueued without a NOTIFY is
 *   still open), those transactions have not all ended yet, or there is no LISTEN connection: try again
 *   after a short, doubling wait.
 */
type WaitState = 'waiting' | 'claim' | 'retry';

/** The waiting lock this relay holds on its LISTEN connection, and whether its horizon has passed. */
interface WaitLock {
  readonly horizon: string;
  passed: boolean;
}

/** A claimed row and what became of it. */
interface Claimed {
  readonly seq: string;
  readonly message: OutboxMessage;
}

/** The outcome of one claimed row. */
type Outcome =
  | { readonly kind: 'sent' }
  | { readonly kind: 'failed'; readonly error: unknown; readonly publishMs: number }
  | { readonly kind: 'unpublished' };

class OutboxRelay implements Relay {
  private readonly metrics: OutboxMetrics;
  private loop: Promise<void> | undefined;
  private stopping = false;
  private woken = false;
  /** NOTIFYs received so far; a loop compares it with the count it last saw. */
  private notifications = 0;
  private readonly sleepers = new Set<(cause: RelayWakeCause) => void>();
  private listener: pg.Client | undefined;
  /** Set once the LISTEN connection turned out to go through a pooler: the relay polls from then on. */
  private listenRefused = false;
  /** This relay's batches between claim and record, settled (never rejecting), for claims to wait on. */
  private readonly inFlight = new Set<Promise<void>>();
  /** Whether the last claim came back empty while another batch of this relay was in flight. */
  private metOwnBatch = false;
  /** The waiting lock (migration `0007_outbox_waiting`) while this relay holds it on `listener`. */
  private waitLock: WaitLock | undefined;
  /** Queries on the LISTEN connection about the waiting lock, one at a time. */
  private lockQueries: Promise<unknown> = Promise.resolve();

  constructor(private readonly o: ResolvedRelayOptions) {
    this.metrics = new OutboxMetrics(o.meter, o.onEvent, () => o.outbox.status(o.pool));
  }

  start(): void {
    if (this.loop !== undefined) return;
    this.stopping = false;
    this.metrics.register();
    this.loop = Promise.all(Array.from({ length: this.o.concurrency }, () => this.run())).then(() => undefined);
  }

  async stop(): Promise<void> {
    this.stopping = true;
    this.wakeAll('stop');
    const loop = this.loop;
    this.loop = undefined;
    if (loop !== undefined) {
      await loop;
      this.metrics.unregister();
    }
    await this.closeListener();
  }

  async runOnce(): Promise<number> {
    const { pool, sql, clock, leaseMs, batchSize, perKeyLimit } = this.o;
    // An empty claim made while this relay held a batch most likely found only that batch's keys leased:
    // until it records, claiming again would rescan the backlog for nothing (and steal the database's CPU
    // from the batch in flight).
    if (this.metOwnBatch && this.inFlight.size > 0) {
      await Promise.race(this.inFlight);
      // stop() came while waiting: claiming now would only lease rows to release them again.
      if (this.stopping) return 0;
    }
    this.metrics.begin();
    const busy = this.inFlight.size > 0;
    const now = clock.now();
    const token = randomUUID();
    const result = await pool.query<ClaimedRow>(sql.claim, [now, now + leaseMs, token, batchSize, perKeyLimit]);
    this.metOwnBatch = busy && result.rows.length === 0;
    if (result.rows.length === 0) return 0;
    // Busy: enqueues need not NOTIFY until this relay waits again.
    this.stopWaiting();
    const delivered = this.deliver(result.rows, token, now + leaseMs);
    const settled = delivered.then(
      () => undefined,
      () => undefined,
    );
    this.inFlight.add(settled);
    try {
      await delivered;
    } finally {
      this.inFlight.delete(settled);
    }
    return result.rows.length;
  }

  /** Publishes a claimed batch (keys in parallel, each key in order) and records the outcomes. */
  private async deliver(rows: readonly ClaimedRow[], token: string, leaseUntil: number): Promise<void> {
    const byKey = new Map<string, Claimed[]>();
    for (const row of sortByCommitOrder(rows)) {
      const run = byKey.get(row.key) ?? [];
      byKey.set(row.key, run);
      run.push({
        seq: row.seq,
        message: Object.freeze({
          id: row.id,
          topic: row.topic,
          key: row.key,
          payload: Uint8Array.from(row.payload),
          headers: Object.freeze({ ...row.headers }),
          attempt: row.attempts,
          createdAt: Number(row.createdAt),
        }),
      });
    }
    const outcomes = await Promise.all([...byKey.values()].map((run) => this.publishRun(run, leaseUntil)));
    await this.record(token, outcomes.flat());
  }

  /**
   * Publishes one key's rows in order, stopping at the first failure, at shutdown, or when a publish could
   * outlast the lease (another relay may then take the key over, and two relays must never publish one
   * key at once).
   */
  private async publishRun(run: readonly Claimed[], leaseUntil: number): Promise<[Claimed, Outcome][]> {
    const outcomes: [Claimed, Outcome][] = [];
    let blocked = false;
    for (const claimed of run) {
      if (blocked || this.stopping || this.o.clock.now() + this.o.publishTimeoutMs >= leaseUntil) {
        outcomes.push([claimed, { kind: 'unpublished' }]);
        continue;
      }
      const started = this.o.clock.now();
      try {
        await this.publishOne(claimed.message);
        outcomes.push([claimed, { kind: 'sent' }]);
        const confirmed = this.o.clock.now();
        this.emit('published', claimed.message, { publishMs: confirmed - started, latencyMs: confirmed - claimed.message.createdAt });
      } catch (error) {
        outcomes.push([claimed, { kind: 'failed', error, publishMs: this.o.clock.now() - started }]);
        blocked = true;
      }
    }
    return outcomes;
  }

  private async publishOne(message: OutboxMessage): Promise<void> {
    const controller = new AbortController();
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        const error = new PublishTimeoutError(this.o.publishTimeoutMs);
        controller.abort(error);
        reject(error);
      }, this.o.publishTimeoutMs);
    });
    try {
      await Promise.race([this.o.publisher.publish(message, controller.signal), timeout]);
    } finally {
      clearTimeout(timer);
    }
  }

  /** Writes the batch's outcomes: one statement for the sent rows, one per failure, one for the rest. */
  private async record(token: string, outcomes: readonly [Claimed, Outcome][]): Promise<void> {
    const { pool, sql, clock } = this.o;
    const sent = outcomes.filter(([, o]) => o.kind === 'sent').map(([c]) => c.seq);
    const unpublished = outcomes.filter(([, o]) => o.kind === 'unpublished');
    if (sent.length > 0) await pool.query(sql.markSent, [sent, token, clock.now()]);
    for (const [claimed, outcome] of outcomes) {
      if (outcome.kind !== 'failed') continue;
      const { message } = claimed;
      const reason = outcome.error instanceof Error ? outcome.error.message : String(outcome.error);
      const permanent = outcome.error instanceof PublishError && outcome.error.permanent;
      const dead = permanent || message.attempt >= this.o.maxAttempts;
      const now = clock.now();
      const backoff = Math.min(this.o.backoffMaxMs, this.o.backoffBaseMs * 2 ** Math.min(message.attempt - 1, 40));
      await pool.query(sql.fail, [claimed.seq, token, now, reason, dead, now + backoff]);
      this.emit(dead ? 'dead_lettered' : 'retry', message, {
        error: reason,
        publishMs: outcome.publishMs,
      });
    }
    if (unpublished.length > 0) {
      await pool.query(sql.release, [unpublished.map(([c]) => c.seq), token]);
      for (const [claimed] of unpublished) this.emit('released', claimed.message, {});
    }
  }

  private emit(
    type: OutboxEvent['type'],
    message: OutboxMessage,
    extra: { readonly publishMs?: number; readonly latencyMs?: number; readonly error?: string },
  ): void {
    this.metrics.emit({
      type,
      id: message.id,
      key: message.key,
      topic: message.topic,
      attempt: message.attempt,
      publishMs: extra.publishMs,
      latencyMs: extra.latencyMs,
      error: extra.error,
    });
  }

  private async run(): Promise<void> {
    let seen = this.notifications;
    let chaseMs = 0;
    let retryMs = 0;
    while (!this.stopping) {
      // Cleared before the claim: a NOTIFY arriving while the batch runs makes the next wait return at once.
      this.woken = false;
      const notified = this.notifications !== seen;
      seen = this.notifications;
      let claimed = 0;
      // Without LISTEN the relay still works, by polling; the failure is reported and retried next turn.
      await this.ensureListener().catch((error: unknown) => this.reportError(error));
      if (this.stopping) break;
      try {
        claimed = await this.runOnce();
      } catch (error) {
        this.reportError(error);
      }
      if (claimed > 0) {
        chaseMs = 0;
        retryMs = 0;
        continue;
      }
      // A notified row stays invisible to the claim until every transaction that began before it has
      // ended anywhere on the server (snapshot xmin): chase it with doubling waits rather than sleeping a
      // whole poll interval. Losing the row to another relay costs a few cheap empty claims.
      chaseMs = notified ? CHASE_FIRST_MS : chaseMs > 0 && chaseMs < this.o.pollIntervalMs ? chaseMs * 2 : 0;
      if (chaseMs > 0) {
        await this.idle(Math.min(chaseMs, this.o.pollIntervalMs));
        continue;
      }
      const state = await this.prepareToWait();
      if (state === 'claim') continue;
      if (state === 'waiting') {
        retryMs = 0;
        this.emitRelayEvent('waiting', undefined, undefined);
        this.emitRelayEvent('woken', undefined, await this.idle(this.o.pollIntervalMs));
        continue;
      }
      retryMs = retryMs === 0 ? CHASE_FIRST_MS : Math.min(retryMs * 2, this.o.pollIntervalMs);
      await this.idle(retryMs);
    }
  }

  /**
   * Gets this relay ready to sleep until a NOTIFY (migration `0007_outbox_waiting` explains the protocol):
   * takes the waiting lock, whose horizon is the xmax of a snapshot taken once the lock was held, and
   * reports `claim` once every transaction below the horizon has ended, as their rows may not have been
   * claimable before. Never rejects: a failure is reported and answers `retry`.
   */
  private prepareToWait(): Promise<WaitState> {
    const { sql } = this.o;
    return this.onListener<WaitState>('retry', async (client) => {
      let lock = this.waitLock;
      if (lock === undefined) {
        const taken = await client.query<{ horizon: string | null }>(sql.relayWait);
        const horizon = taken.rows[0]?.horizon ?? null;
        if (horizon === null) return 'retry';
        lock = { horizon, passed: false };
        this.waitLock = lock;
      }
      if (lock.passed) return 'waiting';
      const check = await client.query<{ passed: boolean }>(sql.horizonPassed, [lock.horizon]);
      if (check.rows[0]?.passed !== true) return 'retry';
      lock.passed = true;
      return 'claim';
    });
  }

  /** Gives the waiting lock back, when held, so enqueues stop sending NOTIFYs; does not wait for it. */
  private stopWaiting(): void {
    if (this.waitLock === undefined) return;
    void this.onListener(undefined, async (client) => {
      if (this.waitLock === undefined) return;
      this.waitLock = undefined;
      await client.query(this.o.sql.relayBusy);
    });
  }

  /**
   * Runs `query` on the LISTEN connection after the lock queries before it; resolves with `fallback` when
   * there is no connection or the query fails (the failure is reported; a lost connection took the lock
   * with it).
   */
  private onListener<T>(fallback: T, query: (client: pg.Client) => Promise<T>): Promise<T> {
    const result = this.lockQueries.then(async () => {
      const client = this.listener;
      if (client === undefined) return fallback;
      try {
        return await query(client);
      } catch (error) {
        this.reportError(error);
        return fallback;
      }
    });
    this.lockQueries = result;
    return result;
  }

  private reportError(error: unknown): void {
    this.emitRelayEvent('error', error instanceof Error ? error.message : String(error), undefined);
  }

  /**
   * An event about the relay itself rather than one message, with no message fields: `error`, or
   * `waiting` and `woken` around a wait for rows (no instrument counts those two).
   */
  private emitRelayEvent(type: 'error' | 'waiting' | 'woken', error: string | undefined, cause: RelayWakeCause | undefined): void {
    const event: OutboxEvent = { type, id: undefined, key: undefined, topic: undefined, attempt: undefined, publishMs: undefined, latencyMs: undefined, error };
    this.metrics.emit(cause === undefined ? event : { ...event, cause });
  }

  /**
   * Waits for a NOTIFY, `ms` milliseconds, a lost LISTEN connection or `stop()`, whichever comes first,
   * and answers which it was (`poll` when the time ran out).
   */
  private async idle(ms: number): Promise<RelayWakeCause> {
    if (this.stopping) return 'stop';
    if (this.woken) return 'notification';
    let timer: NodeJS.Timeout | undefined;
    let wake!: (cause: RelayWakeCause) => void;
    const cause = await new Promise<RelayWakeCause>((resolve) => {
      wake = resolve;
      this.sleepers.add(wake);
      timer = setTimeout(() => resolve('poll'), ms);
    });
    clearTimeout(timer);
    this.sleepers.delete(wake);
    return cause;
  }

  private wakeAll(cause: RelayWakeCause): void {
    for (const wake of this.sleepers) wake(cause);
  }

  /**
   * Opens the LISTEN connection if there is none. A lost connection is dropped and reopened on the next
   * turn; polling covers the gap.
   */
  private async ensureListener(): Promise<void> {
    if (this.listener !== undefined || this.o.listen === false || this.listenRefused) return;
    const client = listenClient(this.o.pool, this.o.listen);
    const lost = (): void => {
      if (this.listener !== client) return;
      this.listener = undefined;
      // The waiting lock went with the session: enqueues no longer NOTIFY, so the loops must not sleep on.
      this.waitLock = undefined;
      this.wakeAll('listener_lost');
      void client.end().catch(() => undefined);
    };
    client.on('error', lost);
    client.on('end', lost);
    client.on('notification', () => {
      this.notifications++;
      this.woken = true;
      this.wakeAll('notification');
    });
    this.listener = client;
    try {
      await client.connect();
      const problem = await poolerProblem(client, 'the outbox relay');
      if (problem !== undefined) {
        // Reported once: the pooler will not go away, and polling carries on meanwhile.
        this.listenRefused = true;
        throw new Error(problem);
      }
      await client.query(this.o.sql.listen);
    } catch (error) {
      this.listener = undefined;
      await client.end().catch(() => undefined);
      throw error;
    }
  }

  private async closeListener(): Promise<void> {
    const client = this.listener;
    this.listener = undefined;
    this.waitLock = undefined;
    if (client !== undefined) await client.end().catch(() => undefined);
  }
}

/** Rows in publish order: by inserting transaction id, then sequence (both compared as integers). */
function sortByCommitOrder(rows: readonly ClaimedRow[]): ClaimedRow[] {
  return [...rows].sort((a, b) => {
    const byXid = compareBig(a.xid, b.xid);
    return byXid !== 0 ? byXid : compareBig(a.seq, b.seq);
  });
}

function compareBig(a: string, b: string): number {
  const x = BigInt(a);
  const y = BigInt(b);
  return x < y ? -1 : x > y ? 1 : 0;
}
