/**
 * The Redis implementation of {@link IdempotencyStore}: one string key per record (its value laid out as
 * `layout.ts` describes), one Lua script per atomic operation.
 *
 * @module
 */
import type { Clock } from '../../core/clock.js';
import type { Claim, IdempotencyRecord, StoredResponse } from '../../core/record.js';
import type { ClaimInput, ClaimResult, IdempotencyStore, RecordQuery } from '../../core/store.js';
import { requireDurationMs, requireLimit, requireNonNegativeMs } from '../../core/validate.js';
import { claimOn, setClaimOn } from './claim.js';
import { claimManyOn } from './claim-many.js';
import { inspectServers, RedisEvictionPolicyError } from './eviction.js';
import { decodeRecord, encodeCompletionTimes, encodeIdentity, encodeTail } from './layout.js';
import { readHead, readRecord } from './record-read.js';
import { recordKey, recordPattern } from './keys.js';
import { Notifier } from './notifications.js';
import { untilReady } from './ready.js';
import { CHECKPOINT, CHECKPOINT_OVER_LIMIT, COMPLETE, COMPLETE_OVER_LIMIT, LISTEN, LISTEN_OVER_LIMIT, REAP, RELEASE, RENEW, RENEW_OVER_LIMIT } from './store-scripts.js';
import { ServerClock } from './server-clock.js';
import { type RedisTransport, scanKeys } from './transport.js';
import { recordTtlMs, REDIS_TTL_GRACE_MS } from './ttl.js';

/** Keys asked of each SCAN step of `reap` and `listAbandoned` (a hint to Redis, which bounds the work per step). */
const SCAN_COUNT = 250;

/** The resolved, frozen configuration of a {@link RedisStore}. */
interface RedisStoreConfig {
  /** The commands on the caller's client (`transport.ts`). */
  readonly client: RedisTransport;
  readonly prefix: string;
  /** Replaces Redis's `TIME` in every decision when set (tests on a fake clock). */
  readonly clock: Clock | undefined;
  readonly generateId: () => string;
  readonly subscriber: RedisTransport | undefined;
  /** Longest wait, in milliseconds, for a connection still being set up before an operation runs. */
  readonly readyTimeoutMs: number;
  /** Replicas that must acknowledge a claim, completion or checkpoint (0: none, no `WAIT`). */
  readonly waitReplicas: number;
  /** How long `WAIT` blocks for them, in milliseconds. */
  readonly waitReplicasTimeoutMs: number;
  /** Run on a server whose `maxmemory-policy` may evict records (with one warning) instead of refusing it. */
  readonly allowEvictingPolicy: boolean;
  readonly onWarning: (message: string) => void;
}

/** See `createRedisStore` in `factory.ts`, which validates the configuration. */
export class RedisStore implements IdempotencyStore {
  readonly kind = 'redis';
  private readonly notifier: Notifier;
  /** The servers' eviction policy was read and accepted since the connection last became ready. */
  private policyAccepted = false;
  /** The policy check in progress, shared by the operations that arrive meanwhile. */
  private policyCheck: Promise<void> | undefined;
  private warned = false;
  /** The servers run Redis 7 or later: `allow-oom` scripts for completions, renewals and recovery points; the plain `SET` claim. */
  private scriptFlags = false;
  /** Redis's clock as bounded from its `TIME` (one Redis, no injected clock): claims and completions decide and stamp by it. */
  private readonly serverClock = new ServerClock();
  /** A reconnect may land on a server configured otherwise (a restart, a failover): read the policy again. */
  private readonly onReconnect = (): void => {
    this.policyAccepted = false;
    this.serverClock.reset();
  };

  constructor(private readonly config: RedisStoreConfig) {
    const { client, subscriber } = config;
    this.notifier = new Notifier((onMessage) => (subscriber ?? client).subscriber(subscriber === undefined, onMessage));
    client.events.on('ready', this.onReconnect);
  }

  async claim(input: ClaimInput): Promise<ClaimResult> {
    const setup = this.ready();
    if (setup) await setup;
    const result = await this.claimOnce(input, this.key(input.scope, input.key), input.leaseToken ?? this.config.generateId());
    if (!result.acquired || this.config.waitReplicas === 0) return result;
    const pending = result.claim;
    try {
      await this.replicated(pending, 'claim');
    } catch (error) {
      // Fail closed: the work must not run on a claim a failover could still lose. Handing the lease back
      // lets a retry claim again at once rather than wait out the lease.
      await this.release(pending).catch(() => false);
      throw error;
    }
    return { acquired: true, claim: pending };
  }

  // Hot path: docs/hot-path.md#redis-set-claim
  /**
   * One claim of `input` at the Redis key `key` under `leaseToken`: a plain `SET … NX GET` deciding by the
   * bound of Redis's clock (`setClaimOn` in `claim.ts`) on one Redis of version 7 or later (`SET` takes `NX`
   * with `GET` since 7.0) with no injected clock, once there is a bound; else the claim script.
   */
  private claimOnce(input: ClaimInput, key: string, leaseToken: string): Promise<ClaimResult> {
    const node = this.scriptFlags ? this.boundedNode() : undefined;
    const bound = node && this.serverClock.latest(node);
    return node === undefined || bound === undefined ? claimOn(this.config.client, key, input, this.now(), leaseToken) : setClaimOn(node, key, input, leaseToken, bound);
  }

  /**
   * The whole batch in one script call per hash slot (`claim-many.ts`). With `waitReplicas` set, one claim
   * per input, each waiting for its replicas as {@link RedisStore.claim} does.
   */
  async claimMany(inputs: readonly ClaimInput[]): Promise<ClaimResult[]> {
    if (this.config.waitReplicas > 0) return Promise.all(inputs.map((input) => this.claim(input)));
    const setup = this.ready();
    if (setup) await setup;
    const keys = inputs.map((input) => this.key(input.scope, input.key));
    return claimManyOn(this.config.client, keys, inputs, this.now(), inputs.map((input) => input.leaseToken ?? this.config.generateId()));
  }

  /**
   * With `waitReplicas` set, blocks until that many replicas hold every write the record's master took so
   * far (Redis `WAIT`), so a failover that promotes one of them keeps the write.
   *
   * @throws Error when fewer replicas acknowledge within `waitReplicasTimeoutMs` (the write stays on the
   *   master, and may or may not survive its failure)
   */
  private async replicated(claim: Claim, write: string): Promise<void> {
    const { waitReplicas, waitReplicasTimeoutMs } = this.config;
    if (waitReplicas === 0) return;
    const acknowledged = await this.config.client.waitForReplicas(this.key(claim.scope, claim.key), waitReplicas, waitReplicasTimeoutMs);
    if (acknowledged < waitReplicas) {
      throw new Error(
        `retrysafe: the ${write} reached ${acknowledged} of ${waitReplicas} replicas within ${waitReplicasTimeoutMs} ms (option "waitReplicas"); a failover could lose it`,
      );
    }
  }

  async complete(claim: Claim, response: StoredResponse, retentionMs: number): Promise<boolean> {
    const setup = this.ready();
    if (setup) await setup;
    const now = this.completionNow();
    const reply = await (this.scriptFlags ? COMPLETE_OVER_LIMIT : COMPLETE).run(
      this.config.client,
      [this.key(claim.scope, claim.key)],
      [
        encodeIdentity(claim.fingerprint, claim.leaseToken),
        now === '' ? '' : encodeCompletionTimes(now, retentionMs),
        recordTtlMs(retentionMs),
        encodeTail(response),
      ],
    );
    if (reply !== 1) return false;
    if (this.config.waitReplicas > 0) await this.replicated(claim, 'completion');
    return true;
  }

  async release(claim: Claim): Promise<boolean> {
    const setup = this.ready();
    if (setup) await setup;
    return (await RELEASE.run(this.config.client, [this.key(claim.scope, claim.key)], [claim.leaseToken])) === 1;
  }

  async get(scope: string, key: string): Promise<IdempotencyRecord | undefined> {
    const setup = this.ready();
    if (setup) await setup;
    return readRecord(this.config.client, this.key(scope, key));
  }

  /** The injected clock's time, or `''`: the script then reads Redis's `TIME`. */
  private now(): number | '' {
    return this.config.clock === undefined ? '' : this.config.clock.now();
  }

  // Hot path: docs/hot-path.md#redis-completion-time
  /**
   * The completion time, sent so the completion script reads no `TIME`: the injected clock's, else
   * {@link RedisStore.serverBound}; `''` (the script reads `TIME`) when there is neither.
   */
  private completionNow(): number | '' {
    const { clock } = this.config;
    return clock !== undefined ? clock.now() : (this.serverBound() ?? '');
  }

  /**
   * With no injected clock, on one Redis, the upper bound of its clock (`server-clock.ts`, ms since the
   * epoch); `undefined` on Redis Cluster (whose masters each have a clock of their own), with an injected
   * clock, and while there is no bound.
   */
  private serverBound(): number | undefined {
    const node = this.boundedNode();
    return node && this.serverClock.latest(node);
  }

  /** The one Redis whose clock the store bounds: with no injected clock and not on Redis Cluster; else `undefined`. */
  private boundedNode(): RedisTransport | undefined {
    const { clock, client } = this.config;
    return clock === undefined && !client.cluster ? client : undefined;
  }

  /**
   * Walks the prefix's keys with SCAN (on Redis Cluster, on every master in turn) and runs the reap script
   * on each (the script re-checks expiry atomically, so a record claimed again meanwhile survives), until
   * `limit` records are deleted or the walk is done. Each call starts a fresh walk, so a call costs O(keys
   * under the prefix) in the worst case; the keys' own TTLs do the bulk of the cleanup.
   */
  async reap(limit: number): Promise<number> {
    await this.ready();
    const now = this.now();
    let deleted = 0;
    for await (const keys of scanKeys(this.config.client, recordPattern(this.config.prefix), SCAN_COUNT)) {
      // Pipelined in slices no larger than what is left of `limit`, so the count can never overshoot it.
      for (let i = 0; i < keys.length && deleted < limit; ) {
        const slice = keys.slice(i, i + (limit - deleted));
        i += slice.length;
        const replies = await Promise.all(slice.map((key) => REAP.run(this.config.client, [key], [now])));
        deleted += replies.filter((reply) => reply === 1).length;
      }
      if (deleted >= limit) break;
    }
    return deleted;
  }

  /**
   * One script run, fenced by the lease token; see `scripts/renew.lua.ts`. Not followed by `WAIT` (under
   * `waitReplicas`): a renewal lost in a failover shortens the lease back to its previous end, which the
   * next renewal, a third of a lease later, puts right. Over `maxmemory` (Redis 7 and later) the renewal of
   * an admitted claim still runs: a keep-alive refused there would let a live holder's lease end.
   */
  async renew(claim: Claim, leaseMs: number): Promise<Claim | undefined> {
    requireDurationMs('leaseMs', leaseMs, 'renew');
    await this.ready();
    const reply = await (this.scriptFlags ? RENEW_OVER_LIMIT : RENEW).run(this.config.client, [this.key(claim.scope, claim.key)], [claim.leaseToken, this.now(), leaseMs, REDIS_TTL_GRACE_MS]);
    return Buffer.isBuffer(reply) ? { ...claim, leaseExpiresAt: Number(reply.toString('latin1')) } : undefined;
  }

  /** One script run, fenced by the lease token; see `scripts/checkpoint.lua.ts`. */
  async checkpoint(claim: Claim, recoveryPoint: string, leaseMs: number): Promise<Claim | undefined> {
    requireNonNegativeMs('leaseMs', leaseMs, 'checkpoint');
    await this.ready();
    const reply = await (this.scriptFlags ? CHECKPOINT_OVER_LIMIT : CHECKPOINT).run(
      this.config.client,
      [this.key(claim.scope, claim.key)],
      [claim.leaseToken, recoveryPoint, this.now(), leaseMs, REDIS_TTL_GRACE_MS],
    );
    if (Buffer.isBuffer(reply)) await this.replicated(claim, 'checkpoint');
    return Buffer.isBuffer(reply) ? { ...claim, leaseExpiresAt: Number(reply.toString('latin1')), recoveryPoint } : undefined;
  }

  /** `PING`, after the eviction check: a store that refuses its server's policy rejects here too. */
  async ping(): Promise<void> {
    const setup = this.ready();
    if (setup) await setup;
    await this.config.client.ping();
  }

  /**
   * Walks the prefix with SCAN as `listAbandoned` does (on Redis Cluster every master in turn), and stops
   * as soon as `limit` expired leases are counted.
   */
  async countExpiredLeases(limit: number): Promise<number> {
    requireLimit('countExpiredLeases', limit);
    const { client } = this.config;
    const now = this.config.clock?.now() ?? (await serverTime(client));
    const expired = new Set<string>();
    for await (const keys of scanKeys(client, recordPattern(this.config.prefix), SCAN_COUNT)) {
      const heads = await Promise.all(keys.map((key) => readHead(this.config.client, key)));
      keys.forEach((key, i) => {
        const head = heads[i];
        if (head?.state === 'in_progress' && head.leaseExpiresAt <= now && head.expiresAt > now) expired.add(key);
      });
      if (expired.size >= limit) break;
    }
    return Math.min(expired.size, limit);
  }

  /**
   * One page of records in (scope, key) order (JavaScript string order). Redis keeps no ordered index of
   * records, so this walks the prefix with SCAN (bounded work per step; on Redis Cluster every master in
   * turn) and keeps only the first `query.limit` matches in memory; the cost grows with the number of
   * records, not with the page.
   */
  async listRecords(query: RecordQuery): Promise<IdempotencyRecord[]> {
    const { limit } = query;
    requireLimit('listRecords', limit);
    await this.ready();
    const { client } = this.config;
    const before = (a: readonly [string, string], b: readonly [string, string]): boolean => a[0] < b[0] || (a[0] === b[0] && a[1] < b[1]);
    const after = query.after === undefined ? undefined : ([query.after.scope, query.after.key] as const);
    // Redis key → (scope, key); SCAN may return a key twice, the map keeps it once.
    let page = new Map<string, readonly [string, string]>();
    for await (const keys of scanKeys(client, recordPattern(this.config.prefix), SCAN_COUNT)) {
      const heads = await Promise.all(keys.map((key) => readHead(this.config.client, key)));
      keys.forEach((redisKey, i) => {
        const head = heads[i];
        if (head === undefined) return;
        const { scope, key } = head;
        if (query.state !== undefined && head.state !== query.state) return;
        if (query.scope !== undefined && scope !== query.scope) return;
        if (query.keyPrefix !== undefined && !key.startsWith(query.keyPrefix)) return;
        if (after !== undefined && !before(after, [scope, key])) return;
        page.set(redisKey, [scope, key]);
      });
      if (page.size > limit) page = new Map([...page].sort((a, b) => (before(a[1], b[1]) ? -1 : 1)).slice(0, limit));
    }
    const records = await Promise.all([...page.keys()].map((key) => readRecord(this.config.client, key)));
    return records
      .filter((record): record is IdempotencyRecord => record !== undefined && (query.state === undefined || record.state === query.state))
      .sort((a, b) => (before([a.scope, a.key], [b.scope, b.key]) ? -1 : 1));
  }

  /**
   * Walks every key under the prefix with SCAN (steps of about 250 keys), reading each step's candidates'
   * heads with one pipelined `GETRANGE` per key and keeping only the `limit` oldest abandoned ones in
   * memory; then reads those records whole and checks them again (a record claimed or completed meanwhile
   * drops out). Changes nothing (but for rewriting a retrysafe 0.1.0 record hash it meets in the current
   * layout) and is not atomic: the completer claims each record before resuming it anyway.
   *
   * Cost: unlike `reap`, it cannot stop early — "oldest lease first" needs every candidate — so each call
   * is O(keys under the prefix) in SCAN steps and round trips, however few records are abandoned. A
   * sorted-set index kept by the scripts would make it O(log n + limit), but that index key would live in
   * another Redis Cluster slot than the record's hash tag, so no single script could update both: the
   * store would stop working on Cluster. The completer runs rarely (say, once a minute), so the scan is
   * the better trade; give it a prefix of its own to keep the walk short. On Redis Cluster the walk visits
   * every master in turn.
   */
  async listAbandoned(limit: number): Promise<IdempotencyRecord[]> {
    requireLimit('listAbandoned', limit);
    await this.ready();
    const { client } = this.config;
    const now = this.config.clock?.now() ?? (await serverTime(client));
    // Redis key → lease end; SCAN may return a key twice, the map keeps it once.
    let oldest = new Map<string, number>();
    for await (const keys of scanKeys(client, recordPattern(this.config.prefix), SCAN_COUNT)) {
      const heads = await Promise.all(keys.map((key) => readHead(this.config.client, key)));
      keys.forEach((key, i) => {
        const head = heads[i];
        if (head?.state === 'in_progress' && head.recoveryPoint !== undefined && head.leaseExpiresAt <= now && head.expiresAt > now) {
          oldest.set(key, head.leaseExpiresAt);
        }
      });
      if (oldest.size > limit) oldest = new Map([...oldest].sort((a, b) => a[1] - b[1]).slice(0, limit));
    }
    const records = await Promise.all([...oldest.keys()].map((key) => readRecord(this.config.client, key)));
    return records
      .filter(
        (record): record is IdempotencyRecord =>
          record !== undefined &&
          record.state === 'in_progress' &&
          record.recoveryPoint !== undefined &&
          record.leaseExpiresAt <= now &&
          record.expiresAt > now,
      )
      .sort((a, b) => a.leaseExpiresAt - b.leaseExpiresAt);
  }

  /**
   * Resolves once the record is completed or gone, or after `timeoutMs` with the record as it stands. The
   * record is read once before subscribing (the common case: nothing to wait for), and once the SUBSCRIBE
   * is acknowledged the listen script (`scripts/listen.lua.ts`) marks it as waited for and reads it again
   * in the same step: a completion before the mark is read there, one after it sees the mark and
   * publishes, so none is lost.
   */
  async waitFor(scope: string, key: string, timeoutMs: number): Promise<IdempotencyRecord | undefined> {
    const first = await this.get(scope, key);
    if (first?.state !== 'in_progress') return first;
    const subscription = this.notifier.subscribe(this.key(scope, key));
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<'timeout'>((resolve) => (timer = setTimeout(() => resolve('timeout'), timeoutMs)));
    try {
      if ((await Promise.race([subscription.ready, timeout])) !== 'timeout') {
        const current = await this.listen(this.key(scope, key));
        if (current?.state !== 'in_progress') return current;
        await Promise.race([subscription.changed, timeout]);
      }
      return await this.get(scope, key);
    } finally {
      clearTimeout(timer);
      subscription.stop();
    }
  }

  /** The record at the Redis key `key` after the listen script marked it as waited for, or `undefined` when there is none. */
  private async listen(key: string): Promise<IdempotencyRecord | undefined> {
    const value = (await (this.scriptFlags ? LISTEN_OVER_LIMIT : LISTEN).run(this.config.client, [key], [])) as Buffer | null;
    return value === null ? undefined : decodeRecord(value);
  }

  /** Wakes pending `waitFor` calls and closes the subscriber connection the store opened; the client stays open. */
  close(): Promise<void> {
    this.config.client.events.off('ready', this.onReconnect);
    return this.notifier.close();
  }

  // Hot path: docs/hot-path.md#redis-ready-check
  /**
   * Waits (bounded) for a connection still being set up: see `ready.ts`. `undefined` when there is nothing
   * to wait for, so an operation on a ready connection awaits nothing (`await undefined` still costs a turn
   * of the microtask queue: callers test it first).
   */
  private ready(): Promise<void> | undefined {
    const setup = untilReady(this.config.client, this.config.readyTimeoutMs);
    return this.policyAccepted ? setup : this.acceptPolicy(setup);
  }

  /**
   * Reads the eviction policy once the connection is set up (see `eviction.ts`); operations that arrive
   * meanwhile share the check. A server that cannot be reached leaves the policy unread, so the next
   * operation reads it again.
   *
   * @throws RedisEvictionPolicyError when a server's policy may evict records and `allowEvictingPolicy` is off
   */
  private async acceptPolicy(setup: Promise<void> | undefined): Promise<void> {
    if (setup) await setup;
    this.policyCheck ??= this.checkPolicy().finally(() => {
      this.policyCheck = undefined;
    });
    await this.policyCheck;
  }

  private async checkPolicy(): Promise<void> {
    const { client } = this.config;
    const inspection = await inspectServers(client);
    this.scriptFlags = inspection.scriptFlags;
    // Without a bound (Redis unreachable meanwhile) the scripts read \`TIME\` until a later one arrives.
    const node = this.boundedNode();
    if (node) await this.serverClock.sync(node).catch(() => undefined);
    const evicting = inspection.evicting[0];
    if (evicting !== undefined) {
      const refusal = new RedisEvictionPolicyError(evicting.policy, evicting.server, { cause: evicting.cause });
      if (!this.config.allowEvictingPolicy) throw refusal;
      if (!this.warned) {
        this.warned = true;
        this.config.onWarning(`${refusal.message} (running anyway: allowEvictingPolicy is true)`);
      }
    }
    this.policyAccepted = true;
  }

  private key(scope: string, key: string): string {
    return recordKey(this.config.prefix, scope, key);
  }
}

/** Redis's clock (`TIME`) in milliseconds since the epoch. */
async function serverTime(client: RedisTransport): Promise<number> {
  const [seconds, micros] = await client.time();
  return Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
}
