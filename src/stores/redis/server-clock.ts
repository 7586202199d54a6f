// Hot path: docs/hot-path.md#redis-plain-claim
/**
 * Redis's clock as the client can bound it: one `TIME` reply, carried forward on the process's monotonic
 * clock, so a claim written by a plain `SET` carries Redis's time without a script asking Redis for it.
 *
 * @module
 */
import type { Redis } from 'ioredis';

/** `TIME`s sent one after another on connecting, the tightest kept. */
const SAMPLES = 3;

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
 * by at most the time that `TIME` took to reach Redis. Each reply tightens the bound (the lowest of the new
 * one and the old one widened by its drift is kept), so a slow reply does not loosen it. The process's
 * own wall clock (`Date.now`) plays no part, so a process whose clock is off still writes Redis's time.
 * {@link SAMPLES} `TIME`s on connecting, then one per {@link RESYNC_MS}, sent in the background once the
 * last is older than that.
 */
export class ServerClock {
  /** Redis's time minus the local monotonic time at which the `TIME` was sent; `NaN` before the first reply. */
  private offset = Number.NaN;
  /** The local monotonic time at which the `TIME` of the kept bound was sent. */
  private syncedAt = 0;
  /** The local monotonic time of the last `TIME` reply, kept or not. */
  private checkedAt = 0;
  private syncing: Promise<void> | undefined;

  /** Asks `node` for its `TIME` ({@link SAMPLES} times when there is no bound yet) and bounds Redis's clock by it. */
  sync(node: Redis): Promise<void> {
    this.syncing ??= this.read(node, Number.isNaN(this.offset) ? SAMPLES : 1).finally(() => {
      this.syncing = undefined;
    });
    return this.syncing;
  }

  /** Forgets the bound (a reconnect may land on another server, with another clock). */
  reset(): void {
    this.offset = Number.NaN;
  }

  /**
   * The upper bound of Redis's clock now (a whole millisecond, floored as the scripts floor `TIME`), or
   * `undefined` before any `TIME` reply. When the last reply is older than {@link RESYNC_MS}, the bound is
   * still answered and a fresh `TIME` is sent on `node` meanwhile.
   */
  latest(node: Redis): number | undefined {
    if (Number.isNaN(this.offset)) return undefined;
    const local = performance.now();
    if (local - this.checkedAt > RESYNC_MS) void this.sync(node).catch(() => undefined);
    // The whole millisecond Redis's clock reads (its `TIME` in ms, floored) is at most the bound's.
    return Math.floor(local + this.offset + (local - this.syncedAt) * DRIFT);
  }

  private async read(node: Redis, samples: number): Promise<void> {
    for (let i = 0; i < samples; i++) {
      const sent = performance.now();
      const [seconds, micros] = await node.time();
      const offset = Number(seconds) * 1000 + Number(micros) / 1000 - sent;
      this.checkedAt = performance.now();
      const widened = this.offset + (sent - this.syncedAt) * DRIFT;
      // NaN (no bound yet) compares false: the first reply is kept.
      if (!(widened <= offset)) {
        this.offset = offset;
        this.syncedAt = sent;
      }
    }
  }
}
