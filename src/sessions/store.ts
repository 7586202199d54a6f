/**
 * The session-store contract: what a session receiver needs from storage. Every method is ONE atomic
 * step on one session, so a store can be a map in memory, a SQL transaction or a Lua script.
 *
 * Why not the `IdempotencyStore` contract: a session must change after it is written (its lease is
 * renewed, its low-water mark rises) and must delete responses that are already completed once the client
 * has received them. An idempotency record, once completed, can only age out by retention; keeping memory
 * bounded by the requests in flight needs the deletes this contract adds.
 *
 * Times are milliseconds since the epoch, passed in by the receiver from its injected clock.
 *
 * @module
 */

/** The session fields every request carries (Ongaro's thesis, section 6.3; *Patterns of Distributed Systems*, Idempotent Receiver). */
export interface SessionRequest {
  /** The id `register()` handed the client. */
  readonly clientId: string;
  /** The client's number for this request: 1 for its first, then consecutive; retries repeat it. */
  readonly requestNumber: number;
  /**
   * The highest request number `n` such that the client has received (or given up on) the responses to
   * requests `1..n`; 0 before the first. The server discards saved responses at or below it.
   */
  readonly lowWaterMark: number;
}

/** What {@link SessionStore.begin} is asked to do. */
export interface BeginInput extends SessionRequest {
  /** The current time (ms since epoch). */
  readonly now: number;
  /** The session's lease is renewed to `now + sessionLeaseMs`. */
  readonly sessionLeaseMs: number;
  /** An execution that wins holds the request for `executionLeaseMs`; after that a retry may take over. */
  readonly executionLeaseMs: number;
  /** The fencing token the winning execution will present to `complete`/`release`. */
  readonly token: string;
}

/**
 * The outcome of {@link SessionStore.begin}:
 * - `unknown` / `expired`: the session does not exist / its lease had run out (it is now marked expired and
 *   its responses dropped); nothing else happened.
 * - `stale`: the request number is at or below the session's low-water mark; nothing else happened.
 * - `execute`: the caller holds the request under `token` (`takeover` when a holder's lease had expired).
 * - `replay`: the request was applied before; here is its saved response.
 * - `in_flight`: another execution holds the request under a live lease.
 */
export type BeginResult =
  | { readonly outcome: 'unknown' }
  | { readonly outcome: 'expired' }
  | { readonly outcome: 'stale'; readonly lowWaterMark: number }
  | { readonly outcome: 'execute'; readonly takeover: boolean }
  | { readonly outcome: 'replay'; readonly response: string }
  | { readonly outcome: 'in_flight' };

/** The state of a live session or a tombstone, as {@link SessionStore.stats} reports it. */
export interface SessionStats {
  /** `live` until its lease runs out and an access marks it `expired`. */
  readonly state: 'live' | 'expired';
  /** The highest low-water mark the client has reported. */
  readonly lowWaterMark: number;
  /** When the session's lease ends (ms since epoch). */
  readonly leaseExpiresAt: number;
  /** Saved responses the session holds: requests applied above the low-water mark. */
  readonly storedResponses: number;
  /** Requests being applied right now. */
  readonly inProgress: number;
}

/**
 * A bounded page of sessions for an operator's view ({@link SessionStore.listSessions}), in client-id order
 * (by code unit; the SQL stores compare bytes, which agrees for the ASCII ids `register()` hands out).
 * Every field but `limit` narrows the page; `after` is the last client id of the previous page (keyset paging).
 */
export interface SessionQuery {
  /** Only client ids that start with this text (case-sensitive). */
  readonly clientIdPrefix?: string;
  /** Only client ids after this one, for the next page. */
  readonly after?: string;
  /** At most this many sessions (a positive safe integer). */
  readonly limit: number;
}

/** One session as {@link SessionStore.listSessions} reports it: its id, its counters and what it holds. */
export interface SessionSummary extends SessionStats {
  /** The id `register()` handed the client. */
  readonly clientId: string;
  /**
   * The highest request number the session holds a record of (in progress or saved), or `undefined` when it
   * holds none — the low-water mark has passed every request, or none was made, or the session expired.
   */
  readonly highestRequestNumber?: number;
}

/** Outcome of {@link SessionStore.keepAlive}. */
export type KeepAliveResult = 'ok' | 'unknown' | 'expired';

/**
 * A session store. Every implementation guarantees, per session:
 * - `create` inserts only when the id is free (no live session, no tombstone); it never overwrites.
 * - `begin` does, atomically: refuse an unknown session; refuse an expired one (mark it `expired` and drop
 *   its requests — a tombstone stays until `reap`); refuse a request number at or below the stored
 *   low-water mark as stale; otherwise raise the low-water mark to `max(stored, input)`, delete every
 *   request record at or below it, renew the lease, and claim the request number (insert, take over an
 *   expired execution lease, replay a completed response, or report it in flight). N parallel `begin`s of
 *   one request number yield exactly one `execute`.
 * - `complete` and `release` are fenced on the token and apply only while the request is `in_progress`.
 * - `keepAlive` refuses as `begin` does, else raises the low-water mark, drops requests at or below it and
 *   renews the lease.
 * - `listSessions` (optional, for the operator console) only reads: live sessions and tombstones as stored,
 *   so a live session whose lease has ended but that nobody touched since still reads `live`.
 */
export interface SessionStore {
  /** Creates a live session with the lease `now + leaseMs`; resolves `false` when the id is already taken. */
  create(clientId: string, now: number, leaseMs: number): Promise<boolean>;
  /** Validates the session and claims the request number; see the interface notes. */
  begin(input: BeginInput): Promise<BeginResult>;
  /** Saves the response of a request held under `token`; resolves `false` (changing nothing) when fenced off. */
  complete(clientId: string, requestNumber: number, token: string, response: string): Promise<boolean>;
  /** Deletes a request held under `token`, so a retry applies it again; resolves `false` when fenced off. */
  release(clientId: string, requestNumber: number, token: string): Promise<boolean>;
  /** Renews a live session's lease and raises its low-water mark; see the interface notes. */
  keepAlive(clientId: string, lowWaterMark: number, now: number, leaseMs: number): Promise<KeepAliveResult>;
  /** Deletes a session and its requests (the client is done); resolves whether it existed. */
  end(clientId: string): Promise<boolean>;
  /** Deletes up to `limit` sessions whose lease ended at or before `now`, with their requests; resolves how many. */
  reap(now: number, limit: number): Promise<number>;
  /** The session's counters, or `undefined` when no session or tombstone has this id. */
  stats(clientId: string): Promise<SessionStats | undefined>;
  /**
   * Optional (the operator console): one page of sessions and tombstones matching `query`, in client-id
   * order, each with its counters. Read-only and bounded: at most `query.limit` sessions, whatever the
   * store holds. The stores of this package all implement it.
   *
   * @throws TypeError (as a rejection) when `query.limit` is not a positive safe integer
   */
  listSessions?(query: SessionQuery): Promise<SessionSummary[]>;
  /** Releases the store's resources. */
  close(): Promise<void>;
}
