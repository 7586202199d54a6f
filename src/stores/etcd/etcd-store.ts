/**
 * The etcd implementation of {@link IdempotencyStore}: one key per record (its value laid out as
 * `layout.ts` describes), every write one etcd transaction conditioned on the key's revision.
 *
 * @module
 */
import type { Etcd3 } from 'etcd3';
import type { Clock } from '../../core/clock.js';
import { claimOf, type Claim, type IdempotencyRecord, type StoredResponse } from '../../core/record.js';
import type { ResponseBodyId, ResponseBodyStore } from '../../core/response-bodies.js';
import type { ClaimInput, ClaimResult, IdempotencyStore, RecordQuery } from '../../core/store.js';
import { requireLimit } from '../../core/validate.js';
import { bodyExpiresAt, bodyIdOf, externalOf, withBody } from './aside.js';
import { change, decided, type Change } from './change.js';
import { keptResponse } from './kept.js';
import { decodeRecord, type StoredRecord } from './layout.js';
import { RecordLeases } from './leases.js';
import { scanRecords } from './scan.js';
import { ConditionalWriter, rangeOf } from './write.js';

/** The resolved, frozen configuration of an {@link EtcdStore}. */
interface EtcdStoreConfig {
  readonly client: Etcd3;
  readonly prefix: string;
  readonly clock: Clock;
  readonly generateId: () => string;
  /** Largest response body kept in etcd, in bytes; a longer one goes to `responseStore`, else is saved without its body. */
  readonly maxResponseBytes: number;
  /** Where bodies over `maxResponseBytes` are kept, if anywhere. */
  readonly responseStore: ResponseBodyStore | undefined;
}

/** See `createEtcdStore` in `factory.ts`, which validates the configuration. */
export class EtcdStore implements IdempotencyStore {
  readonly kind = 'etcd';
  private readonly writer: ConditionalWriter;
  private readonly recordPrefix: Buffer;

  constructor(private readonly config: EtcdStoreConfig) {
    this.writer = new ConditionalWriter(config.client.kv, new RecordLeases(config.client));
    this.recordPrefix = Buffer.from(`${config.prefix}/r/`, 'utf8');
  }

  /**
   * One transaction for a new key: if the key was never created (`create_revision == 0`) put the record,
   * else read it. A record that stands is answered from that read; a takeover (lease expired, same
   * fingerprint) or a key new again (retention over) is one more transaction, conditioned on the revision
   * read, so of many concurrent claimants exactly one wins.
   */
  async claim(input: ClaimInput): Promise<ClaimResult> {
    const key = this.key(input.scope, input.key);
    const now = this.config.clock.now();
    const leaseToken = input.leaseToken ?? this.config.generateId();
    const leaseExpiresAt = now + input.leaseMs;
    const fresh: IdempotencyRecord = {
      scope: input.scope,
      key: input.key,
      fingerprint: input.fingerprint,
      state: 'in_progress',
      leaseToken,
      leaseExpiresAt,
      createdAt: now,
      expiresAt: now + input.retentionMs,
    };
    const until = Math.max(input.leaseMs, input.retentionMs);
    let reply = await this.writer.write(key, undefined, { put: fresh, fence: undefined, takeover: false, untilMs: until });
    for (;;) {
      if (reply.succeeded) return { acquired: true, claim: this.claimWon(input, leaseToken, leaseExpiresAt, reply.header.revision) };
      const kv = rangeOf(reply);
      if (kv === undefined) {
        reply = await this.writer.write(key, undefined, { put: fresh, fence: undefined, takeover: false, untilMs: until });
        continue;
      }
      const standing = decodeRecord(kv.value, kv.mod_revision);
      const { record } = standing;
      if (record.expiresAt > now) {
        const takeover = record.state === 'in_progress' && record.leaseExpiresAt <= now && record.fingerprint === input.fingerprint;
        if (!takeover) {
          if (record.state === 'in_progress' && record.leaseToken === leaseToken && record.fingerprint === input.fingerprint) {
            // The owner's own claim again, or this very claim: etcd3 sends a request that failed with a
            // recoverable error again (to another member), and the first attempt may have committed.
            const again = claimOf(input, record.leaseToken, record.leaseExpiresAt, standing.takeover, record.recoveryPoint);
            return { acquired: true, claim: withFence(again, standing.fence) };
          }
          // Only a replay (same fingerprint) needs the body: a mismatch is refused without it.
          return { acquired: false, record: record.fingerprint === input.fingerprint ? await withBody(this.config.responseStore, standing) : record };
        }
        const next: IdempotencyRecord = { ...fresh, createdAt: record.createdAt, ...(record.recoveryPoint !== undefined && { recoveryPoint: record.recoveryPoint }) };
        reply = await this.writer.write(key, kv.mod_revision, { put: next, fence: undefined, takeover: true, untilMs: Math.max(until, record.expiresAt - now) });
        if (reply.succeeded) {
          const won = claimOf(input, leaseToken, leaseExpiresAt, true, record.recoveryPoint);
          return { acquired: true, claim: withFence(won, reply.header.revision) };
        }
        continue;
      }
      reply = await this.writer.write(key, kv.mod_revision, { put: fresh, fence: undefined, takeover: false, untilMs: until });
    }
  }

  private claimWon(input: ClaimInput, leaseToken: string, leaseExpiresAt: number, revision: string): Claim {
    return withFence(claimOf(input, leaseToken, leaseExpiresAt, false), revision);
  }

  /**
   * Idempotent for its own token: the record already completed under `claim`'s lease token answers `true`
   * and is left as it is, so a completion whose reply was lost can be sent again.
   */
  complete(claim: Claim, response: StoredResponse, retentionMs: number): Promise<boolean> {
    const side = this.config.responseStore;
    if (side !== undefined && response.body.byteLength > this.config.maxResponseBytes) return this.completeAside(side, claim, response, retentionMs);
    const kept = keptResponse(response, this.config.maxResponseBytes);
    return this.change(claim, (stored, now) => {
      if (stored === undefined || stored.record.leaseToken !== claim.leaseToken) return decided(false);
      const { record } = stored;
      if (record.state === 'completed') return decided(true);
      const completed: IdempotencyRecord = { ...record, state: 'completed', response: kept, completedAt: now, expiresAt: now + retentionMs };
      return { result: true, write: { put: completed, fence: stored.fence, takeover: stored.takeover, untilMs: retentionMs } };
    });
  }

  /**
   * A body over `maxResponseBytes` with a `responseStore`: the body is put under (scope, key, fencing
   * token) before the completion's etcd transaction is sent, so a record completed in etcd always points
   * at a body already durable. A completion fenced off (taken over, released, reaped) deletes the body it
   * put; one that fails on etcd leaves it (the completion may have committed) to the side store's TTL.
   */
  private async completeAside(side: ResponseBodyStore, claim: Claim, response: StoredResponse, retentionMs: number): Promise<boolean> {
    const external = externalOf(response.body);
    const head: StoredResponse = { status: response.status, headers: response.headers, body: new Uint8Array(0) };
    let written: ResponseBodyId | undefined;
    const done = await this.change(claim, (stored, now) => {
      if (stored === undefined || stored.record.leaseToken !== claim.leaseToken) return decided(false);
      const { record } = stored;
      if (record.state === 'completed') return decided(true);
      const completed: IdempotencyRecord = { ...record, state: 'completed', response: head, completedAt: now, expiresAt: now + retentionMs };
      const id = bodyIdOf(stored);
      const put = async (): Promise<void> => {
        await side.put(id, response.body, bodyExpiresAt(now, retentionMs));
        written = id;
      };
      return { result: true, ...(written === undefined && { before: put }), write: { put: completed, fence: stored.fence, takeover: stored.takeover, untilMs: retentionMs, external } };
    });
    if (!done && written !== undefined) await side.delete(written);
    return done;
  }

  /**
   * Deletes the record while held. With a `responseStore`, the body a completion of this holder may have
   * put without committing is deleted first (one more round trip to the side store).
   */
  release(claim: Claim): Promise<boolean> {
    const side = this.config.responseStore;
    return this.change(claim, (stored) => {
      if (!held(stored, claim)) return decided(false);
      return { result: true, ...(side !== undefined && { before: async () => void (await side.delete(bodyIdOf(stored))) }), write: { delete: true } };
    });
  }

  /** One transaction conditioned on the revision read: the recovery point and the new lease, the token kept. */
  checkpoint(claim: Claim, recoveryPoint: string, leaseMs: number): Promise<Claim | undefined> {
    if (!Number.isSafeInteger(leaseMs) || leaseMs < 0) {
      return Promise.reject(new TypeError(`retrysafe: checkpoint leaseMs must be a non-negative integer, got ${String(leaseMs)}`));
    }
    return this.renewing(claim, leaseMs, recoveryPoint);
  }

  /**
   * Fenced lease keep-alive: while the record is `in_progress` under `claim`'s lease token, its lease ends
   * `leaseMs` milliseconds from now (the store's clock), its token and recovery point kept and its retention
   * stretched to cover the lease. One read and one transaction conditioned on the revision read.
   *
   * @returns the renewed claim, or `undefined` when fenced off (taken over, completed, released or reaped)
   * @throws TypeError (as a rejection) when `leaseMs` is not a positive safe integer
   */
  renew(claim: Claim, leaseMs: number): Promise<Claim | undefined> {
    if (!Number.isSafeInteger(leaseMs) || leaseMs <= 0) {
      return Promise.reject(new TypeError(`retrysafe: renew option "leaseMs" must be a positive integer number of milliseconds, got ${String(leaseMs)}`));
    }
    return this.renewing(claim, leaseMs, undefined);
  }

  private renewing(claim: Claim, leaseMs: number, recoveryPoint: string | undefined): Promise<Claim | undefined> {
    return this.change<Claim | undefined>(claim, (stored, now) => {
      if (!held(stored, claim)) return decided(undefined);
      const { record } = stored;
      const leaseExpiresAt = now + leaseMs;
      const point = recoveryPoint ?? record.recoveryPoint;
      const renewed: IdempotencyRecord = {
        ...record,
        leaseExpiresAt,
        expiresAt: Math.max(record.expiresAt, leaseExpiresAt),
        ...(point !== undefined && { recoveryPoint: point }),
      };
      const result = withFence({ ...claim, leaseExpiresAt, ...(point !== undefined && { recoveryPoint: point }) }, stored.fence);
      return { result, write: { put: renewed, fence: stored.fence, takeover: stored.takeover, untilMs: renewed.expiresAt - now } };
    });
  }

  async get(scope: string, key: string): Promise<IdempotencyRecord | undefined> {
    const stored = await this.read(this.key(scope, key));
    return stored === undefined ? undefined : await withBody(this.config.responseStore, stored);
  }

  /**
   * The fencing token of the record's current holder (the etcd revision of its claim's write, a decimal
   * string), or `undefined` when the record is absent.
   */
  async fencingToken(scope: string, key: string): Promise<string | undefined> {
    return (await this.read(this.key(scope, key)))?.fence;
  }

  /**
   * Walks the prefix in pages and deletes each expired record (retention over, no live lease) with a
   * transaction conditioned on the revision read, so a record claimed again meanwhile survives; stops once
   * `limit` are deleted. The record leases drop what no reap reaches, a grace after its retention. With a
   * `responseStore`, the body of each deleted record is deleted after it, and then up to `limit` bodies
   * past their own expiry (those of completions that never committed, or of records etcd dropped) are.
   */
  async reap(limit: number): Promise<number> {
    const now = this.config.clock.now();
    const side = this.config.responseStore;
    let deleted = 0;
    for await (const page of scanRecords(this.config.client.kv, this.recordPrefix)) {
      for (const stored of page) {
        if (deleted >= limit) break;
        const { record } = stored;
        if (record.expiresAt > now || (record.state === 'in_progress' && record.leaseExpiresAt > now)) continue;
        const reply = await this.writer.write(this.key(record.scope, record.key), stored.modRevision, { delete: true });
        if (!reply.succeeded) continue;
        deleted++;
        if (side !== undefined && stored.external !== undefined) await side.delete(bodyIdOf(stored));
      }
      if (deleted >= limit) break;
    }
    if (side !== undefined) await side.deleteExpired(now, limit);
    return deleted;
  }

  async ping(): Promise<void> {
    await this.config.client.kv.range({ key: this.recordPrefix, limit: 1, keys_only: true });
  }

  /** Walks the prefix in pages, stopping once `limit` expired leases are counted. */
  async countExpiredLeases(limit: number): Promise<number> {
    requireLimit('countExpiredLeases', limit);
    const now = this.config.clock.now();
    let count = 0;
    for await (const page of scanRecords(this.config.client.kv, this.recordPrefix)) {
      for (const { record } of page) {
        if (record.state === 'in_progress' && record.leaseExpiresAt <= now && record.expiresAt > now && ++count >= limit) return count;
      }
    }
    return count;
  }

  /**
   * Walks the whole prefix in pages (etcd orders keys by bytes, not by (scope, key)), keeping the oldest
   * `limit` abandoned records: O(records under the prefix) per call; the completer runs rarely.
   */
  async listAbandoned(limit: number): Promise<IdempotencyRecord[]> {
    requireLimit('listAbandoned', limit);
    const now = this.config.clock.now();
    let found: IdempotencyRecord[] = [];
    for await (const page of scanRecords(this.config.client.kv, this.recordPrefix)) {
      for (const { record } of page) {
        if (record.state === 'in_progress' && record.recoveryPoint !== undefined && record.leaseExpiresAt <= now && record.expiresAt > now) {
          found.push(record);
        }
      }
      if (found.length > limit) found = found.sort((a, b) => a.leaseExpiresAt - b.leaseExpiresAt).slice(0, limit);
    }
    return found.sort((a, b) => a.leaseExpiresAt - b.leaseExpiresAt).slice(0, limit);
  }

  /**
   * One page of records in (scope, key) order (JavaScript string order). The keys' byte order is not that
   * order, so this walks the whole prefix and keeps only the first `query.limit` matches in memory: the cost
   * grows with the records under the prefix, not with the page.
   */
  async listRecords(query: RecordQuery): Promise<IdempotencyRecord[]> {
    const limit = requireLimit('listRecords', query.limit);
    const order = (a: IdempotencyRecord, b: IdempotencyRecord): number =>
      a.scope < b.scope ? -1 : a.scope > b.scope ? 1 : a.key < b.key ? -1 : a.key > b.key ? 1 : 0;
    const { after } = query;
    let page: IdempotencyRecord[] = [];
    for await (const records of scanRecords(this.config.client.kv, this.recordPrefix)) {
      for (const { record } of records) {
        if (query.state !== undefined && record.state !== query.state) continue;
        if (query.scope !== undefined && record.scope !== query.scope) continue;
        if (query.keyPrefix !== undefined && !record.key.startsWith(query.keyPrefix)) continue;
        if (after !== undefined && order(record, { ...record, scope: after.scope, key: after.key }) <= 0) continue;
        page.push(record);
      }
      if (page.length > limit) page = page.sort(order).slice(0, limit);
    }
    return page.sort(order).slice(0, limit);
  }

  /**
   * Resolves once the record is completed or gone, or after `timeoutMs` with the record as it stands. The
   * record is read once, then watched from the revision after that read, so no change between the read and
   * the watch is missed.
   */
  async waitFor(scope: string, key: string, timeoutMs: number): Promise<IdempotencyRecord | undefined> {
    const id = this.key(scope, key);
    const first = await this.read(id);
    if (first === undefined) return undefined;
    if (first.record.state !== 'in_progress') return await withBody(this.config.responseStore, first);
    const watcher = await this.config.client
      .watch()
      .key(id)
      .startRevision((BigInt(first.modRevision) + 1n).toString())
      .create();
    let timer: NodeJS.Timeout | undefined;
    try {
      await new Promise<void>((resolve) => {
        timer = setTimeout(resolve, timeoutMs);
        watcher.on('put', (kv) => decodeRecord(kv.value, kv.mod_revision).record.state !== 'in_progress' && resolve());
        watcher.on('delete', () => resolve());
      });
      return await this.get(scope, key);
    } finally {
      clearTimeout(timer);
      await watcher.cancel();
    }
  }

  /** Nothing to release: the client is the caller's, and the record leases belong to the records. */
  close(): Promise<void> {
    return Promise.resolve();
  }

  /** Reads the record, decides, and writes conditioned on the revision read; again on a concurrent change. */
  private change<T>(claim: Claim, decide: (stored: StoredRecord | undefined, now: number) => Change<T>): Promise<T> {
    const key = this.key(claim.scope, claim.key);
    return change(this.writer, key, () => this.read(key), decide, () => this.config.clock.now());
  }

  private async read(key: Buffer): Promise<StoredRecord | undefined> {
    const reply = await this.config.client.kv.range({ key });
    const kv = reply.kvs[0];
    return kv === undefined ? undefined : decodeRecord(kv.value, kv.mod_revision);
  }

  private key(scope: string, key: string): Buffer {
    return Buffer.concat([this.recordPrefix, Buffer.from(`${scope.length}:${scope}${key}`, 'utf8')]);
  }
}

/** Whether `stored` is in progress under `claim`'s lease token. */
function held(stored: StoredRecord | undefined, claim: Claim): stored is StoredRecord {
  return stored?.record.state === 'in_progress' && stored.record.leaseToken === claim.leaseToken;
}

function withFence(claim: Claim, fencingToken: string): Claim {
  return { ...claim, fencingToken };
}
