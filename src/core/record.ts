/**
 * The idempotency record and the response it saves.
 *
 * One record exists per (scope, key). Its lifecycle is
 * `absent → in_progress → completed → (retention expires) → absent`, with two side exits:
 * `in_progress → absent` when the holder releases the key (the handler failed and the request may be
 * retried), and `in_progress (lease expired) → in_progress (new holder)` when a crashed holder's lease is
 * taken over.
 *
 * @module
 */

/** The two states a stored record can be in. An absent record has no state. */
export type RecordState = 'in_progress' | 'completed';

/**
 * A response saved for replay: what the first execution answered.
 *
 * For HTTP this is the status, the allow-listed headers and the exact body bytes. The function API
 * (`receiver.run`) stores its JSON-encoded result with status 200.
 */
export interface StoredResponse {
  /** HTTP status code (100–599). */
  readonly status: number;
  /** Header names in lower case mapped to their values; only allow-listed headers are ever stored. */
  readonly headers: Readonly<Record<string, string>>;
  /** The body bytes, replayed byte for byte. */
  readonly body: Uint8Array;
}

/**
 * The header a saved response carries instead of a body that was not kept (longer than the HTTP adapters'
 * `maxResponseBytes`, or than the store can hold: DynamoDB's 400 KB item, the etcd store's
 * `maxResponseBytes`): its value is the body's length in bytes, and the body is saved empty. A replay of
 * such a response is answered with a 410 problem `idempotency-response-not-kept` (`ResponseNotKeptError`;
 * IETF draft-ietf-httpapi-idempotency-key-header, section 2.6: the effect happened once, so the handler
 * never runs again). Never sent to a client.
 */
export const RESPONSE_NOT_KEPT_HEADER = 'retrysafe-response-not-kept';

/** A record as a store returns it. All times are milliseconds since the Unix epoch. */
export interface IdempotencyRecord {
  /** Namespace of the key, e.g. tenant and principal; keys never match across scopes. */
  readonly scope: string;
  /** The idempotency key as the client sent it (case-sensitive). */
  readonly key: string;
  /** Fingerprint (hex SHA-256) of the request that first claimed the key. */
  readonly fingerprint: string;
  readonly state: RecordState;
  /**
   * Fencing token of the current lease holder. `complete`, `release` and `checkpoint` apply only when the
   * caller presents this exact token, so a holder whose lease was taken over cannot write.
   */
  readonly leaseToken: string;
  /** When the current lease ends (ms since epoch); after it another caller may take the record over. */
  readonly leaseExpiresAt: number;
  /**
   * The last recovery point a multi-phase operation reached, if any: an opaque string the store keeps as
   * is. The phase runner writes a small JSON document there (plan, phase, input, state; see
   * `recovery-point.ts`).
   */
  readonly recoveryPoint?: string;
  /** The saved response, present once `state` is `completed`. */
  readonly response?: StoredResponse;
  /** When the record was first claimed (ms since epoch). */
  readonly createdAt: number;
  /** When the record was completed (ms since epoch). */
  readonly completedAt?: number;
  /** When the record's retention ends (ms since epoch); after it the key is new again and may be reaped. */
  readonly expiresAt: number;
}

/**
 * Proof that the caller holds the lease on a record: what `claim` hands the winner, and what
 * `complete`/`release`/`checkpoint` take back.
 */
export interface Claim {
  readonly scope: string;
  readonly key: string;
  readonly fingerprint: string;
  /** The fencing token; see {@link IdempotencyRecord.leaseToken}. */
  readonly leaseToken: string;
  /** When this lease ends (ms since epoch). */
  readonly leaseExpiresAt: number;
  /** `true` when the claim took over a record whose holder's lease had expired. */
  readonly takeover: boolean;
  /** The recovery point the previous holder reached, when this claim took over a multi-phase record. */
  readonly recoveryPoint?: string;
  /**
   * A fencing token for the resources the work writes to, set by stores that have a monotonic one: a
   * decimal integer (possibly beyond 2^53) that is larger for every later claim of the same key, a takeover
   * or a claim after the record was released or reaped included (etcd: the etcd revision of the claim's
   * write; PostgreSQL: a number from the schema's sequence `records_fence_seq`; SQLite: a number from the
   * record table's counter). A resource that remembers the largest token it accepted
   * and refuses smaller ones (`fencedUpdate`, the `Fencing-Token` header of {@link fencingHeaders}) keeps a
   * holder that was paused past its lease from writing after the record was taken over. Source: Martin
   * Kleppmann, "How to do distributed locking" (2016). Absent for stores without one (memory, Redis,
   * DynamoDB: the lease token is random, so it cannot be compared), and on PostgreSQL for a record claimed
   * before migration 0013 until it is claimed again.
   */
  readonly fencingToken?: string;
}

/**
 * The headers that carry `claim`'s fencing token to an HTTP downstream: `Fencing-Token`, which the
 * downstream compares with the largest token it accepted for the resource and refuses when smaller. Send
 * it with the call's own `Idempotency-Key` (a derived key, `derivedKey(id, step)`), so the downstream both
 * deduplicates the call and refuses a displaced holder.
 *
 * @throws TypeError when the claim carries no fencing token (its store has no monotonic one)
 * @example
 * ```ts
 * await fetch(url, { method: 'POST', headers: { ...fencingHeaders(claim), 'idempotency-key': derivedKey(id, 'ship') }, body });
 * ```
 */
export function fencingHeaders(claim: Claim): { readonly 'fencing-token': string } {
  if (claim.fencingToken === undefined) {
    throw new TypeError(`retrysafe: the claim of ${JSON.stringify(claim.key)} carries no fencing token (its store hands out none)`);
  }
  return { 'fencing-token': claim.fencingToken };
}

/**
 * An {@link IdempotencyRecord} while a store decodes it: the same fields, not yet read-only, so optional
 * ones (`recoveryPoint`, `completedAt`, `response`) are assigned to the one object rather than spread into
 * a new one (V8's slow object-cloning path).
 */
export type RecordDraft = { -readonly [K in keyof IdempotencyRecord]: IdempotencyRecord[K] };

/**
 * The claim a store hands the winner of a claim on `input`'s record, or the owner claiming again with its
 * own lease token. `recoveryPoint` (the one the record holds on a takeover; `undefined` or a column's
 * `null` when it holds none) and `fencingToken` (a store's monotonic token, a decimal string; `undefined`
 * or `null` when it hands out none) are set only when present. Built as a plain literal, spread only for a
 * recovery point: a conditional spread sends V8 down its slow object-cloning path on every claim.
 *
 * @param leaseExpiresAt - when the lease ends (ms since epoch)
 * @param takeover - `true` when the claim took over a record whose holder's lease had expired
 */
export function claimOf(
  input: Pick<Claim, 'scope' | 'key' | 'fingerprint'>,
  leaseToken: string,
  leaseExpiresAt: number,
  takeover: boolean,
  recoveryPoint?: string | null,
  fencingToken?: string | null,
): Claim {
  const claim: Claim =
    fencingToken === undefined || fencingToken === null
      ? { scope: input.scope, key: input.key, fingerprint: input.fingerprint, leaseToken, leaseExpiresAt, takeover }
      : { scope: input.scope, key: input.key, fingerprint: input.fingerprint, leaseToken, leaseExpiresAt, takeover, fencingToken };
  return recoveryPoint === undefined || recoveryPoint === null ? claim : { ...claim, recoveryPoint };
}

/**
 * A copy of `response` with its own headers object and its own body bytes (a `Buffer` stays a `Buffer`), not
 * frozen: what the memory store keeps, freezing it only when it first hands it out.
 */
export function copiedResponse(response: StoredResponse): StoredResponse {
  return {
    status: response.status,
    headers: { ...response.headers },
    // Buffer#slice is a view, not a copy; Buffer.from copies (small bodies into Node's shared pool).
    body: Buffer.isBuffer(response.body) ? Buffer.from(response.body) : response.body.slice(),
  };
}

/**
 * A copy of `response` that no caller can change: {@link copiedResponse}, frozen with its headers. What the
 * receiver's replay cache holds, so the work's response object can be changed or reused afterwards.
 */
export function frozenResponse(response: StoredResponse): StoredResponse {
  const copy = copiedResponse(response);
  Object.freeze(copy.headers);
  return Object.freeze(copy);
}

/**
 * One string per (scope, key), for in-process maps keyed by both: the scope's length prefix keeps pairs
 * apart whatever characters either holds (`("a:b", "c")` and `("a", "b:c")` differ).
 */
export function recordSlot(scope: string, key: string): string {
  return `${scope.length}:${scope}${key}`;
}
