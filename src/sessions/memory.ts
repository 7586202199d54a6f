/**
 * The in-memory session store: one process, no persistence. Every operation runs synchronously under the
 * hood, so each is atomic within the process.
 *
 * @module
 */
import { requireLimit } from '../core/validate.js';
import { sessionCounters } from './counters.js';
import type { BeginInput, BeginResult, KeepAliveResult, SessionQuery, SessionStats, SessionStore, SessionSummary } from './store.js';

interface RequestEntry {
  state: 'in_progress' | 'completed';
  token: string;
  leaseExpiresAt: number;
  response?: string;
}

interface Session {
  state: 'live' | 'expired';
  leaseExpiresAt: number;
  lowWaterMark: number;
  readonly requests: Map<number, RequestEntry>;
}

/**
 * Creates an in-memory {@link SessionStore}. Sessions are lost on restart; clients then meet
 * `session-unknown` and register anew, which is safe (never a silent re-creation).
 *
 * @example
 * ```ts
 * import { createMemorySessionStore, createSessionReceiver } from 'retrysafe/sessions';
 * const receiver = createSessionReceiver({ store: createMemorySessionStore() });
 * ```
 */
export function createMemorySessionStore(): SessionStore & Pick<Required<SessionStore>, 'listSessions'> {
  return new MemorySessionStore();
}


class MemorySessionStore implements SessionStore {
  private readonly sessions = new Map<string, Session>();

  create(clientId: string, now: number, leaseMs: number): Promise<boolean> {
    if (this.sessions.has(clientId)) return Promise.resolve(false);
    this.sessions.set(clientId, { state: 'live', leaseExpiresAt: now + leaseMs, lowWaterMark: 0, requests: new Map() });
    return Promise.resolve(true);
  }

  begin(input: BeginInput): Promise<BeginResult> {
    const session = this.live(input.clientId, input.now);
    if (typeof session === 'string') return Promise.resolve({ outcome: session });
    if (input.requestNumber <= session.lowWaterMark) {
      return Promise.resolve({ outcome: 'stale', lowWaterMark: session.lowWaterMark });
    }
    this.advance(session, input.lowWaterMark, input.now + input.sessionLeaseMs);
    const entry = session.requests.get(input.requestNumber);
    if (entry?.state === 'completed') return Promise.resolve({ outcome: 'replay', response: entry.response ?? '' });
    if (entry && entry.leaseExpiresAt > input.now) return Promise.resolve({ outcome: 'in_flight' });
    session.requests.set(input.requestNumber, {
      state: 'in_progress',
      token: input.token,
      leaseExpiresAt: input.now + input.executionLeaseMs,
    });
    return Promise.resolve({ outcome: 'execute', takeover: entry !== undefined });
  }

  complete(clientId: string, requestNumber: number, token: string, response: string): Promise<boolean> {
    const entry = this.held(clientId, requestNumber, token);
    if (!entry) return Promise.resolve(false);
    entry.state = 'completed';
    entry.response = response;
    return Promise.resolve(true);
  }

  release(clientId: string, requestNumber: number, token: string): Promise<boolean> {
    if (!this.held(clientId, requestNumber, token)) return Promise.resolve(false);
    this.sessions.get(clientId)?.requests.delete(requestNumber);
    return Promise.resolve(true);
  }

  keepAlive(clientId: string, lowWaterMark: number, now: number, leaseMs: number): Promise<KeepAliveResult> {
    const session = this.live(clientId, now);
    if (typeof session === 'string') return Promise.resolve(session);
    this.advance(session, lowWaterMark, now + leaseMs);
    return Promise.resolve('ok');
  }

  end(clientId: string): Promise<boolean> {
    return Promise.resolve(this.sessions.delete(clientId));
  }

  reap(now: number, limit: number): Promise<number> {
    let deleted = 0;
    for (const [clientId, session] of this.sessions) {
      if (deleted >= limit) break;
      if (session.leaseExpiresAt <= now) {
        this.sessions.delete(clientId);
        deleted++;
      }
    }
    return Promise.resolve(deleted);
  }

  stats(clientId: string): Promise<SessionStats | undefined> {
    const session = this.sessions.get(clientId);
    return Promise.resolve(session && sessionCounters(session).stats);
  }

  /** One page in client-id order: filters and sorts every session id, so O(n log n) in the sessions held. */
  async listSessions(query: SessionQuery): Promise<SessionSummary[]> {
    requireLimit('listSessions', query.limit);
    const { clientIdPrefix, after } = query;
    const ids = [...this.sessions.keys()]
      .filter((id) => (clientIdPrefix === undefined || id.startsWith(clientIdPrefix)) && (after === undefined || id > after))
      .sort()
      .slice(0, query.limit);
    return Promise.resolve(
      ids.flatMap((clientId) => {
        const session = this.sessions.get(clientId);
        if (!session) return [];
        const { stats, highest } = sessionCounters(session);
        return [{ clientId, ...stats, ...(highest !== undefined && { highestRequestNumber: highest }) }];
      }),
    );
  }

  close(): Promise<void> {
    this.sessions.clear();
    return Promise.resolve();
  }

  /** The live session, or why there is none; an expired one is turned into a tombstone on the way. */
  private live(clientId: string, now: number): Session | 'unknown' | 'expired' {
    const session = this.sessions.get(clientId);
    if (!session) return 'unknown';
    if (session.state === 'expired') return 'expired';
    if (session.leaseExpiresAt <= now) {
      session.state = 'expired';
      session.requests.clear();
      return 'expired';
    }
    return session;
  }

  private advance(session: Session, lowWaterMark: number, leaseExpiresAt: number): void {
    session.leaseExpiresAt = Math.max(session.leaseExpiresAt, leaseExpiresAt);
    if (lowWaterMark <= session.lowWaterMark) return;
    session.lowWaterMark = lowWaterMark;
    for (const number of session.requests.keys()) if (number <= lowWaterMark) session.requests.delete(number);
  }

  private held(clientId: string, requestNumber: number, token: string): RequestEntry | undefined {
    const entry = this.sessions.get(clientId)?.requests.get(requestNumber);
    return entry?.state === 'in_progress' && entry.token === token ? entry : undefined;
  }
}
