/**
 * The etcd leases records are put with: a safety net under the expiry the store decides, shared by every
 * record whose deadline falls in the same minute.
 *
 * @module
 */
import type { Etcd3 } from 'etcd3';

/**
 * Extra real time a record key outlives its last deadline, in milliseconds (5 minutes). Expiry decisions
 * (lease takeover, retention, reap) are made by the store on its clock; the etcd lease only makes etcd drop
 * a record by itself once no decision can need it any more. The grace lets a test on a fake clock advance
 * its time without etcd deleting the records under it.
 */
export const ETCD_LEASE_GRACE_MS = 300_000;

/** Width of a lease's slot, in milliseconds: records whose key may go within the same minute share one lease. */
const SLOT_MS = 60_000;

/**
 * Grants etcd leases by slot: a record that may be dropped `untilMs` from now gets the lease of the slot
 * that ends at or after `untilMs + ETCD_LEASE_GRACE_MS`, granted once (one `LeaseGrant` round trip) and
 * shared with every record put in that slot meanwhile. Etcd keeps a lease's TTL across leader changes, so
 * one grant per minute of deadlines replaces one per claim. Slots are in real time (etcd's TTLs are), not
 * on the store's clock.
 */
export class RecordLeases {
  private readonly slots = new Map<number, Promise<string>>();

  constructor(private readonly client: Etcd3) {}

  /** The id of a lease alive for at least `untilMs` plus the grace from now (milliseconds). */
  leaseFor(untilMs: number): Promise<string> {
    const now = Date.now();
    const slot = Math.ceil((now + Math.max(0, untilMs) + ETCD_LEASE_GRACE_MS) / SLOT_MS);
    const known = this.slots.get(slot);
    if (known) return known;
    for (const old of this.slots.keys()) if (old * SLOT_MS <= now) this.slots.delete(old);
    const ttlSeconds = Math.ceil((slot * SLOT_MS - now) / 1000);
    const granted = this.client.leaseClient.leaseGrant({ TTL: ttlSeconds }).then((reply) => reply.ID);
    // A failed grant is not kept: the next write asks again.
    void granted.catch(() => this.slots.get(slot) === granted && this.slots.delete(slot));
    this.slots.set(slot, granted);
    return granted;
  }

  /** Forgets every lease granted so far (etcd answered "lease not found" for one), so the next writes grant new ones. */
  forgetAll(): void {
    this.slots.clear();
  }
}
