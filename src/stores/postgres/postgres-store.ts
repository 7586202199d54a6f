/**
 * The PostgreSQL store: records in one table, the claim as one statement, `complete`/`release` fenced by
 * the lease token, completions announced with NOTIFY, and transactional mode on a pooled connection.
 *
 * @module
 */
import type pg from 'pg';
import type { Clock } from '../../core/clock.js';
import { StoreClosedError, type LeaseLostError } from '../../core/errors.js';
import type { Claim, IdempotencyRecord, StoredResponse } from '../../core/record.js';
import type { ClaimedTransaction, ClaimInput, ClaimResult, RecordQuery, TransactionBounds, TransactionView } from '../../core/store.js';
import { requireDurationMs, requireLimit, requireNonNegativeMs } from '../../core/validate.js';
import { claimOn } from './claim.js';
import { claimManyOn, claimManyStatement } from './claim-many.js';
import { encodeToken } from './codec.js';
import { listenClient, type ListenOption } from './listen-session.js';
import { CompletionListener, topicOf } from './listener.js';
import { decideLocked, heldRecord, lockedClaimStatements, lockingBegin, lockNumberOf, type LockedClaimStatements, type LockedReadRow } from './locked-claim.js';
import { LockedView } from './locked-view.js';
import { toKeyedRecord, toRecord, type KeyedRecordRow, type RecordRow } from './rows.js';
import type { SchemaNames } from './schema.js';
import { run, type Queryable, type Statement } from './statement.js';
import { boundedBegin, statements, type Statements } from './statements.js';
import type { PostgresStore as PostgresStoreContract } from './store.js';
import { commit, onPoolClient } from './transaction.js';
import { TransactionLease } from './transaction-lease.js';

/** How often `waitFor` reads the record when the store has no LISTEN connection (`listen: false`), in milliseconds. */
export const WAIT_POLL_MS = 100;

/** Where transactional mode claims: committed apart before the transaction (`claim.ts`), or locked inside it (`locked-claim.ts`). */
export type TransactionalClaim = 'apart' | 'locked';

/** A locked claim that found the key's record standing, or its lock held: thrown to roll the transaction back; the record answers. */
class Standing extends Error {
  constructor(readonly record: IdempotencyRecord) {
    super('retrysafe: the key is held or its record stands');
  }
}

/** A locked claim that found a record to take over: thrown to roll the transaction back; the claim is then made apart. */
class ClaimApart extends Error {}

/** See {@link createPostgresStore} in `store.ts`, which validates the options. */
export class PostgresStore implements PostgresStoreContract {
  readonly kind = 'postgres';
  readonly schema: string;
  private readonly sql: Statements;
  /** The batch claim (`claim-many.ts`). */
  private readonly claimManySql: Statement;
  /** The locked claim's statements, when transactional mode claims inside the transaction. */
  private readonly lockedSql: LockedClaimStatements | undefined;
  private readonly listener: CompletionListener | undefined;
  private readonly pending = new Set<Promise<unknown>>();
  private closed = false;

  constructor(
    readonly pool: pg.Pool,
    private readonly ownsPool: boolean,
    names: SchemaNames,
    private readonly clock: Clock | undefined,
    private readonly generateId: () => string,
    prepared: boolean,
    listen: ListenOption,
    transactionalClaim: TransactionalClaim,
  ) {
    this.schema = names.name;
    this.sql = statements(names, prepared);
    this.claimManySql = claimManyStatement(names.quoted, prepared);
    this.lockedSql = transactionalClaim === 'locked' ? lockedClaimStatements(names.quoted, prepared) : undefined;
    this.listener = listen === false ? undefined : new CompletionListener(() => listenClient(pool, listen), this.sql.listen);
  }

  claim(input: ClaimInput): Promise<ClaimResult> {
    return claimOn(this.pool, this.sql, input, this.now(), input.leaseToken ?? this.generateId());
  }

  /** The whole batch in one statement over arrays (`claim-many.ts`), one round trip. */
  claimMany(inputs: readonly ClaimInput[]): Promise<ClaimResult[]> {
    return claimManyOn(this.pool, this.claimManySql, inputs, this.now(), inputs.map((input) => input.leaseToken ?? this.generateId()));
  }

  complete(claim: Claim, response: StoredResponse, retentionMs: number): Promise<boolean> {
    return this.completeOn(this.pool, claim, response, retentionMs);
  }

  /** The fenced completion; when it changed nothing, whether it had already been made under this lease token. */
  async completeOn(db: Queryable, claim: Claim, response: StoredResponse, retentionMs: number): Promise<boolean> {
    const token = encodeToken(claim.leaseToken);
    const result = await run(db, this.sql.complete, [
      claim.scope,
      claim.key,
      token,
      this.now(),
      retentionMs,
      response.status,
      JSON.stringify(response.headers),
      Buffer.from(response.body.buffer, response.body.byteOffset, response.body.byteLength),
      topicOf(claim.scope, claim.key),
    ]);
    if (result.rowCount === 1) return true;
    return (await run(db, this.sql.completedAgain, [claim.scope, claim.key, token])).rowCount === 1;
  }

  release(claim: Claim): Promise<boolean> {
    return this.releaseOn(this.pool, claim);
  }

  async releaseOn(db: Queryable, claim: Claim): Promise<boolean> {
    const result = await run(db, this.sql.release, [
      claim.scope,
      claim.key,
      encodeToken(claim.leaseToken),
      topicOf(claim.scope, claim.key),
    ]);
    return result.rowCount === 1;
  }

  async get(scope: string, key: string): Promise<IdempotencyRecord | undefined> {
    const result = await run<RecordRow>(this.pool, this.sql.get, [scope, key]);
    const row = result.rows[0];
    return row === undefined ? undefined : toRecord(scope, key, row);
  }

  async reap(limit: number): Promise<number> {
    requireLimit('reap', limit);
    const result = await run(this.pool, this.sql.reap, [this.now(), limit]);
    return result.rowCount ?? 0;
  }

  async renew(claim: Claim, leaseMs: number): Promise<Claim | undefined> {
    requireDurationMs('leaseMs', leaseMs, 'renew');
    const result = await run<{ leaseExpiresAt: string }>(this.pool, this.sql.renew, [
      claim.scope,
      claim.key,
      encodeToken(claim.leaseToken),
      this.now(),
      leaseMs,
    ]);
    const row = result.rows[0];
    return row === undefined ? undefined : { ...claim, leaseExpiresAt: Number(row.leaseExpiresAt) };
  }

  checkpoint(claim: Claim, recoveryPoint: string, leaseMs: number): Promise<Claim | undefined> {
    return this.checkpointOn(this.pool, claim, recoveryPoint, leaseMs);
  }

  async checkpointOn(db: Queryable, claim: Claim, recoveryPoint: string, leaseMs: number): Promise<Claim | undefined> {
    requireNonNegativeMs('leaseMs', leaseMs, 'checkpoint');
    const result = await run<{ leaseExpiresAt: string }>(db, this.sql.checkpoint, [
      claim.scope,
      claim.key,
      encodeToken(claim.leaseToken),
      recoveryPoint,
      this.now(),
      leaseMs,
    ]);
    const row = result.rows[0];
    return row === undefined ? undefined : { ...claim, leaseExpiresAt: Number(row.leaseExpiresAt), recoveryPoint };
  }

  async ping(): Promise<void> {
    await run(this.pool, this.sql.ping, []);
  }

  async countExpiredLeases(limit: number): Promise<number> {
    requireLimit('countExpiredLeases', limit);
    const result = await run<{ n: number }>(this.pool, this.sql.countExpiredLeases, [this.now(), limit]);
    return result.rows[0]?.n ?? 0;
  }

  async listAbandoned(limit: number): Promise<IdempotencyRecord[]> {
    requireLimit('listAbandoned', limit);
    const result = await run<KeyedRecordRow>(this.pool, this.sql.listAbandoned, [this.now(), limit]);
    return result.rows.map(toKeyedRecord);
  }

  async listRecords(query: RecordQuery): Promise<IdempotencyRecord[]> {
    requireLimit('listRecords', query.limit);
    const values = [query.state ?? null, query.scope ?? null, query.keyPrefix ?? null, query.after?.scope ?? null, query.after?.key ?? null, query.limit];
    const result = await run<KeyedRecordRow>(this.pool, this.sql.listRecords, values);
    return result.rows.map(toKeyedRecord);
  }

  waitFor(scope: string, key: string, timeoutMs: number): Promise<IdempotencyRecord | undefined> {
    const waiting = this.wait(scope, key, timeoutMs);
    this.pending.add(waiting);
    const forget = (): void => void this.pending.delete(waiting);
    waiting.then(forget, forget);
    return waiting;
  }

  /**
   * Claims on the pool, committed on its own; only a won claim opens the transaction, bounded by the lease
   * (see {@link PostgresStore.claimTransaction}). A transaction that cannot start releases the claim.
   * With locked claims, the claim is the transaction's first statement instead ({@link PostgresStore.claimLocked}),
   * and only a record to take over is claimed apart.
   */
  async claimTransaction<R>(
    input: ClaimInput,
    fn: (tx: pg.PoolClient, store: TransactionView, claim: Claim) => Promise<R>,
    bounds?: TransactionBounds,
  ): Promise<ClaimedTransaction<R>> {
    if (this.lockedSql !== undefined) {
      const locked = await this.claimLocked(this.lockedSql, input, fn, bounds);
      if (locked !== undefined) return locked;
    }
    const result = await this.claim(input);
    if (!result.acquired) return result;
    const won = result.claim;
    const lease = new TransactionLease(this, won, input.leaseMs, bounds?.maxExecutionMs);
    let started = false;
    try {
      const value = await this.transact((tx, view) => {
        started = true;
        return fn(tx, view, won);
      }, lease);
      return { acquired: true, claim: won, value };
    } catch (error) {
      // No pooled connection in time, BEGIN failed, or the lease ended before BEGIN: fn never ran, and
      // the claim would otherwise hold the key for a whole lease after a 503.
      if (!started) await this.releaseUnstarted(won, input.leaseMs);
      throw error;
    } finally {
      lease.stop();
    }
  }

  transaction<R>(fn: (tx: pg.PoolClient, store: TransactionView) => Promise<R>): Promise<R> {
    return this.transact(fn, undefined);
  }

  /**
   * The locked claim (`locked-claim.ts`): `BEGIN` with the key's advisory lock, the record read after it,
   * and on a new key `fn` with a {@link LockedView}, whose first write inserts the record. The transaction
   * ends by `bounds.maxExecutionMs` (else `input.leaseMs`), with no lease to renew. `undefined` when the
   * record is to be taken over: the caller then claims apart.
   */
  private async claimLocked<R>(
    sql: LockedClaimStatements,
    input: ClaimInput,
    fn: (tx: pg.PoolClient, store: TransactionView, claim: Claim) => Promise<R>,
    bounds: TransactionBounds | undefined,
  ): Promise<ClaimedTransaction<R> | undefined> {
    const leaseToken = input.leaseToken ?? this.generateId();
    const pending = { scope: input.scope, key: input.key, fingerprint: input.fingerprint, leaseToken, leaseExpiresAt: 0, takeover: false };
    const lease = new TransactionLease(undefined, pending, input.leaseMs, bounds?.maxExecutionMs);
    try {
      return await this.transact(async (client, fenced, locked): Promise<ClaimedTransaction<R>> => {
        const row = (await run<LockedReadRow>(client, sql.read, [input.scope, input.key, this.now()])).rows[0] as LockedReadRow;
        const decision = decideLocked(input, leaseToken, row);
        if (decision.kind === 'stands') throw new Standing(decision.record);
        // The lock is held: by the key's holder, or for a moment by another request replaying its record.
        if (!locked) throw new Standing(heldRecord(input, Number(row.now)));
        if (decision.kind === 'apart') throw new ClaimApart('retrysafe: the record is to be taken over apart');
        const claim: Claim = { ...pending, leaseExpiresAt: decision.now + input.leaseMs, fencingToken: decision.fence };
        const view = new LockedView(fenced, client, sql, claim, input, { createdAt: decision.now, fence: decision.fence }, this.now());
        return { acquired: true, claim, value: await fn(client, view, claim) };
      }, lease, lockNumberOf(this.schema, input.scope, input.key));
    } catch (error) {
      if (error instanceof Standing) return { acquired: false, record: error.record };
      if (error instanceof ClaimApart) return undefined;
      throw error;
    } finally {
      lease.stop();
    }
  }

  /**
   * Releases a won claim whose transaction never started. A pool too busy to start the transaction may be
   * too busy to release at once: the release is tried again (every 25 ms, then up to every 200 ms) in the
   * background until it is answered or the lease ends (which frees the key anyway); `close` waits for it.
   */
  private async releaseUnstarted(claim: Claim, leaseMs: number): Promise<void> {
    if (await this.release(claim).then(() => true, () => false)) return;
    const until = performance.now() + leaseMs;
    const retrying = (async (): Promise<void> => {
      for (let attempt = 1; performance.now() < until && !this.closed; attempt++) {
        await new Promise((resolve) => setTimeout(resolve, Math.min(200, 25 * attempt)));
        if (await this.release(claim).then(() => true, () => false)) return;
      }
    })();
    this.pending.add(retrying);
    void retrying.finally(() => this.pending.delete(retrying));
  }

  /**
   * Runs `fn` in a transaction; with a `lease`, the transaction ends when the lease does (see `claimTransaction`).
   * With a `lockNumber`, `BEGIN` tries that advisory lock in the same round trip, and `fn` learns whether it got it.
   */
  private async transact<R>(
    fn: (tx: pg.PoolClient, store: TransactionView, locked: boolean) => Promise<R>,
    lease: TransactionLease | undefined,
    lockNumber?: string,
  ): Promise<R> {
    let expired: LeaseLostError | undefined;
    let pid: number | undefined;
    try {
      return await onPoolClient(this.pool, async (client, discard) => {
        pid = (client as pg.PoolClient & { readonly processID?: number }).processID;
        try {
          if (lease === undefined) {
            await client.query(this.sql.begin);
            const result = await fn(client, new ClientView(this, client), true);
            await commit(client, 'the transaction');
            return result;
          }
          // The connection may arrive after the lease ended, when a takeover may already be running.
          const late = lease.lostBefore();
          if (late !== undefined) throw late;
          const begin = boundedBegin(this.sql.begin, lease.serverBoundMs());
          const begun: unknown = await client.query(lockNumber === undefined ? begin : lockingBegin(begin, lockNumber));
          lease.start();
          const locked = lockNumber === undefined || (begun as pg.QueryResult<{ locked: boolean }>[]).at(-1)?.rows[0]?.locked === true;
          const result = await Promise.race([fn(client, new ClientView(this, client), locked), lease.ended]);
          await commit(client, 'the transaction');
          return result;
        } catch (error) {
          // Past the lease the handler may still hold the client and sit in a query: a ROLLBACK would queue
          // behind it, and a client handed back to the pool could carry the late handler's statements into
          // another request. The connection is destroyed instead and its backend ended, which rolls back at once.
          if (lease?.lost !== undefined && error === lease.lost) {
            expired = lease.lost;
            discard(lease.lost);
          }
          throw error;
        }
      });
    } finally {
      if (expired !== undefined && pid !== undefined) {
        await this.pool.query(this.sql.terminate, [pid]).catch(() => undefined);
      }
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    await this.listener?.close();
    await Promise.allSettled([...this.pending]);
    if (this.ownsPool) await this.pool.end();
  }

  /** The injected clock's time, or `null`: the statement then reads the server's clock. */
  private now(): number | null {
    return this.clock === undefined ? null : this.clock.now();
  }

  private async wait(scope: string, key: string, timeoutMs: number): Promise<IdempotencyRecord | undefined> {
    if (this.lockedSql !== undefined && (await this.waitedForLock(this.lockedSql, scope, key, timeoutMs))) return await this.get(scope, key);
    if (this.listener === undefined) return await this.poll(scope, key, timeoutMs);
    let wake!: () => void;
    const woken = new Promise<void>((resolve) => {
      wake = resolve;
    });
    // Subscribe, then flag the record as awaited, then read: a completion committed before the flag is
    // seen by the read; one committed after it sees the flag and notifies (migration 0006).
    const unsubscribe = await this.listener.subscribe(topicOf(scope, key), wake);
    let timer: NodeJS.Timeout | undefined;
    try {
      await run(this.pool, this.sql.markWaiting, [scope, key]);
      const current = await this.get(scope, key);
      if (current?.state !== 'in_progress') return current;
      timer = setTimeout(wake, timeoutMs);
      await woken;
      return await this.get(scope, key);
    } finally {
      clearTimeout(timer);
      unsubscribe();
    }
  }

  /**
   * Locked claims: when (scope, key) has no record (its holder, if any, writes it only at COMMIT), waits on
   * a pooled connection until no transaction holds the key's lock, for at most `timeoutMs`; `true` when it
   * did, `false` when there is a record to wait for as usual.
   */
  private async waitedForLock(sql: LockedClaimStatements, scope: string, key: string, timeoutMs: number): Promise<boolean> {
    if (this.closed) throw new StoreClosedError('PostgreSQL');
    if ((await this.get(scope, key)) !== undefined) return false;
    // lock_timeout 0 would wait for ever; the lock's holder ends by its own bound in any case.
    const values = [lockNumberOf(this.schema, scope, key), String(Math.max(1, Math.ceil(timeoutMs)))];
    await run(this.pool, sql.waitForLock, values).catch((error: unknown) => {
      // 55P03 lock_not_available: the time is up, and the record is read as it stands.
      if ((error as { code?: unknown }).code !== '55P03') throw error;
    });
    return true;
  }

  /** `waitFor` without LISTEN: reads the record every {@link WAIT_POLL_MS} until it settles, the time is up or the store closes. */
  private async poll(scope: string, key: string, timeoutMs: number): Promise<IdempotencyRecord | undefined> {
    if (this.closed) throw new StoreClosedError('PostgreSQL');
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const current = await this.get(scope, key);
      if (current?.state !== 'in_progress' || this.closed || Date.now() >= deadline) return current;
      await new Promise((resolve) => setTimeout(resolve, Math.min(WAIT_POLL_MS, deadline - Date.now())));
    }
  }
}

/**
 * The store as seen from inside one transaction: `complete`, `release` and `checkpoint` run on the
 * transaction's connection, so they commit (and NOTIFY) with the business writes.
 */
class ClientView implements TransactionView {
  constructor(
    private readonly store: PostgresStore,
    private readonly client: pg.PoolClient,
  ) {}

  complete(claim: Claim, response: StoredResponse, retentionMs: number): Promise<boolean> {
    return this.store.completeOn(this.client, claim, response, retentionMs);
  }

  release(claim: Claim): Promise<boolean> {
    return this.store.releaseOn(this.client, claim);
  }

  checkpoint(claim: Claim, recoveryPoint: string, leaseMs: number): Promise<Claim | undefined> {
    return this.store.checkpointOn(this.client, claim, recoveryPoint, leaseMs);
  }
}
