/**
 * Transactional mode on DynamoDB: the handler's business writes and the record's completion (the saved
 * response) commit in one `TransactWriteItems`, or not at all. Source: AWS, "Amazon DynamoDB
 * Transactions: How it works" (all-or-nothing, `ClientRequestToken` idempotent for 10 minutes).
 *
 * @module
 */
import { createHash } from 'node:crypto';
import {
  GetItemCommand,
  TransactionCanceledException,
  TransactWriteItemsCommand,
  type ConditionCheck,
  type Delete,
  type Put,
  type TransactWriteItem,
  type Update,
} from '@aws-sdk/client-dynamodb';
import { LeaseLostError } from '../../core/errors.js';
import type { Claim, StoredResponse } from '../../core/record.js';
import type { TransactionView } from '../../core/store.js';
import type { DynamodbStoreConfig } from './config.js';
import { namesIn } from './expression.js';
import { fitsInItem } from './item-size.js';
import { A, n, s, ttlSeconds, type Item } from './layout.js';
import { completionValues, HELD, notKept, COMPLETE_SET } from './writes.js';

/** DynamoDB's bound on the items of one transaction. */
const MAX_ITEMS = 100;

/**
 * The transaction handle of transactional mode: the business writes of one request, in DynamoDB's own
 * shapes (`@aws-sdk/client-dynamodb` `Put`, `Update`, `Delete`, `ConditionCheck`, attribute values
 * marshalled). Nothing is sent until the request's transaction commits, with the record's completion; a
 * failed condition on any of them cancels all of them. At most 99 writes (DynamoDB takes 100 items per
 * transaction, one of which is the record).
 */
export class DynamodbTransaction {
  /** @internal The writes so far, in order. */
  readonly items: TransactWriteItem[] = [];

  /** Adds a `Put` (a whole item, optionally conditioned). */
  put(put: Put): void {
    this.add({ Put: put });
  }

  /** Adds an `Update` (an update expression, optionally conditioned). */
  update(update: Update): void {
    this.add({ Update: update });
  }

  /** Adds a `Delete` (optionally conditioned). */
  delete(deletion: Delete): void {
    this.add({ Delete: deletion });
  }

  /** Adds a `ConditionCheck`: the transaction commits only if the condition holds on that item. */
  conditionCheck(check: ConditionCheck): void {
    this.add({ ConditionCheck: check });
  }

  private add(item: TransactWriteItem): void {
    if (this.items.length >= MAX_ITEMS - 1) {
      throw new RangeError(`retrysafe: a DynamoDB transaction holds at most ${MAX_ITEMS - 1} business writes besides the record`);
    }
    this.items.push(item);
  }
}

/** The record's writes of one transaction; the engine's fenced calls land here until the commit. */
class RecordWrites implements TransactionView {
  /** The record's write, at most one (a completion, a release, or a checkpoint). */
  item: TransactWriteItem | undefined;
  claim: Claim | undefined;

  constructor(private readonly config: DynamodbStoreConfig) {}

  complete(claim: Claim, response: StoredResponse, retentionMs: number): Promise<boolean> {
    const kept = fitsInItem(claim, response) ? response : notKept(response);
    const update = kept.body.byteLength === 0 ? COMPLETE_SET : `${COMPLETE_SET}, #body = :body`;
    const values = completionValues(this.config, claim, kept, this.config.clock.now(), retentionMs);
    this.set(claim, { Update: this.write(claim, update, values) });
    return Promise.resolve(true);
  }

  release(claim: Claim): Promise<boolean> {
    const { config } = this;
    this.set(claim, {
      Delete: {
        TableName: config.table,
        Key: config.itemKey(claim.scope, claim.key),
        ConditionExpression: HELD,
        ExpressionAttributeNames: namesIn(config.names, HELD),
        ExpressionAttributeValues: { ':token': s(claim.leaseToken), ':inProgress': s('in_progress') },
      },
    });
    return Promise.resolve(true);
  }

  /** One strongly consistent read for the retention (no `max()` in an update expression), then the write it conditions. */
  async checkpoint(claim: Claim, recoveryPoint: string, leaseMs: number): Promise<Claim | undefined> {
    const { config } = this;
    const read = await config.client.send(new GetItemCommand({ TableName: config.table, Key: config.itemKey(claim.scope, claim.key), ConsistentRead: true }));
    const item = read.Item;
    if (item?.[A.state]?.S !== 'in_progress' || item[A.leaseToken]?.S !== claim.leaseToken) return undefined;
    const leaseExpiresAt = config.clock.now() + leaseMs;
    const expiresAt = Math.max(Number(item[A.expiresAt]?.N), leaseExpiresAt);
    const update = 'SET #leaseExpiresAt = :lease, #recoveryPoint = :point, #expiresAt = :expires, #ttl = :ttl';
    this.set(claim, {
      Update: this.write(claim, update, {
        ':lease': n(leaseExpiresAt),
        ':point': s(recoveryPoint),
        ':expires': n(expiresAt),
        ':ttl': n(ttlSeconds(expiresAt, config.ttlGraceSeconds)),
      }),
    });
    return { ...claim, leaseExpiresAt, recoveryPoint };
  }

  private write(claim: Claim, update: string, values: Item): Update {
    const { config } = this;
    return {
      TableName: config.table,
      Key: config.itemKey(claim.scope, claim.key),
      UpdateExpression: update,
      ConditionExpression: HELD,
      ExpressionAttributeNames: namesIn(config.names, update, HELD),
      ExpressionAttributeValues: { ...values, ':token': s(claim.leaseToken), ':inProgress': s('in_progress') },
    };
  }

  private set(claim: Claim, item: TransactWriteItem): void {
    this.claim = claim;
    this.item = item;
  }
}

/**
 * Runs `fn` with a transaction handle and the record's view, then commits the business writes and the
 * record's write in one `TransactWriteItems`. Its `ClientRequestToken` is derived from the table, scope,
 * key and lease token, so the SDK's retry of a commit whose reply was lost is applied once (DynamoDB keeps
 * the token 10 minutes).
 *
 * @throws {@link LeaseLostError} when the record's condition failed at commit (the lease was taken over):
 *   nothing of the transaction was written
 * @throws the SDK's `TransactionCanceledException` when a business condition failed (nothing written), or
 *   its error when DynamoDB failed; what `fn` throws (nothing sent)
 */
export async function inTransaction<R>(config: DynamodbStoreConfig, fn: (tx: DynamodbTransaction, view: TransactionView) => Promise<R>): Promise<R> {
  const tx = new DynamodbTransaction();
  const record = new RecordWrites(config);
  const value = await fn(tx, record);
  const items = record.item === undefined ? tx.items : [...tx.items, record.item];
  if (items.length === 0) return value;
  const claim = record.claim;
  const token = claim === undefined ? undefined : requestToken(config.table, claim);
  try {
    await config.client.send(new TransactWriteItemsCommand({ TransactItems: items, ...(token !== undefined && { ClientRequestToken: token }) }));
  } catch (error) {
    const reasons = error instanceof TransactionCanceledException ? error.CancellationReasons : undefined;
    if (claim !== undefined && record.item !== undefined && reasons?.[items.length - 1]?.Code === 'ConditionalCheckFailed') {
      throw new LeaseLostError(claim.scope, claim.key);
    }
    throw error;
  }
  return value;
}

/** At most 36 characters, as `ClientRequestToken` takes. */
function requestToken(table: string, claim: Claim): string {
  return createHash('sha256').update(`${table.length}:${table}${claim.scope.length}:${claim.scope}${claim.key.length}:${claim.key}${claim.leaseToken}`).digest('base64url').slice(0, 36);
}
