// Hot path: docs/hot-path.md#redis-plain-claim
/**
 * Redis's clock as the client can bound it: one `TIME` reply, carried forward on the process's monotonic
 * clock, so a claim written by a plain `SET` carries Redis's time without a script asking Redis for it.
 *
 * @module
 */
import type { Redis } from 'ioredis';

/** How long one `TIME` reply is trusted, in milliseconds, before the next operation asks again. */
const RESYNC_MS = 10_000;

/**
 * How far Redis's wall clock may run ahead of this process's monotonic clock, per millisecond since the
 * last `TIME` (500 ppm: the fastest an NTP daemon slews a clock).
 */
const DRIFT = 0.0005;

/**
 * An upper bound of Redis's clock, in milliseconds since the epoch. After a `TIME` reply read `time`
 * between the local monotonic instants `sent` and `received`, Redis's clock at a later local instant `x`
 * is at most `time + (x - sent)` (plus the drift since): the bound is never behind Redis, and ahead of it
 * by at most the round trip of that `TIME`. The process's own wall clock (`Date.now`) plays no part, so a
 * process whose clock is off still writes Redis's time. One `TIME` per {@link RESYNC_MS}, sent in the
 * background once the last one is older than that.
 */
export class ServerClock {
  /** Redis's time minus the local monotonic time at which the `TIME` was sent; `NaN` before the first reply. */
  private offset = Number.NaN;
  private syncedAt = 0;
  private syncing: Promise<void> | undefined;

  /** Asks `node` for its `TIME` and bounds Redis's clock by it. */
  sync(node: Redis): Promise<void> {
    this.syncing ??= this.read(node).finally(() => {
      this.syncing = undefined;
    });
    return this.syncing;
  }

  /** Forgets the bound (a reconnect may land on another server, with another clock). */
  reset(): void {
    this.offset = Number.NaN;
  }

  /**
   * The upper bound of Redis's clock now (a whole millisecond), or `undefined` before any `TIME` reply. A
   * bound older than {@link RESYNC_MS} is still answered, and a fresh `TIME` is sent on `node` meanwhile.
   */
  latest(node: Redis): number | undefined {
    if (Number.isNaN(this.offset)) return undefined;
    const local = performance.now();
    const elapsed = local - this.syncedAt;
    if (elapsed > RESYNC_MS) void this.sync(node).catch(() => undefined);
    return Math.ceil(local + this.offset + elapsed * DRIFT);
  }

  private async read(node: Redis): Promise<void> {
    const sent = performance.now();
    const [seconds, micros] = await node.time();
    this.offset = Number(seconds) * 1000 + Number(micros) / 1000 - sent;
    this.syncedAt = sent;
  }
}
