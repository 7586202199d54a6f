/**
 * The lease of one PostgreSQL transaction in transactional mode: when the transaction must end, and the
 * keep-alive that moves that end while the handler runs. The claim committed apart from the transaction,
 * so a duplicate sees it and, once its lease ends, may take it over: the transaction must not outlive it.
 *
 * @module
 */
import { LeaseLostError, type LeaseLostReason } from '../../core/errors.js';
import type { Claim } from '../../core/record.js';

/** What the lease renews through: the store's fenced `renew`, on the pool (committed at once). */
interface Renewer {
  renew(claim: Claim, leaseMs: number): Promise<Claim | undefined>;
}

/**
 * Counts from the won claim, in this process's monotonic clock (`performance.now()`). Without
 * `maxExecutionMs` the transaction ends with the claim's first lease, unrenewed. With it, the lease is
 * renewed every third of `leaseMs` once the transaction has begun, and the end is the earlier of
 * `leaseMs` after the last renewal sent and `maxExecutionMs` after the claim. A renewal is timed from
 * when it was sent, so the end here is never later than the lease in the database.
 */
export class TransactionLease {
  /** Rejects with {@link TransactionLease.lost} when the lease is lost while the handler runs. */
  readonly ended: Promise<never>;
  /** The error the transaction ended with, once the lease was lost. */
  lost: LeaseLostError | undefined;
  private reject!: (error: LeaseLostError) => void;
  private readonly wonAt = performance.now();
  private leaseEnd: number;
  private readonly hardEnd: number | undefined;
  private deadline: NodeJS.Timeout | undefined;
  private renewals: NodeJS.Timeout | undefined;
  private stopped = false;

  constructor(
    private readonly store: Renewer | undefined,
    private readonly claim: Claim,
    private readonly leaseMs: number,
    maxExecutionMs: number | undefined,
  ) {
    this.hardEnd = maxExecutionMs === undefined ? undefined : this.wonAt + maxExecutionMs;
    this.leaseEnd = store === undefined && this.hardEnd !== undefined ? Number.POSITIVE_INFINITY : this.wonAt + leaseMs;
    this.ended = new Promise<never>((_resolve, reject) => {
      this.reject = reject;
    });
    // Raced only once the transaction began; a lease lost before that is answered by `lostBefore`.
    this.ended.catch(() => undefined);
  }

  /** The error to answer with when the lease (or the bound) already ended, before `BEGIN`; else `undefined`. */
  lostBefore(): LeaseLostError | undefined {
    const now = performance.now();
    return now >= this.end() ? new LeaseLostError(this.claim.scope, this.claim.key, this.reasonAt(now)) : undefined;
  }

  /** The server's bound on the transaction (`statement_timeout` and the idle timeout), in whole milliseconds. */
  serverBoundMs(): number {
    return Math.max(1, Math.ceil((this.hardEnd ?? this.leaseEnd) - performance.now()));
  }

  /** The transaction began: arms the deadline and, with `maxExecutionMs` and a renewer, the keep-alive. */
  start(): void {
    this.arm();
    if (this.hardEnd === undefined || this.store === undefined) return;
    this.renewals = setInterval(() => this.renew(), Math.max(1, Math.floor(this.leaseMs / 3)));
  }

  /** Stops the keep-alive and the deadline (the transaction ended). */
  stop(): void {
    this.stopped = true;
    clearTimeout(this.deadline);
    clearInterval(this.renewals);
  }

  private end(): number {
    return this.hardEnd === undefined ? this.leaseEnd : Math.min(this.leaseEnd, this.hardEnd);
  }

  private reasonAt(now: number): LeaseLostReason {
    return this.hardEnd !== undefined && now >= this.hardEnd ? 'deadline' : 'taken_over';
  }

  private arm(): void {
    clearTimeout(this.deadline);
    // Decided when armed: a timer may fire a fraction of a millisecond before the end it was set for.
    const reason: LeaseLostReason = this.hardEnd !== undefined && this.hardEnd <= this.leaseEnd ? 'deadline' : 'taken_over';
    this.deadline = setTimeout(() => this.lose(reason), Math.max(0, this.end() - performance.now()));
  }

  private renew(): void {
    const sentAt = performance.now();
    this.store?.renew(this.claim, this.leaseMs).then(
      (renewed) => {
        if (this.stopped) return;
        if (renewed === undefined) {
          this.lose('taken_over');
          return;
        }
        this.leaseEnd = Math.max(this.leaseEnd, sentAt + this.leaseMs);
        this.arm();
      },
      // A failed renewal leaves the end where it was; the next one, a third of a lease later, may succeed.
      () => undefined,
    );
  }

  private lose(reason: LeaseLostReason): void {
    if (this.lost !== undefined || this.stopped) return;
    this.lost = new LeaseLostError(this.claim.scope, this.claim.key, reason);
    clearInterval(this.renewals);
    this.reject(this.lost);
  }
}
