/**
 * The SQLite store (`better-sqlite3`): durable records in one file shared by any number of processes, and
 * transactional mode, where the claim, the caller's business writes and the saved response commit together.
 *
 * @module
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import type { Database } from 'better-sqlite3';
import type { Clock } from '../../core/clock.js';
import { LeaseLostError, StoreClosedError, StoreMisuseError } from '../../core/errors.js';
import type { Claim, IdempotencyRecord, StoredResponse } from '../../core/record.js';
import type { ClaimedTransaction, ClaimInput, ClaimResult, RecordQuery, TransactionBounds, TransactionView } from '../../core/store.js';
import { settled } from '../../core/settled.js';
import { requireDurationMs, requireLimit, requireNonNegativeMs } from '../../core/validate.js';
import { asError, attempt } from './attempt.js';
import type { ClaimFound, SqliteClaim } from './claim.js';
import { GroupCommit } from './group-commit.js';
import { guardDatabase } from './guard.js';
import { Mutex } from './mutex.js';
import { Waiters } from './waiters.js';
import { toRecord, type Statements } from './statements.js';
import type { SqliteStore as SqliteStoreContract } from './store.js';

/** Groups of one write in a row after which writes stop waiting for groups (see `SqliteStore.singleGroups`). */
const SINGLE_GROUPS = 8;
/** While writes do not wait for groups, one in this many still does. */
const PROBE_EVERY = 64;

/** A record that changed (completed or released), to announce to in-process waiters. */
interface Change {
  readonly scope: string;
  readonly key: string;
}

/** What a completion did: the change to announce, `true` for a completion run again, `undefined` when fenced off. */
type Completion = Change | true | undefined;

/** One open transaction: whether its view may still be used, and the changes to announce after COMMIT. */
interface OpenTransaction {
  open: boolean;
  readonly changes: Change[];
}

// Hot path: docs/hot-path.md#sqlite-statements
/**
 * The transactions open in the current async context, per store. One instance for the module: every
 * `AsyncLocalStorage` instance, once used, costs a step on each promise the process creates for as long as
 * it lives, so one per store made a process that opens many stores slower with each (seen as a simulation
 * whose histories took 20 times longer after 3,000 stores).
 */
const openTransactions = new AsyncLocalStorage<ReadonlyMap<SqliteStore, OpenTransaction>>();

/** See {@link createSqliteStore} in `store.ts`, which validates the options. */
export class SqliteStore implements SqliteStoreContract {
  private readonly mutex = new Mutex();
  private readonly commits: GroupCommit;
  private readonly waiters = new Waiters();
  private closing = false;
  /** Transactions of this store open now; while there are none, no call can come from inside one. */
  private transactions = 0;
  /**
   * Claims this store won and has not yet seen completed or released: the requests in flight in this
   * process. With another one in flight, or another claim written in the same turn of the event loop, a
   * write waits for the next group commit (see {@link GroupCommit}); alone, it runs at once. Only a
   * heuristic: a claim never completed nor released leaves the count high, which makes writes wait for
   * the check phase, nothing more.
   */
  private inFlight = 0;
  /** Claims written in this turn of the event loop (reset in its check phase). */
  private turnClaims = 0;
  private readonly nextTurn = (): void => {
    this.turnClaims = 0;
  };
  /**
   * Groups in a row that held one write: the writes that waited for them had no company (a caller that
   * claims and completes one key after another in one turn). From {@link SINGLE_GROUPS} on, writes run at
   * once again, but for one in {@link PROBE_EVERY} that still waits, to see whether groups form again.
   */
  private singleGroups = 0;
  private probe = 0;
  readonly kind = 'sqlite';

  constructor(
    readonly database: Database,
    private readonly owned: boolean,
    private readonly sql: Statements,
    private readonly claimRow: SqliteClaim,
    private readonly clock: Clock,
    private readonly generateId: () => string,
  ) {
    this.commits = new GroupCommit(
      database,
      this.mutex,
      (size) => {
        this.singleGroups = size === 1 ? this.singleGroups + 1 : 0;
      },
    );
  }

  claim(input: ClaimInput): Promise<ClaimResult> {
    if (this.closing) return Promise.reject(new StoreClosedError('SQLite'));
    const leaseToken = input.leaseToken ?? this.generateId();
    /** What a read made ahead found standing in no one's way; `undefined` when none was made. */
    let found: ClaimFound | undefined;
    // Hot path: docs/hot-path.md#sqlite-replay-in-the-same-turn
    if (!this.commits.open && this.mutex.idle) {
      // Nothing queued and no transaction open: read now, and answer a record that stands without waiting
      // for the write lock or a group, carried by the promise (`settled`) so the receiver replays it in this
      // turn. Not while a group gathers: a read then would cost each new key of a busy store a missed SELECT.
      let read;
      try {
        read = this.claimRow.read(input, this.clock.now(), leaseToken);
      } catch (error) {
        return Promise.reject(asError(error));
      }
      if (read.answer !== undefined) return settled(read.answer);
      found = read.found;
    }
    return this.write(
      (grouped) => {
        const now = this.clock.now();
        // Under the group's write lock, a claim no read looked at tries the insert first: a new key then
        // costs one statement, a standing record a failed insert before its read.
        if (grouped) return this.claimRow.locked(input, now, leaseToken, found ?? 'absent');
        if (found !== undefined) return this.claimRow.write(input, now, leaseToken, found);
        const read = this.claimRow.read(input, now, leaseToken);
        return read.answer ?? this.claimRow.write(input, now, leaseToken, read.found);
      },
      this.counted,
      this.claimsAlone(),
    );
  }

  /**
   * Every claim of a batch in one write transaction (`BEGIN IMMEDIATE`), each by the locked claim (the
   * read and the write see one state): one commit for the batch instead of one per key.
   */
  claimMany(inputs: readonly ClaimInput[]): Promise<ClaimResult[]> {
    if (this.closing) return Promise.reject(new StoreClosedError('SQLite'));
    return this.misused() ?? this.inTransaction((): Promise<ClaimResult[]> => {
      const now = this.clock.now();
      return Promise.resolve(inputs.map((input) => this.claimRow.locked(input, now, input.leaseToken ?? this.generateId(), undefined)));
    }).then((results) => results.map(this.counted));
  }

  complete(claim: Claim, response: StoredResponse, retentionMs: number): Promise<boolean> {
    return this.write(() => this.completeNow(claim, response, retentionMs), this.completed, this.claimDone());
  }

  renew(claim: Claim, leaseMs: number): Promise<Claim | undefined> {
    return this.write(() => this.renewNow(claim, leaseMs), undefined, this.alone(this.inFlight > 1));
  }

  release(claim: Claim): Promise<boolean> {
    return this.write(() => this.releaseNow(claim), this.announced, this.claimDone());
  }

  get(scope: string, key: string): Promise<IdempotencyRecord | undefined> {
    return this.exclusive(() => this.getNow(scope, key));
  }

  reap(limit: number): Promise<number> {
    return this.write(() => this.reapNow(limit), undefined, this.alone(this.inFlight > 0));
  }

  checkpoint(claim: Claim, recoveryPoint: string, leaseMs: number): Promise<Claim | undefined> {
    return this.write(() => this.checkpointNow(claim, recoveryPoint, leaseMs), undefined, this.alone(this.inFlight > 1));
  }

  listAbandoned(limit: number): Promise<IdempotencyRecord[]> {
    return this.exclusive(() => this.listAbandonedNow(limit));
  }

  ping(): Promise<void> {
    return this.exclusive(() => {
      this.database.prepare('SELECT 1').get();
    });
  }

  countExpiredLeases(limit: number): Promise<number> {
    return this.exclusive(() => this.sql.countExpiredLeases.get({ now: this.clock.now(), limit: requireLimit('countExpiredLeases', limit) })?.n ?? 0);
  }

  listRecords(query: RecordQuery): Promise<IdempotencyRecord[]> {
    return this.exclusive(() => {
      requireLimit('listRecords', query.limit);
      const params = {
        state: query.state ?? null,
        scope: query.scope ?? null,
        prefix: query.keyPrefix ?? null,
        afterScope: query.after?.scope ?? null,
        afterKey: query.after?.key ?? null,
        limit: query.limit,
      };
      return this.sql.listRecords(params).map(toRecord);
    });
  }

  async waitFor(scope: string, key: string, timeoutMs: number): Promise<IdempotencyRecord | undefined> {
    const initial = await this.get(scope, key);
    if (initial?.state !== 'in_progress') return initial;
    return this.waiters.wait(initial, timeoutMs, () => this.get(scope, key));
  }

  transaction<R>(fn: (tx: Database, store: TransactionView) => Promise<R>): Promise<R> {
    return this.inTransaction((view) => fn(this.database, view));
  }

  claimTransaction<R>(
    input: ClaimInput,
    fn: (tx: Database, store: TransactionView, claim: Claim) => Promise<R>,
    bounds?: TransactionBounds,
  ): Promise<ClaimedTransaction<R>> {
    // The claim commits with the transaction, which holds the write lock: no one sees it, let alone takes
    // it over, before COMMIT, so there is no lease to keep alive; only the transaction's length is bounded.
    const boundMs = bounds === undefined ? input.leaseMs : requireDurationMs('maxExecutionMs', bounds.maxExecutionMs, 'claimTransaction');
    return this.inTransaction(async (view, transaction): Promise<ClaimedTransaction<R>> => {
      const result = this.claimRow.locked(input, this.clock.now(), input.leaseToken ?? this.generateId(), undefined);
      if (!result.acquired) return result;
      const won = result.claim;
      const handle = guardDatabase(this.database);
      let timer: NodeJS.Timeout | undefined;
      const leaseEnds = new Promise<never>((_resolve, reject) => {
        timer = setTimeout(() => {
          // The handler is not running now (the driver is synchronous): no statement is half done. From here
          // on its handle and view refuse, and inTransaction rolls back and hands the connection on.
          transaction.open = false;
          handle.revoke();
          reject(new LeaseLostError(won.scope, won.key, bounds === undefined ? 'taken_over' : 'deadline'));
        }, boundMs);
      });
      try {
        const value = await Promise.race([fn(handle.database, view, won), leaseEnds]);
        return { acquired: true, claim: won, value };
      } finally {
        clearTimeout(timer);
      }
    });
  }

  /** Runs `body` under `BEGIN IMMEDIATE`, holding the mutex; COMMIT when it resolves, ROLLBACK when it rejects. */
  private inTransaction<R>(body: (view: TransactionView, transaction: OpenTransaction) => Promise<R>): Promise<R> {
    return this.queued(async () => {
      const transaction: OpenTransaction = { open: true, changes: [] };
      this.database.exec('BEGIN IMMEDIATE');
      this.transactions++;
      let result: R;
      try {
        const open = new Map(openTransactions.getStore()).set(this, transaction);
        result = await openTransactions.run(open, () => body(this.view(transaction), transaction));
        if (!this.database.inTransaction) {
          throw new StoreMisuseError('retrysafe: the transaction was ended inside fn; let transaction() commit or roll back');
        }
        this.database.exec('COMMIT');
      } catch (error) {
        transaction.open = false;
        this.transactions--;
        if (this.database.inTransaction) this.database.exec('ROLLBACK');
        throw error;
      }
      transaction.open = false;
      this.transactions--;
      for (const change of transaction.changes) this.notify(change);
      return result;
    });
  }

  async close(): Promise<void> {
    if (this.closing) return;
    this.closing = true;
    await this.mutex.run(() => {
      if (this.owned) this.database.close();
    });
    this.waiters.wakeAll();
  }

  /** Runs the synchronous read `task` alone on the connection, outside any transaction but a group's. */
  private exclusive<T>(task: () => T): Promise<T> {
    if (this.closing) return Promise.reject(new StoreClosedError('SQLite'));
    // An idle mutex means no transaction is open (one holds the mutex until it ends) and nothing is
    // queued, so a synchronous statement runs now, in order, without a queue hop or a context lookup.
    if (!this.commits.open && this.mutex.idle) return attempt(task);
    // A gathering group is next in line: joining it keeps the order operations were called in.
    if (this.commits.open) return this.misused() ?? this.commits.add(task);
    return this.queued(task);
  }

  /**
   * Runs the synchronous write `task`: at once when it is `alone` (no other request busy here) and the
   * connection is idle, otherwise in the next group commit (`grouped` is then true: the group's
   * transaction holds the write lock). Settles with `committed(value)` (the value itself without it),
   * called once it committed.
   */
  private write<T, R = T>(task: (grouped: boolean) => T, committed: ((value: T) => R) | undefined, alone: boolean): Promise<R> {
    if (this.closing) return Promise.reject(new StoreClosedError('SQLite'));
    if (alone && !this.commits.open && this.mutex.idle) {
      return attempt(() => (committed === undefined ? (task(false) as unknown as R) : committed(task(false))));
    }
    return this.misused() ?? this.commits.add(task, committed);
  }

  /** Runs `task` through the mutex, after every task queued before it. */
  private queued<T>(task: () => T | Promise<T>): Promise<T> {
    if (this.closing) return Promise.reject(new StoreClosedError('SQLite'));
    return this.misused() ?? this.mutex.run(task);
  }

  /** A rejection when called from inside this store's own open transaction: queuing behind it would wait forever. */
  private misused(): Promise<never> | undefined {
    if (this.transactions === 0 || !openTransactions.getStore()?.get(this)?.open) return undefined;
    return Promise.reject(new StoreMisuseError('retrysafe: the SQLite store was called inside its own transaction; use the store passed to fn'));
  }

  /** Counts a won claim as a request in flight. */
  private readonly counted = (result: ClaimResult): ClaimResult => {
    if (result.acquired) this.inFlight++;
    return result;
  };

  /** Whether a claim written now runs alone: no other request in flight, no other claim this turn (see {@link alone}). */
  private claimsAlone(): boolean {
    if (this.turnClaims++ === 0) setImmediate(this.nextTurn);
    return this.alone(this.inFlight > 0 || this.turnClaims > 1);
  }

  /**
   * A request in flight is done with its claim (completing or releasing it); returns whether its write
   * runs alone (no other request in flight: see {@link alone}).
   */
  private claimDone(): boolean {
    const others = this.inFlight > 1;
    if (this.inFlight > 0) this.inFlight--;
    return this.alone(others);
  }

  /** Whether a write runs at once: nobody else is `busy`, or the recent groups stayed single (but for a probe now and then). */
  private alone(busy: boolean): boolean {
    if (!busy) return true;
    if (this.singleGroups < SINGLE_GROUPS) return false;
    this.probe = (this.probe + 1) % PROBE_EVERY;
    return this.probe !== 0;
  }

  /** Tells in-process waiters about a committed change; reports whether there was one. */
  private readonly announced = (change: Change | undefined): boolean => {
    if (change === undefined) return false;
    this.notify(change);
    return true;
  };

  /** A completion's answer once committed: `true` for a change (announced) or a completion run again. */
  private readonly completed = (outcome: Completion): boolean => (outcome === true ? true : this.announced(outcome));

  /** The store as seen inside an open transaction: no mutex (it is held), no notifications until COMMIT. */
  private view(transaction: OpenTransaction): TransactionView {
    const inside = <T>(task: () => T): Promise<T> => {
      if (!transaction.open) return Promise.reject(new StoreMisuseError('retrysafe: the transaction has already ended'));
      return attempt(task);
    };
    const defer = (change: Completion): boolean => {
      if (change === true) return true;
      if (change) transaction.changes.push(change);
      return change !== undefined;
    };
    return {
      complete: (claim, response, retentionMs) => inside(() => defer(this.completeNow(claim, response, retentionMs))),
      release: (claim) => inside(() => defer(this.releaseNow(claim))),
      checkpoint: (claim, recoveryPoint, leaseMs) => inside(() => this.checkpointNow(claim, recoveryPoint, leaseMs)),
    };
  }

  /**
   * Completes the caller's record: the change to announce, `true` when it was already completed under the
   * caller's token (a completion run again: nothing changes), `undefined` when fenced off.
   */
  private completeNow(claim: Claim, response: StoredResponse, retentionMs: number): Completion {
    const now = this.clock.now();
    const completed = this.sql.complete({
      scope: claim.scope,
      key: claim.key,
      token: claim.leaseToken,
      status: response.status,
      headers: JSON.stringify(response.headers),
      body: Buffer.from(response.body.buffer, response.body.byteOffset, response.body.byteLength),
      now,
      expiresAt: now + retentionMs,
    });
    if (completed) return { scope: claim.scope, key: claim.key };
    return this.sql.completedBy.get(claim.scope, claim.key, claim.leaseToken) === undefined ? undefined : true;
  }

  private renewNow(claim: Claim, leaseMs: number): Claim | undefined {
    requireDurationMs('leaseMs', leaseMs, 'renew');
    const leaseExpiresAt = this.clock.now() + leaseMs;
    const { changes } = this.sql.renew.run({ scope: claim.scope, key: claim.key, token: claim.leaseToken, leaseExpiresAt });
    return changes > 0 ? { ...claim, leaseExpiresAt } : undefined;
  }

  private releaseNow(claim: Claim): Change | undefined {
    const { changes } = this.sql.release.run(claim.scope, claim.key, claim.leaseToken);
    return changes > 0 ? { scope: claim.scope, key: claim.key } : undefined;
  }

  private getNow(scope: string, key: string): IdempotencyRecord | undefined {
    const row = this.sql.get(scope, key);
    return row ? toRecord(row) : undefined;
  }

  private reapNow(limit: number): number {
    requireLimit('reap', limit);
    return this.sql.reap.run({ now: this.clock.now(), limit }).changes;
  }

  private checkpointNow(claim: Claim, recoveryPoint: string, leaseMs: number): Claim | undefined {
    requireNonNegativeMs('leaseMs', leaseMs, 'checkpoint');
    const leaseExpiresAt = this.clock.now() + leaseMs;
    const { changes } = this.sql.checkpoint.run({
      scope: claim.scope,
      key: claim.key,
      token: claim.leaseToken,
      point: recoveryPoint,
      leaseExpiresAt,
    });
    return changes > 0 ? { ...claim, leaseExpiresAt, recoveryPoint } : undefined;
  }

  private listAbandonedNow(limit: number): IdempotencyRecord[] {
    requireLimit('listAbandoned', limit);
    return this.sql.listAbandoned({ now: this.clock.now(), limit }).map(toRecord);
  }

  /**
   * Wakes the waiters on the changed record with the record as it now stands (`undefined` once released),
   * read only when someone waits. Runs while this store holds the connection: right after the change, or
   * after the COMMIT of the transaction that made it.
   */
  private notify(change: Change): void {
    if (!this.waiters.waiting(change.scope, change.key)) return;
    let record: IdempotencyRecord | undefined;
    try {
      record = this.getNow(change.scope, change.key);
    } catch {
      // The change is made; the waiters' poll reads it.
      return;
    }
    this.waiters.wake(change.scope, change.key, record);
  }
}
