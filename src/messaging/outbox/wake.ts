/**
 * The relay's wake-up protocol: its LISTEN connection, the outbox's waiting lock held on it (migration
 * `0007_outbox_waiting`), and the sleeps that a NOTIFY, the poll interval, a lost connection or `stop()`
 * end. The relay (`relay.ts`) drives it and hears its failures through a callback, so this module knows
 * nothing of the publish pipeline.
 *
 * @module
 */
import type pg from 'pg';
import { listenClient, poolerProblem, type ListenOption } from '../../stores/postgres/listen-session.js';
import type { RelayWakeCause } from './metrics.js';
import type { OutboxStatements } from './statements.js';

/**
 * First wait (milliseconds) when chasing a notified row the claim could not see yet; each empty claim
 * doubles it (2, 4, 8, …) until it reaches the poll interval. A row held back by a long transaction is
 * then claimed within about the time it was held, not a whole poll interval after it became visible.
 */
export const CHASE_FIRST_MS = 2;

/**
 * Where a relay loop stands before it sleeps a whole poll interval (see {@link RelayWakeup.prepareToWait}):
 * - `waiting`: the relay holds the waiting lock and every transaction that enqueued without a NOTIFY has
 *   ended and been claimed from, so any later enqueue NOTIFYs;
 * - `claim`: those transactions just ended; claim once more before sleeping;
 * - `retry`: the lock is not free (another relay waits, or a transaction that enqueued without a NOTIFY is
 *   still open), those transactions have not all ended yet, or there is no LISTEN connection: try again
 *   after a short, doubling wait.
 */
type WaitState = 'waiting' | 'claim' | 'retry';

/** What the wake-up protocol runs on: the relay's pool and `listen` option, and the outbox's statements for it. */
interface WakeupSetup {
  readonly pool: pg.Pool;
  readonly listen: ListenOption;
  readonly sql: Pick<OutboxStatements, 'listen' | 'relayWait' | 'relayBusy' | 'horizonPassed'>;
}

/** The waiting lock this relay holds on its LISTEN connection, and whether its horizon has passed. */
interface WaitLock {
  readonly horizon: string;
  passed: boolean;
}

/** One relay's LISTEN connection, waiting lock and sleeps. */
export class RelayWakeup {
  private stopped = false;
  private woken = false;
  /** NOTIFYs received so far; a loop compares it with the count it last saw. */
  private received = 0;
  private readonly sleepers = new Set<(cause: RelayWakeCause) => void>();
  private listener: pg.Client | undefined;
  /** Set once the LISTEN connection turned out to go through a pooler: the relay polls from then on. */
  private listenRefused = false;
  /** The waiting lock while this relay holds it on `listener`. */
  private waitLock: WaitLock | undefined;
  /** Queries on the LISTEN connection about the waiting lock, one at a time. */
  private lockQueries: Promise<unknown> = Promise.resolve();

  constructor(
    private readonly setup: WakeupSetup,
    /** Told about every failure of the protocol; none of them stops the relay, which polls meanwhile. */
    private readonly onError: (error: unknown) => void,
  ) {}

  /** NOTIFYs received so far. */
  get notifications(): number {
    return this.received;
  }

  /** Called as a claim starts: a NOTIFY arriving from now on makes the next sleep return at once. */
  clearWoken(): void {
    this.woken = false;
  }

  /** Lets sleeps last again after {@link RelayWakeup.stop} (the relay was started again). */
  resume(): void {
    this.stopped = false;
  }

  /** Ends every sleep now and every later one at once, until {@link RelayWakeup.resume}. */
  stop(): void {
    this.stopped = true;
    this.wakeAll('stop');
  }

  /**
   * Gets this relay ready to sleep until a NOTIFY (migration `0007_outbox_waiting` explains the protocol):
   * takes the waiting lock, whose horizon is the xmax of a snapshot taken once the lock was held, and
   * reports `claim` once every transaction below the horizon has ended, as their rows may not have been
   * claimable before. Never rejects: a failure is reported and answers `retry`.
   */
  prepareToWait(): Promise<WaitState> {
    const { sql } = this.setup;
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
  stopWaiting(): void {
    if (this.waitLock === undefined) return;
    void this.onListener(undefined, async (client) => {
      if (this.waitLock === undefined) return;
      this.waitLock = undefined;
      await client.query(this.setup.sql.relayBusy);
    });
  }

  /**
   * Waits for a NOTIFY, `ms` milliseconds, a lost LISTEN connection or `stop()`, whichever comes first,
   * and answers which it was (`poll` when the time ran out).
   */
  async idle(ms: number): Promise<RelayWakeCause> {
    if (this.stopped) return 'stop';
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

  /**
   * Opens the LISTEN connection if there is none. A lost connection is dropped and reopened on the next
   * turn; polling covers the gap.
   *
   * @throws the driver's error when the connection or LISTEN fails, or an Error naming the pooler when the
   *   connection goes through one in transaction mode (once: the relay polls from then on)
   */
  async ensureListener(): Promise<void> {
    if (this.listener !== undefined || this.setup.listen === false || this.listenRefused) return;
    const client = listenClient(this.setup.pool, this.setup.listen);
    this.watch(client);
    this.listener = client;
    try {
      await client.connect();
      const problem = await poolerProblem(client, 'the outbox relay');
      if (problem !== undefined) {
        // Reported once: the pooler will not go away, and polling carries on meanwhile.
        this.listenRefused = true;
        throw new Error(problem);
      }
      await client.query(this.setup.sql.listen);
    } catch (error) {
      this.listener = undefined;
      await client.end().catch(() => undefined);
      throw error;
    }
  }

  /** Closes the LISTEN connection, which gives the waiting lock back with it. */
  async closeListener(): Promise<void> {
    const client = this.listener;
    this.listener = undefined;
    this.waitLock = undefined;
    if (client !== undefined) await client.end().catch(() => undefined);
  }

  /** Hears `client`'s NOTIFYs, and drops it when it is lost. */
  private watch(client: pg.Client): void {
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
      this.received++;
      this.woken = true;
      this.wakeAll('notification');
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
        this.onError(error);
        return fallback;
      }
    });
    this.lockQueries = result;
    return result;
  }

  private wakeAll(cause: RelayWakeCause): void {
    for (const wake of this.sleepers) wake(cause);
  }
}
