/**
 * The lease keep-alive of plain mode: while the work of a won claim runs in this process, its lease is
 * renewed (`IdempotencyStore.renew`, fenced by the lease token) so a lease of a few seconds can cover work
 * that takes minutes, and only a holder that stopped (crashed, frozen, cut off) loses its lease, `leaseMs`
 * after its last renewal.
 *
 * One timer serves every lease the engine holds: it ticks every third of `leaseMs` while any lease is
 * held and stops when none is. A lease is renewed from the second tick it sees on, so a request shorter
 * than a third of the lease costs two `Set` operations and never a store call, a timer or a promise; a
 * longer one is renewed no later than two thirds of a lease after its claim and every third after that.
 *
 * @module
 */
import type { ReceiverObserver } from './observer.js';
import type { Claim } from './record.js';
import type { IdempotencyStore } from './store.js';

/** One lease held by the work of one request. */
export class HeldLease {
  /** Set by the first tick that sees the lease; renewals start at the next one. */
  seen = false;
  /** A renewal is under way (the next tick does not start another). */
  renewing = false;
  /** A renewal answered `undefined`: the lease was taken over (or the record completed, released, reaped). */
  lost = false;

  constructor(readonly claim: Claim) {}
}

/** The engine's keep-alive: holds leases and renews them every third of `leaseMs` milliseconds. */
export class KeepAlive {
  private readonly held = new Set<HeldLease>();
  private timer: NodeJS.Timeout | undefined;
  private readonly periodMs: number;

  constructor(
    private readonly store: IdempotencyStore,
    private readonly leaseMs: number,
    private readonly observer: ReceiverObserver,
  ) {
    this.periodMs = Math.max(1, Math.floor(leaseMs / 3));
  }

  /** Starts keeping `claim`'s lease alive; {@link KeepAlive.drop} ends it. */
  hold(claim: Claim): HeldLease {
    const lease = new HeldLease(claim);
    this.held.add(lease);
    if (this.timer === undefined) {
      this.timer = setInterval(this.tick, this.periodMs);
      // Leases kept alive never keep the process alive.
      this.timer.unref();
    }
    return lease;
  }

  /** Stops renewing `lease` (its work ended and its claim was completed or released). */
  drop(lease: HeldLease): void {
    this.held.delete(lease);
  }

  private readonly tick = (): void => {
    if (this.held.size === 0) {
      clearInterval(this.timer);
      this.timer = undefined;
      return;
    }
    for (const lease of this.held) {
      if (!lease.seen) lease.seen = true;
      else if (!lease.renewing) this.renew(lease);
    }
  };

  private renew(lease: HeldLease): void {
    lease.renewing = true;
    const observation = this.observer.storeCall('renew');
    let pending: Promise<Claim | undefined>;
    try {
      pending = this.store.renew(lease.claim, this.leaseMs);
    } catch (error) {
      pending = Promise.reject(error instanceof Error ? error : new Error(String(error)));
    }
    pending.then(
      (renewed) => {
        lease.renewing = false;
        observation.end(renewed !== undefined);
        if (renewed !== undefined) return;
        // Fenced off: nothing more to keep alive; the completion will be refused (LeaseLostError).
        lease.lost = true;
        this.held.delete(lease);
      },
      (error: unknown) => {
        // A store error: the lease stands as it was; the next tick tries again, well before it ends.
        lease.renewing = false;
        observation.fail(error);
      },
    );
  }
}
