/**
 * The indeterminate outcome as a state of the record, without a change to the store contract: the
 * gateway keeps the record `in_progress` and marks it with the store's fenced `checkpoint`, the recovery
 * point being {@link indeterminateMarker}'s JSON and the lease as long as the key's TTL, so no retry can
 * take it over before the key expires. {@link HoldingStore} wraps the store the gateway's engines run on:
 * - a claim that meets a marked record is answered as a completed record whose saved response carries
 *   {@link OUTCOME_UNKNOWN_HEADER}, so the engine checks the fingerprint first (422 for another request)
 *   and hands it back as a replay, which the gateway answers with the `idempotency-outcome-unknown`
 *   problem instead (that response is never sent);
 * - the engine's release after the work threw is refused for a claim the gateway marked, so the record
 *   stays held.
 *
 * Why a state and not a retry: after an upstream timeout or a reset once the request was sent, nobody
 * knows whether the side effect happened (IETF httpapi idempotency draft, issues #41 and #43); running the
 * request again may do it twice, releasing the key lets the client do it twice.
 *
 * @module
 */
import type { Claim, IdempotencyRecord, StoredResponse } from '../core/record.js';
import type { ClaimInput, ClaimResult, IdempotencyStore } from '../core/store.js';

/**
 * Why an outcome is unknown: the upstream did not answer in time (504), the exchange broke after the
 * request was sent (502), or the gateway that held the request stopped before its outcome was known and a
 * retry found its lease expired (502).
 */
export type IndeterminateCause = 'upstream-timeout' | 'upstream-reset' | 'interrupted';

const CAUSES: readonly IndeterminateCause[] = ['upstream-timeout', 'upstream-reset', 'interrupted'];

/** What the marker on a held record says. */
export interface IndeterminateMark {
  readonly cause: IndeterminateCause;
  /** The status the gateway answers retries with: 504 after a timeout, 502 after a reset. */
  readonly status: 502 | 504;
}

const MARKER_PREFIX = '{"indeterminate":';

/** The recovery point that marks a record indeterminate. */
function indeterminateMarker(cause: IndeterminateCause): string {
  return `${MARKER_PREFIX}${JSON.stringify(cause)}}`;
}

/** The mark of `cause`: 504 after a timeout, 502 otherwise. */
export function markFor(cause: IndeterminateCause): IndeterminateMark {
  return { cause, status: cause === 'upstream-timeout' ? 504 : 502 };
}

/** The mark a record carries, or `undefined` for a record the gateway did not hold. */
export function indeterminateMarkOf(record: Pick<IdempotencyRecord, 'state' | 'recoveryPoint'>): IndeterminateMark | undefined {
  if (record.state !== 'in_progress' || record.recoveryPoint?.startsWith(MARKER_PREFIX) !== true) return undefined;
  try {
    const cause = (JSON.parse(record.recoveryPoint) as { indeterminate?: unknown }).indeterminate;
    if (CAUSES.includes(cause as IndeterminateCause)) return markFor(cause as IndeterminateCause);
  } catch {
    // Not the gateway's marker after all: another module's recovery point.
  }
  return undefined;
}

/**
 * Marks the stand-in response of a held record. Its value is the cause; the record's lease token and
 * fingerprint travel in {@link HELD_TOKEN_HEADER} and {@link HELD_LEASE_HEADER}, so the gateway can resolve
 * the record (fenced) without reading it again. None of them is ever sent.
 */
export const OUTCOME_UNKNOWN_HEADER = 'retrysafe-outcome-unknown';
const HELD_TOKEN_HEADER = 'retrysafe-held-token';
const HELD_LEASE_HEADER = 'retrysafe-held-lease';

/** The held record a stand-in response names, as a claim on it (its lease token fences the resolution). */
export function heldClaimOf(scope: string, key: string, fingerprint: string, response: StoredResponse): Claim | undefined {
  const leaseToken = response.headers[HELD_TOKEN_HEADER];
  if (response.headers[OUTCOME_UNKNOWN_HEADER] === undefined || leaseToken === undefined) return undefined;
  return { scope, key, fingerprint, leaseToken, leaseExpiresAt: Number(response.headers[HELD_LEASE_HEADER]), takeover: false };
}

/** The claim on a held record, from the record itself (the operator's resolution). */
export function claimOnRecord(record: IdempotencyRecord): Claim {
  return { scope: record.scope, key: record.key, fingerprint: record.fingerprint, leaseToken: record.leaseToken, leaseExpiresAt: record.leaseExpiresAt, takeover: false };
}

/** The record as the engine is shown it: held ones as completed with a stand-in response. */
function presented(record: IdempotencyRecord): IdempotencyRecord {
  const mark = indeterminateMarkOf(record);
  if (mark === undefined) return record;
  const response: StoredResponse = {
    status: mark.status,
    headers: { [OUTCOME_UNKNOWN_HEADER]: mark.cause, [HELD_TOKEN_HEADER]: record.leaseToken, [HELD_LEASE_HEADER]: String(record.leaseExpiresAt) },
    body: new Uint8Array(0),
  };
  return { ...record, state: 'completed', response };
}

/** A claim's result as the engine is shown it: a held record that stood in the way presented as above. */
function presentedClaim(result: ClaimResult): ClaimResult {
  return result.acquired ? result : { acquired: false, record: presented(result.record) };
}

/**
 * The store the gateway's engines run on: the configured store, with held records presented as above and
 * the release of a held claim refused. Every other call goes to the store unchanged.
 */
export class HoldingStore implements IdempotencyStore {
  readonly kind: string;
  /** Lease tokens of claims this process marked indeterminate whose release by the engine is still to come. */
  private readonly held = new Set<string>();

  /** The store's `waitFor`, presenting held records, when the store has one (the engine polls `get` otherwise). */
  readonly waitFor?: (scope: string, key: string, timeoutMs: number) => Promise<IdempotencyRecord | undefined>;

  constructor(readonly inner: IdempotencyStore) {
    this.kind = inner.kind ?? 'custom';
    const waitFor = inner.waitFor?.bind(inner);
    if (waitFor !== undefined) {
      this.waitFor = async (scope, key, timeoutMs) => {
        const record = await waitFor(scope, key, timeoutMs);
        return record === undefined ? undefined : presented(record);
      };
    }
  }

  /**
   * Marks `claim`'s record indeterminate for `leaseMs` milliseconds (the key's TTL). Tried twice: a record
   * left unmarked keeps its ordinary lease, after which a retry would take it over and send it again.
   *
   * @returns whether the record is held (`false`: the store failed twice, or the claim was fenced off)
   */
  async hold(claim: Claim, cause: IndeterminateCause, leaseMs: number): Promise<boolean> {
    this.held.add(claim.leaseToken);
    const checkpoint = this.inner.checkpoint?.bind(this.inner);
    if (checkpoint === undefined) return false;
    for (let attempt = 0; attempt < 2; attempt += 1) {
      try {
        return (await checkpoint(claim, indeterminateMarker(cause), leaseMs)) !== undefined;
      } catch {
        // Once more: the mark is what stands between a retry and a second execution.
      }
    }
    return false;
  }

  /**
   * The engine's keep-alive, passed on, except for a claim this process holds: its lease is the key's TTL
   * now, and a renewal would shorten it to `leaseMs`, after which a retry would take the record over.
   */
  renew(claim: Claim, leaseMs: number): Promise<Claim | undefined> {
    if (this.held.has(claim.leaseToken)) return Promise.resolve(claim);
    return this.inner.renew(claim, leaseMs);
  }

  claim(input: ClaimInput): Promise<ClaimResult> {
    // Hot path: docs/hot-path.md#gateway-request (one `then`, not an `async` layer)
    return this.inner.claim(input).then(presentedClaim);
  }

  complete(claim: Claim, response: StoredResponse, retentionMs: number): Promise<boolean> {
    return this.inner.complete(claim, response, retentionMs);
  }

  release(claim: Claim): Promise<boolean> {
    if (this.held.delete(claim.leaseToken)) return Promise.resolve(false);
    return this.inner.release(claim);
  }

  async get(scope: string, key: string): Promise<IdempotencyRecord | undefined> {
    const record = await this.inner.get(scope, key);
    return record === undefined ? undefined : presented(record);
  }

  reap(limit: number): Promise<number> {
    return this.inner.reap(limit);
  }

  close(): Promise<void> {
    return this.inner.close();
  }

  ping(): Promise<void> {
    // A store without a ping is asked for a record instead: a round trip all the same.
    return this.inner.ping === undefined ? this.inner.get('', '').then(() => undefined) : this.inner.ping();
  }
}
