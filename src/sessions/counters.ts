/**
 * A session's counters as `SessionStore.stats` answers them, from the session as a store holds it (the
 * memory store's entry, the DynamoDB store's item).
 *
 * @module
 */
import type { SessionStats } from './store.js';

/** What the counters are read from: the session's state, mark, lease end, and its requests by number. */
interface CountedSession {
  readonly state: 'live' | 'expired';
  readonly lowWaterMark: number;
  readonly leaseExpiresAt: number;
  readonly requests: ReadonlyMap<number, { readonly state: string }>;
}

/** The session's counters, and the highest request number it holds (`undefined` when it holds none). */
export function sessionCounters(session: CountedSession): { stats: SessionStats; highest: number | undefined } {
  let storedResponses = 0;
  let highest: number | undefined;
  for (const [number, request] of session.requests) {
    if (request.state === 'completed') storedResponses++;
    highest = Math.max(highest ?? number, number);
  }
  const stats: SessionStats = {
    state: session.state,
    lowWaterMark: session.lowWaterMark,
    leaseExpiresAt: session.leaseExpiresAt,
    storedResponses,
    inProgress: session.requests.size - storedResponses,
  };
  return { stats, highest };
}
