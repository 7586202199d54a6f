/**
 * The in-memory store: one process, no persistence. For tests, development and single-instance services
 * where losing the records on restart is acceptable.
 *
 * @module
 */
import { systemClock, type Clock } from '../core/clock.js';
import { randomLeaseToken } from '../core/lease-token.js';
import { claimOf, copiedResponse, recordSlot, type Claim, type IdempotencyRecord, type StoredResponse } from '../core/record.js';
import type { ClaimInput, ClaimResult, IdempotencyStore } from '../core/store.js';
import { settled } from '../core/settled.js';
import { requireDurationMs, requireLimit, requireNonNegativeMs } from '../core/validate.js';
import { attempt } from './sqlite/attempt.js';

/** Options of {@link createMemoryStore}. */
export interface MemoryStoreOptions {
  /** Time source. @defaultValue the system clock */
  readonly clock?: Clock;
  /** Fencing-token generator. @defaultValue a random UUID (version 4), as `crypto.randomUUID` makes one */
  readonly generateId?: () => string;
}

/**
 * How often a claim also sweeps expired records off the store, in milliseconds of the store's clock: at
 * most once per interval, every scope's oldest records are deleted while they are expired and not under a
 * live lease, so memory stays bounded by the retention window without anyone calling `reap`.
 */
const SWEEP_INTERVAL_MS = 1_000;

/**
 * Creates an in-memory {@link IdempotencyStore}. Operations complete synchronously under the hood, so a
 * claim is atomic within the process; `claim`, `complete` and `release` return promises that carry their
 * value (`settled`), which the receiver reads in the same turn; `waitFor` is served from in-process
 * notifications. The records it
 * hands out are frozen, and a completed record holds its own copy of the response body, so no caller can
 * change what is stored.
 *
 * Expired records go without a reaper: at most once a second (of its clock) a claim deletes, scope by
 * scope, the oldest records while they are expired, so a long-running process holds about one retention
 * window of records. The sweep stops at a scope's first live record, so a record behind a longer-lived
 * one may stay until that one expires; `reap(limit)` still finds every expired record.
 *
 * @example
 * ```ts
 * import { createMemoryStore, createReceiver } from 'retrysafe';
 * const receiver = createReceiver({ store: createMemoryStore() });
 * ```
 */
export function createMemoryStore(options: MemoryStoreOptions = {}): IdempotencyStore {
  return new MemoryStore(options.clock ?? systemClock, options.generateId ?? randomLeaseToken);
}

type Waiter = (record: IdempotencyRecord | undefined) => void;

class MemoryStore implements IdempotencyStore {
  // Records by scope, then key: the key strings arrive already hashed (the claim's own), where a joined
  // (scope, key) string would be built and hashed afresh on every operation.
  private readonly records = new Map<string, Map<string, IdempotencyRecord>>();
  private readonly waiters = new Map<string, Set<Waiter>>();
  private nextSweepAt = Number.NEGATIVE_INFINITY;

  readonly kind = 'memory';

  constructor(
    private readonly clock: Clock,
    private readonly generateId: () => string,
  ) {}

  ping(): Promise<void> {
    return Promise.resolve();
  }

  countExpiredLeases(limit: number): Promise<number> {
    return attempt(() => {
      requireLimit('countExpiredLeases', limit);
      const now = this.clock.now();
      let count = 0;
      for (const scoped of this.records.values()) {
        for (const record of scoped.values()) {
          if (record.state === 'in_progress' && record.leaseExpiresAt <= now && record.expiresAt > now && ++count >= limit) return count;
        }
      }
      return count;
    });
  }

  claim(input: ClaimInput): Promise<ClaimResult> {
    const now = this.clock.now();
    if (now >= this.nextSweepAt) {
      this.nextSweepAt = now + SWEEP_INTERVAL_MS;
      this.sweep(now);
    }
    let scoped = this.records.get(input.scope);
    if (!scoped) {
      scoped = new Map();
      this.records.set(input.scope, scoped);
    }
    // The claim decision table of docs/semantics.md, rows C1 to C7; C4 is tried before C3.
    const existing = scoped.get(input.key);
    // C4: in progress, its lease over, the same fingerprint.
    const takeover =
      existing !== undefined &&
      existing.expiresAt > now &&
      existing.state === 'in_progress' &&
      existing.leaseExpiresAt <= now &&
      existing.fingerprint === input.fingerprint;
    if (existing && existing.expiresAt > now && !takeover) {
      if (existing.state === 'in_progress' && existing.leaseToken === input.leaseToken && existing.fingerprint === input.fingerprint) {
        // C3: the owner's own claim again: it holds the lease, unchanged.
        return settled({ acquired: true, claim: claimOf(input, existing.leaseToken, existing.leaseExpiresAt, false, existing.recoveryPoint) });
      }
      // C5 to C7: the record stands (another fingerprint, completed, or a live lease).
      return settled({ acquired: false, record: handedOut(existing) });
    }
    // C1 (no record), C2 (retention over: created now, no recovery point) or C4 (takeover: both kept).
    const leaseToken = input.leaseToken ?? this.generateId();
    const leaseExpiresAt = now + input.leaseMs;
    const recoveryPoint = takeover ? existing.recoveryPoint : undefined;
    // Plain literals: a conditional spread sends V8 down its slow object-cloning path on every claim.
    const record: IdempotencyRecord = {
      scope: input.scope,
      key: input.key,
      fingerprint: input.fingerprint,
      state: 'in_progress',
      leaseToken,
      leaseExpiresAt,
      createdAt: takeover ? existing.createdAt : now,
      expiresAt: now + input.retentionMs,
    };
    scoped.set(input.key, recoveryPoint === undefined ? record : { ...record, recoveryPoint });
    return settled({ acquired: true, claim: claimOf(input, leaseToken, leaseExpiresAt, takeover, recoveryPoint) });
  }

  /** One claim after another: each is synchronous here, so the loop is as atomic as one claim. */
  claimMany(inputs: readonly ClaimInput[]): Promise<ClaimResult[]> {
    return Promise.all(inputs.map((input) => this.claim(input)));
  }

  complete(claim: Claim, response: StoredResponse, retentionMs: number): Promise<boolean> {
    const current = this.held(claim);
    if (!current) return settled(this.completedBy(claim));
    const now = this.clock.now();
    // Copied once on the way in, so the work's response object can be changed afterwards; frozen when the
    // record is first handed out (the body bytes, which cannot be frozen, are the store's own copy).
    const saved = copiedResponse(response);
    const completed: IdempotencyRecord = {
      scope: current.scope,
      key: current.key,
      fingerprint: current.fingerprint,
      state: 'completed',
      leaseToken: current.leaseToken,
      leaseExpiresAt: current.leaseExpiresAt,
      response: saved,
      createdAt: current.createdAt,
      completedAt: now,
      expiresAt: now + retentionMs,
    };
    const stored = current.recoveryPoint === undefined ? completed : { ...completed, recoveryPoint: current.recoveryPoint };
    this.records.get(claim.scope)?.set(claim.key, stored);
    this.notify(claim.scope, claim.key, stored);
    return settled(true);
  }

  release(claim: Claim): Promise<boolean> {
    if (!this.held(claim)) return settled(false);
    this.remove(claim.scope, claim.key);
    this.notify(claim.scope, claim.key, undefined);
    return settled(true);
  }

  renew(claim: Claim, leaseMs: number): Promise<Claim | undefined> {
    return attempt(() => {
      requireDurationMs('leaseMs', leaseMs, 'renew');
      const current = this.held(claim);
      if (!current) return undefined;
      const leaseExpiresAt = this.clock.now() + leaseMs;
      this.records.get(claim.scope)?.set(claim.key, {
        ...current,
        leaseExpiresAt,
        expiresAt: Math.max(current.expiresAt, leaseExpiresAt),
      });
      return { ...claim, leaseExpiresAt };
    });
  }

  checkpoint(claim: Claim, recoveryPoint: string, leaseMs: number): Promise<Claim | undefined> {
    return attempt(() => {
      requireNonNegativeMs('leaseMs', leaseMs, 'checkpoint');
      const current = this.held(claim);
      if (!current) return undefined;
      const leaseExpiresAt = this.clock.now() + leaseMs;
      this.records.get(claim.scope)?.set(claim.key, {
        ...current,
        recoveryPoint,
        leaseExpiresAt,
        expiresAt: Math.max(current.expiresAt, leaseExpiresAt),
      });
      return { ...claim, leaseExpiresAt, recoveryPoint };
    });
  }

  listAbandoned(limit: number): Promise<IdempotencyRecord[]> {
    return attempt(() => {
      requireLimit('listAbandoned', limit);
      const now = this.clock.now();
      const abandoned = [...this.records.values()].flatMap((scoped) => [...scoped.values()]).filter(
        (record) =>
          record.state === 'in_progress' &&
          record.recoveryPoint !== undefined &&
          record.leaseExpiresAt <= now &&
          record.expiresAt > now,
      );
      abandoned.sort((a, b) => a.leaseExpiresAt - b.leaseExpiresAt);
      return abandoned.slice(0, limit).map(handedOut);
    });
  }

  get(scope: string, key: string): Promise<IdempotencyRecord | undefined> {
    return Promise.resolve(handedOutIfAny(this.records.get(scope)?.get(key)));
  }

  reap(limit: number): Promise<number> {
    const now = this.clock.now();
    let deleted = 0;
    for (const [scope, scoped] of this.records) {
      for (const [key, record] of scoped) {
        if (deleted >= limit) break;
        if (reapable(record, now)) {
          scoped.delete(key);
          deleted++;
        }
      }
      if (scoped.size === 0) this.records.delete(scope);
      if (deleted >= limit) break;
    }
    return Promise.resolve(deleted);
  }

  waitFor(scope: string, key: string, timeoutMs: number): Promise<IdempotencyRecord | undefined> {
    const current = this.records.get(scope)?.get(key);
    if (current?.state !== 'in_progress') return Promise.resolve(handedOutIfAny(current));
    const id = recordSlot(scope, key);
    return new Promise((resolve) => {
      const waiters = this.waiters.get(id) ?? new Set<Waiter>();
      this.waiters.set(id, waiters);
      const done: Waiter = (record) => {
        clearTimeout(timer);
        waiters.delete(done);
        if (waiters.size === 0) this.waiters.delete(id);
        resolve(record);
      };
      const timer = setTimeout(() => done(handedOutIfAny(this.records.get(scope)?.get(key))), timeoutMs);
      waiters.add(done);
    });
  }

  close(): Promise<void> {
    for (const [id, waiters] of this.waiters) for (const done of [...waiters]) done(this.recordAt(id));
    this.records.clear();
    return Promise.resolve();
  }

  /** Deletes each scope's oldest records (a Map iterates in insertion order) while they are reapable. */
  private sweep(now: number): void {
    for (const [scope, scoped] of this.records) {
      for (const [key, record] of scoped) {
        if (!reapable(record, now)) break;
        scoped.delete(key);
      }
      if (scoped.size === 0) this.records.delete(scope);
    }
  }

  private held(claim: Claim): IdempotencyRecord | undefined {
    const current = this.records.get(claim.scope)?.get(claim.key);
    return current?.state === 'in_progress' && current.leaseToken === claim.leaseToken ? current : undefined;
  }

  /** Whether the record is already completed under the claim's token (a completion run again). */
  private completedBy(claim: Claim): boolean {
    const current = this.records.get(claim.scope)?.get(claim.key);
    return current?.state === 'completed' && current.leaseToken === claim.leaseToken;
  }

  private remove(scope: string, key: string): void {
    const scoped = this.records.get(scope);
    if (scoped?.delete(key) === true && scoped.size === 0) this.records.delete(scope);
  }

  private notify(scope: string, key: string, record: IdempotencyRecord | undefined): void {
    if (this.waiters.size === 0) return;
    const waiters = this.waiters.get(recordSlot(scope, key));
    if (waiters) for (const done of [...waiters]) done(handedOutIfAny(record));
  }

  /** The record under a {@link slot} id. */
  private recordAt(id: string): IdempotencyRecord | undefined {
    const colon = id.indexOf(':');
    const end = colon + 1 + Number(id.slice(0, colon));
    return handedOutIfAny(this.records.get(id.slice(colon + 1, end))?.get(id.slice(end)));
  }
}

// Hot path: docs/hot-path.md#fastify-memory-path
/**
 * `record` as the store hands it out: frozen, with its response and the response's headers. Frozen on its
 * first hand-out (a claim that lost to it, `get`, `waitFor`, `listAbandoned`), not when stored: a record
 * only the store holds cannot be changed by anyone, and most in-progress records are never handed out.
 */
function handedOut(record: IdempotencyRecord): IdempotencyRecord {
  if (Object.isFrozen(record)) return record;
  const response = record.response;
  if (response !== undefined) {
    Object.freeze(response.headers);
    Object.freeze(response);
  }
  return Object.freeze(record);
}

function handedOutIfAny(record: IdempotencyRecord | undefined): IdempotencyRecord | undefined {
  return record === undefined ? undefined : handedOut(record);
}

/** Expired, and not under a live lease (a lease may outlast the retention; its holder may still complete). */
function reapable(record: IdempotencyRecord, now: number): boolean {
  return record.expiresAt <= now && !(record.state === 'in_progress' && record.leaseExpiresAt > now);
}
