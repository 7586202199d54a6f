/**
 * The lead of the Redis store's bound of Redis's clock, as the simulation measures it from outside: the
 * `TIME`s the store sends on its connection, timed, and what their round trips allow the bound to lead by.
 */
import type { Redis } from 'ioredis';

/** The `TIME` round trips a store ran on one connection since `restart`: the longest, and since when. */
export interface TimeRoundTrips {
  readonly longestMs: number;
  readonly since: number;
  restart(): void;
}

/**
 * Times every `TIME` sent on `client` (the store's bound of Redis's clock, `src/stores/redis/server-clock.ts`,
 * is read from such replies), from the call to its settling, which spans the round trip the store measures.
 */
export function timeRoundTrips(client: Redis): TimeRoundTrips {
  const state = { longestMs: 0, since: performance.now() };
  // Bound before it is replaced below.
  const original = client.time.bind(client);
  const time = (): Promise<number[]> => original();
  (client as unknown as { time: () => Promise<number[]> }).time = () => {
    const sent = performance.now();
    return time().finally(() => {
      state.longestMs = Math.max(state.longestMs, performance.now() - sent);
    });
  };
  return {
    get longestMs() {
      return state.longestMs;
    },
    get since() {
      return state.since;
    },
    restart() {
      state.longestMs = 0;
      state.since = performance.now();
    },
  };
}

/**
 * How far the Redis store's bound of Redis's clock may lead it, in milliseconds: no more than the round trip
 * of the `TIME` it was taken from (the longest seen bounds it), plus the 500 ppm of drift it adds per
 * millisecond since (at most since the store opened), plus 1 for the whole milliseconds both it and `TIME`
 * are floored to. A claim it stamps (the plain `SET` claim) ends its lease and retention no earlier than a
 * claim by `TIME` at the moment it was sent, and at most this much past the server's time read after it.
 */
export function boundLeadMs(times: TimeRoundTrips): number {
  return times.longestMs + (performance.now() - times.since) * 0.0005 + 1;
}
