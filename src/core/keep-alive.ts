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

/** The engine's keep-alive: holds leases and renews them every third of `leaseMs` milliseconds. */
export class KeepAlive {
  /** Leases held since the last tick: not renewed before the next one. */
  private young = new Set<Claim>();
  /** Leases held for a whole tick or more: renewed on every tick. */
  private readonly old = new Set<Claim>();
  /** Leases with a renewal under way (the next tick does not start another). */
  private readonly renewing = new Set<Claim>();
  private timer: NodeJS.Timeout | undefined;
  private readonly periodMs: number;

  constructor(
    private readonly store: IdempotencyStore,
    private readonly leaseMs: number,
    private readonly observer: ReceiverObserver,
  ) {
    this.periodMs = Math.max(1, Math.floor(leaseMs / 3));
  }

  // Hot path: docs/hot-path.md#engine-store-calls
  /** Starts keeping `claim`'s lease alive; {@link KeepAlive.drop} ends it. No allocation: one `Set` add. */
  hold(claim: Claim): void {
    this.young.add(claim);
    if (this.timer === undefined) {
      this.timer = setInterval(this.tick, this.periodMs);
      // Leases kept alive never keep the process alive.
      this.timer.unref();
    }
  }

  /** Stops renewing `claim`'s lease (its work ended and its claim was completed or released). */
  drop(claim: Claim): void {
    if (!this.young.delete(claim)) this.old.delete(claim);
  }

  private readonly tick = (): void => {
    if (this.young.size === 0 && this.old.size === 0) {
      clearInterval(this.timer);
      this.timer = undefined;
      return;
    }
    for (const claim of this.old) if (!this.renewing.has(claim)) this.renew(claim);
    for (const claim of this.young) this.old.add(claim);
    this.young = new Set();
  };

  private renew(claim: Claim): void {
    this.renewing.add(claim);
    const observation = this.observer.storeCall('renew');
    let pending: Promise<Claim | undefined>;
    try {
      pending = this.store.renew(claim, this.leaseMs);
    } catch (error) {
      pending = Promise.reject(error instanceof Error ? error : new Error(String(error)));
    }
    pending.then(
      (renewed) => {
        this.renewing.delete(claim);
        observation.end(renewed !== undefined);
        // Fenced off: nothing more to keep alive; the completion will be refused (LeaseLostError).
        if (renewed === undefined) this.old.delete(claim);
      },
      (error: unknown) => {
        // A store error: the lease stands as it was; the next tick tries again, well before it ends.
        this.renewing.delete(claim);
        observation.fail(error);
      },
    );
  }
}
