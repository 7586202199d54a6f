/**
 * The relay: claims committed outbox rows, publishes them through an `OutboxPublisher`, and marks
 * them sent only after the broker's confirm. At-least-once with stable ids; the consumer's inbox makes the
 * effect once.
 *
 * @module
 */
import { randomUUID } from 'node:crypto';
import { PublishError, PublishTimeoutError } from './errors.js';
import { OutboxMetrics, type OutboxEvent, type RelayWakeCause } from './metrics.js';
import type { OutboxMessage } from './publisher.js';
import { resolveRelayOptions, type RelayOptions, type ResolvedRelayOptions } from './relay-options.js';
import type { ClaimedRow } from './statements.js';
import { CHASE_FIRST_MS, RelayWakeup } from './wake.js';

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
  private readonly wakeup: RelayWakeup;
  /** This relay's batches between claim and record, settled (never rejecting), for claims to wait on. */
  private readonly inFlight = new Set<Promise<void>>();
  /** Whether the last claim came back empty while another batch of this relay was in flight. */
  private metOwnBatch = false;

  constructor(private readonly o: ResolvedRelayOptions) {
    this.metrics = new OutboxMetrics(o.meter, o.onEvent, () => o.outbox.status(o.pool));
    this.wakeup = new RelayWakeup(o, (error) => this.reportError(error));
  }

  start(): void {
    if (this.loop !== undefined) return;
    this.stopping = false;
    this.wakeup.resume();
    this.metrics.register();
    this.loop = Promise.all(Array.from({ length: this.o.concurrency }, () => this.run())).then(() => undefined);
  }

  async stop(): Promise<void> {
    this.stopping = true;
    this.wakeup.stop();
    const loop = this.loop;
    this.loop = undefined;
    if (loop !== undefined) {
      await loop;
      this.metrics.unregister();
    }
    await this.wakeup.closeListener();
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
    this.wakeup.stopWaiting();
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
    const { wakeup } = this;
    let seen = wakeup.notifications;
    let chaseMs = 0;
    let retryMs = 0;
    while (!this.stopping) {
      // Cleared before the claim: a NOTIFY arriving while the batch runs makes the next wait return at once.
      wakeup.clearWoken();
      const notified = wakeup.notifications !== seen;
      seen = wakeup.notifications;
      let claimed = 0;
      // Without LISTEN the relay still works, by polling; the failure is reported and retried next turn.
      await wakeup.ensureListener().catch((error: unknown) => this.reportError(error));
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
        await wakeup.idle(Math.min(chaseMs, this.o.pollIntervalMs));
        continue;
      }
      const state = await wakeup.prepareToWait();
      if (state === 'claim') continue;
      if (state === 'waiting') {
        retryMs = 0;
        this.emitRelayEvent('waiting', undefined, undefined);
        this.emitRelayEvent('woken', undefined, await wakeup.idle(this.o.pollIntervalMs));
        continue;
      }
      retryMs = retryMs === 0 ? CHASE_FIRST_MS : Math.min(retryMs * 2, this.o.pollIntervalMs);
      await wakeup.idle(retryMs);
    }
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
