/**
 * The receiver's optional process-local cache of completed records: a bounded LRU that answers a replay
 * (or a key reused with another fingerprint, 422) without a store round trip. Off unless the receiver's
 * `replayCache` option is set.
 *
 * Only completed records are kept: those the receiver completed itself and those a store returned. A
 * completed record never changes until it expires or someone deletes it, so a cached one answers exactly
 * as the store would, with two bounds. An entry is used until the record's `expiresAt` (the store's clock,
 * or the receiver's for a record it completed, compared with the receiver's) and for at most `maxAgeMs`
 * after it was cached, so a record deleted in the store (by an operator, or by another process's reaper
 * once expired) is still replayed here for up to `maxAgeMs`.
 *
 * The same idea as the local cache of AWS Lambda Powertools' idempotency utility (`useLocalCache`).
 *
 * @module
 */
import { requireCount, requireDurationMs, requireObject } from './validate.js';
import { frozenResponse, recordSlot, type Claim, type IdempotencyRecord, type StoredResponse } from './record.js';

/** Options of the receiver's replay cache (its `replayCache` option). Durations are in milliseconds. */
export interface ReplayCacheOptions {
  /**
   * Most completed records kept; the least recently used one goes first. Each keeps its saved response in
   * memory, so the cache holds up to `maxEntries` × the largest saved response (the HTTP adapters'
   * `maxResponseBytes`).
   */
  readonly maxEntries: number;
  /**
   * Longest a cached record is used, counted from when it was cached: how long a record deleted in the
   * store can still be replayed by this process. Never past the record's own `expiresAt`.
   * @defaultValue 60_000
   */
  readonly maxAgeMs?: number;
}

/** A cached record and until when it may answer (ms since the epoch, the receiver's clock). */
interface Entry {
  readonly record: IdempotencyRecord;
  readonly usableUntil: number;
}

/** The bounded LRU of completed records behind a receiver's `replayCache` option. */
export class ReplayCache {
  /** In insertion order, which a hit renews: the first entry is the least recently used. */
  private readonly entries = new Map<string, Entry>();
  /** The options, checked, with `maxAgeMs`'s default filled in; frozen. */
  readonly options: Readonly<Required<ReplayCacheOptions>>;

  /** @throws TypeError naming the option when `options` is not valid {@link ReplayCacheOptions} */
  constructor(options: ReplayCacheOptions) {
    requireObject('replayCache', options);
    const maxEntries = requireCount('replayCache.maxEntries', options.maxEntries);
    this.options = Object.freeze({ maxEntries, maxAgeMs: requireDurationMs('replayCache.maxAgeMs', options.maxAgeMs ?? 60_000) });
  }

  /** The completed record of (scope, key) if one is cached and usable at `now` (ms); a hit renews it. */
  get(scope: string, key: string, now: number): IdempotencyRecord | undefined {
    const id = recordSlot(scope, key);
    const entry = this.entries.get(id);
    if (entry === undefined) return undefined;
    this.entries.delete(id);
    if (entry.usableUntil <= now) return undefined;
    this.entries.set(id, entry);
    return entry.record;
  }

  /** Keeps `record` if it is completed with a response and still usable at `now` (ms); others are ignored. */
  remember(record: IdempotencyRecord, now: number): void {
    if (record.state !== 'completed' || record.response === undefined) return;
    const usableUntil = Math.min(record.expiresAt, now + this.options.maxAgeMs);
    if (usableUntil <= now) return;
    const id = recordSlot(record.scope, record.key);
    this.entries.delete(id);
    this.entries.set(id, { record, usableUntil });
    if (this.entries.size > this.options.maxEntries) {
      for (const oldest of this.entries.keys()) {
        this.entries.delete(oldest);
        break;
      }
    }
  }

  /** How many records are cached (expired ones included until they are looked up or pushed out). */
  get size(): number {
    return this.entries.size;
  }

  /**
   * Keeps the record a receiver just completed under `claim`, so the first retry is answered from it too.
   * Its times are the receiver's: claimed at `claimedAt`, completed at `now`, retained `retentionMs` from
   * then (all ms). A takeover's record is left out: its first claim's time is not known there.
   */
  rememberCompleted(claim: Claim, response: StoredResponse, claimedAt: number, now: number, retentionMs: number): void {
    if (claim.takeover) return;
    this.remember(
      {
        scope: claim.scope,
        key: claim.key,
        fingerprint: claim.fingerprint,
        state: 'completed',
        leaseToken: claim.leaseToken,
        leaseExpiresAt: claim.leaseExpiresAt,
        // Its own copy: the work's response object goes back to the caller, who may change or reuse it.
        response: frozenResponse(response),
        createdAt: claimedAt,
        completedAt: now,
        expiresAt: now + retentionMs,
      },
      now,
    );
  }
}
