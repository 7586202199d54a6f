/**
 * The DynamoDB implementation of {@link IdempotencyStore}: one item per record (laid out as `layout.ts`
 * describes), one conditional write per operation.
 *
 * @module
 */
import { DeleteItemCommand, GetItemCommand, UpdateItemCommand } from '@aws-sdk/client-dynamodb';
import type { Claim, IdempotencyRecord, StoredResponse } from '../../core/record.js';
import type { ClaimedTransaction, ClaimInput, ClaimResult, RecordQuery, TransactionalStore, TransactionView } from '../../core/store.js';
import { requireDurationMs, requireLimit, requireNonNegativeMs } from '../../core/validate.js';
import { claimOn } from './claim.js';
import type { DynamodbStoreConfig } from './config.js';
import { failedConditionItem, namesIn } from './expression.js';
import { A, decodeItem, n, s, ttlSeconds, type Item } from './layout.js';
import { scanItems } from './scan.js';
import { fitsInItem } from './item-size.js';
import { inTransaction, type DynamodbTransaction } from './transaction.js';
import { COMPLETE_SET, completionValues, HELD, notKept } from './writes.js';

const IN_PROGRESS = s('in_progress');

const EXPIRED = '#expiresAt <= :now AND NOT (#state = :inProgress AND #leaseExpiresAt > :now)';
const LEASE_ENDED = '#state = :inProgress AND #leaseExpiresAt <= :now AND #expiresAt > :now';
const ABANDONED = `${LEASE_ENDED} AND attribute_exists(#recoveryPoint)`;

/** See `createDynamodbStore` in `factory.ts`, which validates the configuration. */
export class DynamodbStore implements TransactionalStore<DynamodbTransaction> {
  readonly kind = 'dynamodb';

  constructor(readonly config: DynamodbStoreConfig) {}

  claim(input: ClaimInput): Promise<ClaimResult> {
    return claimOn(this.config, input, input.leaseToken ?? this.config.generateId(), this.config.clock.now());
  }

  /**
   * Transactional mode: `fn`'s writes through the {@link DynamodbTransaction} and the record's write
   * (completion, release or checkpoint through `store`) commit in one `TransactWriteItems` once `fn`
   * resolves; nothing is sent when it rejects. See `transaction.ts`.
   */
  transaction<R>(fn: (tx: DynamodbTransaction, store: TransactionView) => Promise<R>): Promise<R> {
    return inTransaction(this.config, fn);
  }

  /**
   * The claim commits on its own, before the transaction (a conditional write: a duplicate sees it at
   * once, as on PostgreSQL); the completion commits with the business writes.
   */
  async claimTransaction<R>(
    input: ClaimInput,
    fn: (tx: DynamodbTransaction, store: TransactionView, claim: Claim) => Promise<R>,
  ): Promise<ClaimedTransaction<R>> {
    const result = await this.claim(input);
    if (!result.acquired) return result;
    const { claim } = result;
    return { acquired: true, claim, value: await this.transaction((tx, store) => fn(tx, store, claim)) };
  }

  /**
   * One conditional `UpdateItem` on the lease token. A response too large for the item (DynamoDB's 400 KB)
   * is saved without its body, with {@link RESPONSE_NOT_KEPT_HEADER}, so its replay is a 410 problem. A
   * completion by the token that already completed the record answers `true` from the failed condition's
   * old item, without a second write.
   */
  async complete(claim: Claim, response: StoredResponse, retentionMs: number): Promise<boolean> {
    const kept = fitsInItem(claim, response) ? response : notKept(response);
    try {
      return await this.completeWith(claim, kept, retentionMs);
    } catch (error) {
      // The estimate is conservative, yet the item holds attributes it cannot see (a longer recovery point).
      if (kept === response && isItemTooLarge(error)) return this.completeWith(claim, notKept(response), retentionMs);
      throw error;
    }
  }

  private async completeWith(claim: Claim, response: StoredResponse, retentionMs: number): Promise<boolean> {
    const { client, table } = this.config;
    const now = this.config.clock.now();
    const update = response.body.byteLength === 0 ? COMPLETE_SET : `${COMPLETE_SET}, #body = :body`;
    const key = this.config.itemKey(claim.scope, claim.key);
    const values = completionValues(this.config, claim, response, now, retentionMs);
    try {
      await client.send(
        new UpdateItemCommand({
          TableName: table,
          Key: key,
          UpdateExpression: update,
          ConditionExpression: HELD,
          ExpressionAttributeNames: namesIn(this.config.names, update, HELD),
          ExpressionAttributeValues: values,
          ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
        }),
      );
      return true;
    } catch (error) {
      const failed = await failedConditionItem(error, client, table, key);
      if (failed === undefined) throw error;
      // Completed by this very token: a retried completion whose first reply was lost.
      return failed.item?.[A.state]?.S === 'completed' && failed.item[A.leaseToken]?.S === claim.leaseToken;
    }
  }

  async release(claim: Claim): Promise<boolean> {
    try {
      await this.config.client.send(
        new DeleteItemCommand({
          TableName: this.config.table,
          Key: this.config.itemKey(claim.scope, claim.key),
          ConditionExpression: HELD,
          ExpressionAttributeNames: namesIn(this.config.names, HELD),
          ExpressionAttributeValues: { ':token': s(claim.leaseToken), ':inProgress': IN_PROGRESS },
        }),
      );
      return true;
    } catch (error) {
      if ((error as { name?: unknown }).name === 'ConditionalCheckFailedException') return false;
      throw error;
    }
  }

  /** See `IdempotencyStore.checkpoint`; one conditional write while the retention covers the new lease (see {@link extendLease}). */
  async checkpoint(claim: Claim, recoveryPoint: string, leaseMs: number): Promise<Claim | undefined> {
    requireNonNegativeMs('checkpoint leaseMs', leaseMs);
    const leaseExpiresAt = await this.extendLease(claim, leaseMs, recoveryPoint);
    return leaseExpiresAt === undefined ? undefined : { ...claim, leaseExpiresAt, recoveryPoint };
  }

  /**
   * Fenced lease keep-alive: while the record is `in_progress` under `claim.leaseToken`, its lease ends
   * `leaseMs` milliseconds from now (the store's clock), token and recovery point kept, retention stretched
   * to cover it. One conditional write in the common case (see {@link extendLease}).
   *
   * @returns the renewed claim, or `undefined` when fenced off (taken over, completed, released, reaped)
   * @throws TypeError (as a rejection) when `leaseMs` is not a positive safe integer
   */
  async renew(claim: Claim, leaseMs: number): Promise<Claim | undefined> {
    requireDurationMs('leaseMs', leaseMs, 'renew');
    const leaseExpiresAt = await this.extendLease(claim, leaseMs, undefined);
    return leaseExpiresAt === undefined ? undefined : { ...claim, leaseExpiresAt };
  }

  /**
   * Sets the lease (and the recovery point, when given) under the caller's token. DynamoDB has no `max()`
   * in an update expression, so the retention is stretched by a second write conditioned on its being
   * shorter than the new lease: the first write is conditioned on its being long enough, which a lease far
   * shorter than the retention (the usual case) always is.
   *
   * @returns the new lease end, or `undefined` when the caller's token no longer holds the record
   */
  private async extendLease(claim: Claim, leaseMs: number, recoveryPoint: string | undefined): Promise<number | undefined> {
    const { client, table } = this.config;
    const leaseExpiresAt = this.config.clock.now() + leaseMs;
    const key = this.config.itemKey(claim.scope, claim.key);
    const point = recoveryPoint === undefined ? '' : ', #recoveryPoint = :point';
    const values: Item = { ':token': s(claim.leaseToken), ':inProgress': IN_PROGRESS, ':lease': n(leaseExpiresAt) };
    if (recoveryPoint !== undefined) values[':point'] = s(recoveryPoint);
    const writes = [
      { update: `SET #leaseExpiresAt = :lease${point}`, condition: `${HELD} AND #expiresAt >= :lease`, values },
      {
        update: `SET #leaseExpiresAt = :lease${point}, #expiresAt = :lease, #ttl = :ttl`,
        condition: `${HELD} AND #expiresAt < :lease`,
        values: { ...values, ':ttl': n(ttlSeconds(leaseExpiresAt, this.config.ttlGraceSeconds)) },
      },
    ];
    // At most one write of the two can match the item; the loop tries the other once the first refuses a
    // record the caller still holds.
    for (let attempt = 0; attempt < 4; attempt++) {
      const write = writes[attempt % 2] as (typeof writes)[number];
      try {
        await client.send(
          new UpdateItemCommand({
            TableName: table,
            Key: key,
            UpdateExpression: write.update,
            ConditionExpression: write.condition,
            ExpressionAttributeNames: namesIn(this.config.names, write.update, write.condition),
            ExpressionAttributeValues: write.values,
            ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
          }),
        );
        return leaseExpiresAt;
      } catch (error) {
        const failed = await failedConditionItem(error, client, table, key);
        if (failed === undefined) throw error;
        const held = failed.item?.[A.state]?.S === 'in_progress' && failed.item[A.leaseToken]?.S === claim.leaseToken;
        if (!held) return undefined;
      }
    }
    return undefined;
  }

  async get(scope: string, key: string): Promise<IdempotencyRecord | undefined> {
    const read = await this.config.client.send(
      new GetItemCommand({ TableName: this.config.table, Key: this.config.itemKey(scope, key), ConsistentRead: true }),
    );
    return read.Item === undefined ? undefined : decodeItem(read.Item);
  }

  /**
   * Scans for expired records (never one under a live lease) and deletes each with a conditional
   * `DeleteItem` that checks the expiry again, so a record claimed anew meanwhile survives; stops at
   * `limit` deletions. The TTL attribute makes DynamoDB delete old items by itself (late, but at no
   * write cost), so `reap` is only for a table whose TTL is off or to clear expired items sooner.
   */
  async reap(limit: number): Promise<number> {
    const now = this.config.clock.now();
    const values: Item = { ':now': n(now), ':inProgress': IN_PROGRESS };
    let deleted = 0;
    for await (const items of scanItems(this.config, EXPIRED, values, this.keyProjection())) {
      for (const item of items) {
        if (deleted >= limit) return deleted;
        if (await this.deleteIf(this.keyOf(item), EXPIRED, values)) deleted++;
      }
    }
    return deleted;
  }

  /** A scan with a filter: DynamoDB keeps no index of leases, so the cost grows with the table. */
  async countExpiredLeases(limit: number): Promise<number> {
    requireLimit('countExpiredLeases', limit);
    let count = 0;
    const values: Item = { ':now': n(this.config.clock.now()), ':inProgress': IN_PROGRESS };
    for await (const items of scanItems(this.config, LEASE_ENDED, values, this.keyProjection())) {
      count += items.length;
      if (count >= limit) return limit;
    }
    return count;
  }

  /** A full scan with a filter, sorted by lease end here (DynamoDB has no order across partitions). */
  async listAbandoned(limit: number): Promise<IdempotencyRecord[]> {
    requireLimit('listAbandoned', limit);
    const values: Item = { ':now': n(this.config.clock.now()), ':inProgress': IN_PROGRESS };
    const found: IdempotencyRecord[] = [];
    for await (const items of scanItems(this.config, ABANDONED, values, undefined)) found.push(...items.map(decodeItem));
    return found.sort((a, b) => a.leaseExpiresAt - b.leaseExpiresAt).slice(0, limit);
  }

  /**
   * One page in (scope, key) order (JavaScript string order). A full scan with a filter, keeping only the
   * first `query.limit` matches in memory: the cost grows with the table, not with the page.
   */
  async listRecords(query: RecordQuery): Promise<IdempotencyRecord[]> {
    const limit = requireLimit('listRecords', query.limit);
    // Only retrysafe's records: a table shared with other items (Powertools' during a move) keeps those out.
    const conditions: string[] = ['attribute_exists(#leaseToken)'];
    const values: Item = {};
    if (query.state !== undefined) {
      conditions.push('#state = :state');
      values[':state'] = s(query.state);
    }
    if (query.scope !== undefined) {
      conditions.push('#scope = :scope');
      values[':scope'] = s(query.scope);
    }
    if (query.keyPrefix !== undefined && query.keyPrefix !== '') {
      conditions.push('begins_with(#key, :prefix)');
      values[':prefix'] = s(query.keyPrefix);
    }
    const after = query.after;
    const order = (a: IdempotencyRecord, b: IdempotencyRecord): number =>
      a.scope < b.scope ? -1 : a.scope > b.scope ? 1 : a.key < b.key ? -1 : a.key > b.key ? 1 : 0;
    let page: IdempotencyRecord[] = [];
    const filter = conditions.join(' AND ');
    for await (const items of scanItems(this.config, filter, values, undefined)) {
      for (const record of items.map(decodeItem)) {
        if (after !== undefined && (record.scope < after.scope || (record.scope === after.scope && record.key <= after.key))) continue;
        page.push(record);
      }
      if (page.length > limit) page = page.sort(order).slice(0, limit);
    }
    return page.sort(order).slice(0, limit);
  }

  /** One strongly consistent `GetItem` of a key no record uses (an empty scope and key hash or prefix to a key of their own). */
  async ping(): Promise<void> {
    await this.config.client.send(
      new GetItemCommand({ TableName: this.config.table, Key: this.config.itemKey('', ''), ProjectionExpression: '#pk', ExpressionAttributeNames: { '#pk': this.config.keySchema.partitionKey } }),
    );
  }

  close(): Promise<void> {
    this.config.dispose();
    return Promise.resolve();
  }

  private keyProjection(): string {
    return this.config.keySchema.sortKey === undefined ? '#pk' : '#pk, #sk';
  }

  private keyOf(item: Item): Item {
    const { partitionKey, sortKey } = this.config.keySchema;
    const key: Item = {};
    const pk = item[partitionKey];
    if (pk !== undefined) key[partitionKey] = pk;
    const sk = sortKey === undefined ? undefined : item[sortKey];
    if (sortKey !== undefined && sk !== undefined) key[sortKey] = sk;
    return key;
  }

  private async deleteIf(key: Item, condition: string, values: Item): Promise<boolean> {
    try {
      await this.config.client.send(
        new DeleteItemCommand({
          TableName: this.config.table,
          Key: key,
          ConditionExpression: condition,
          ExpressionAttributeNames: namesIn(this.config.names, condition),
          ExpressionAttributeValues: values,
        }),
      );
      return true;
    } catch (error) {
      if ((error as { name?: unknown }).name === 'ConditionalCheckFailedException') return false;
      throw error;
    }
  }
}

/** DynamoDB's refusal of an item over 400 KB. */
function isItemTooLarge(error: unknown): boolean {
  return (error as { name?: unknown }).name === 'ValidationException' && /item size/i.test((error as Error).message);
}
