// Hot path: docs/hot-path.md#redis-completion-time
/**
 * Redis's clock as the client can bound it: `TIME` replies carried forward on the process's monotonic
 * clock, so the completion carries Redis's time without its script asking Redis for it.
 *
 * @module
 */
import type { RedisTransport } from './transport.js';

/** `TIME`s sent one after another when there is no bound, the tightest kept. */
const SAMPLES = 3;

/** How long after a `TIME` reply the next operation sends another, in milliseconds (in the background). */
const RESYNC_MS = 1_000;

/**
 * How far Redis's wall clock may run ahead of this process's monotonic clock, per millisecond since the
 * kept `TIME` was sent (500 ppm: the fastest an NTP daemon slews a clock).
 */
const DRIFT = 0.0005;

/**
 * An upper bound of Redis's clock, in milliseconds since the epoch. After a `TIME` reply read `time`
 * between the local monotonic instants `sent` and `received`, Redis's clock at a later local instant `x`
 * is at most `time + (x - sent)` plus the drift since: never behind Redis, and ahead of it by at most the
 * round trip of that `TIME` plus the drift. Each reply tightens the bound (the lower of the new one and the
 * old one widened by its drift is kept), so a slow reply does not loosen it: the bound leads Redis by
 * about the fastest round trip seen. The process's own wall clock (`Date.now`) plays no
 * part, so a process whose clock is off still writes Redis's time.
 */
export class ServerClock {
  /** Redis's time minus the local monotonic time at which the kept `TIME` was sent; `NaN` while there is none. */
  private offset = Number.NaN;
  /** The local monotonic time at which the kept `TIME` was sent. */
  private syncedAt = 0;
  /** The local monotonic time of the last `TIME` reply, kept or not. */
  private checkedAt = 0;
  private syncing: Promise<void> | undefined;
  /** Counts {@link ServerClock.reset} calls: a reply to a `TIME` sent before the last one is dropped. */
  private generation = 0;

  /** Asks `node` for its `TIME` ({@link SAMPLES} times when there is no bound) and bounds Redis's clock by it. */
  sync(node: RedisTransport): Promise<void> {
    this.syncing ??= this.read(node, Number.isNaN(this.offset) ? SAMPLES : 1).finally(() => {
      this.syncing = undefined;
    });
    return this.syncing;
  }

  /** Forgets the bound (a reconnect may land on another server, with another clock). */
  reset(): void {
    this.offset = Number.NaN;
    this.generation++;
  }

  /**
   * The upper bound of Redis's clock now (a whole millisecond, floored as the scripts floor `TIME`), or
   * `undefined` while there is none. When there is none, or the last reply is older than
   * {@link RESYNC_MS}, a `TIME` is sent on `node` in the background.
   */
  latest(node: RedisTransport): number | undefined {
    const local = performance.now();
    if (Number.isNaN(this.offset) || local - this.checkedAt > RESYNC_MS) void this.sync(node).catch(() => undefined);
    if (Number.isNaN(this.offset)) return undefined;
    return Math.floor(local + this.offset + (local - this.syncedAt) * DRIFT);
  }

  private async read(node: RedisTransport, samples: number): Promise<void> {
    for (let i = 0; i < samples; i++) {
      const generation = this.generation;
      const sent = performance.now();
      const [seconds, micros] = await node.time();
      // Sent before a reconnect (and maybe resent after it, long after `sent`): no bound of this server.
      if (generation !== this.generation) continue;
      this.checkedAt = performance.now();
      const offset = Number(seconds) * 1000 + Number(micros) / 1000 - sent;
      // NaN (no bound) compares false: the first reply is kept.
      if (!(this.offset + (sent - this.syncedAt) * DRIFT <= offset)) {
        this.offset = offset;
        this.syncedAt = sent;
      }
    }
  }
}
