/**
 * The DynamoDB inbox store (`@aws-sdk/client-dynamodb`): one item per (consumer, message id) holding its
 * attempts, its processed mark or its dead letter. Handlers write through a `DynamodbTransaction`, whose
 * writes commit with the processed mark in one `TransactWriteItems`.
 *
 * @module
 */
import { createHash } from 'node:crypto';
import {
  ConditionalCheckFailedException,
  DeleteItemCommand,
  TransactionCanceledException,
  TransactWriteItemsCommand,
  UpdateItemCommand,
  type DynamoDBClient,
  type Update,
} from '@aws-sdk/client-dynamodb';
import { randomLeaseToken } from '../../core/lease-token.js';
import { describe, invalidOption, requireNonEmptyString, requireOptions } from '../../core/validate.js';
import { requireKeySchema } from '../../stores/dynamodb/factory.js';
import { DEFAULT_KEY_SCHEMA, type DynamodbKeySchema, type Item } from '../../stores/dynamodb/layout.js';
import { scanItems } from '../../stores/dynamodb/scan.js';
import { DynamodbTransaction } from '../../stores/dynamodb/transaction.js';
import type { DeadLetter, FailureResult, InboxStore, StoredMessage, TransactionHandler, BeginResult } from './store.js';
import { runWithTimeout } from './timeout.js';

/** Options of {@link createDynamodbInboxStore}. */
export interface DynamodbInboxStoreOptions {
  /** The low-level client the store sends its requests through; caller-owned: `close()` leaves it open. */
  readonly client: DynamoDBClient;
  /** The table (`createDynamodbTable` creates it; the idempotency store's table will do). */
  readonly table: string;
  /** The table's key attributes, both of type S. @defaultValue `{ partitionKey: 'pk', sortKey: 'sk' }` */
  readonly keySchema?: DynamodbKeySchema;
  /** Namespace of the store's items (non-empty, without `#`); `reap` and the listings keep to it. @defaultValue 'retrysafe' */
  readonly prefix?: string;
}

/**
 * Milliseconds a delivery's hold on a message outlives its handler's timeout: a process that died
 * holding it lets the next delivery in after the handler timeout plus this.
 */
const HOLD_MARGIN_MS = 10_000;
/** Milliseconds between two looks at a message another delivery of this or another process holds. */
const HOLD_POLL_MS = 20;

/** The item attributes, by role, each named through a `#` placeholder of the same name. */
const NAMES = Object.freeze(
  Object.fromEntries(
    [
      'consumer',
      'messageId',
      'attempts',
      'firstAttemptAt',
      'lastAttemptAt',
      'processedAt',
      'holder',
      'heldUntil',
      'lastError',
      'deadLetteredAt',
      'redriveRequestedAt',
      'headers',
      'body',
    ].map((name) => [`#${name}`, name]),
  ),
);

const LIVE = 'attribute_not_exists(#processedAt) AND attribute_not_exists(#deadLetteredAt)';

/**
 * Creates an {@link InboxStore} on one DynamoDB table, for `createInbox` and `sqsBatchHandler`. Handlers
 * get a `DynamodbTransaction` (`put`, `update`, `delete`, `conditionCheck` in the SDK's low-level shapes).
 *
 * - `begin`: one `UpdateItem` counting the attempt, conditioned on no processed mark and no dead letter;
 *   a refusal is answered from the old item the failed condition returns.
 * - `process`: one `UpdateItem` takes a hold on the message (conditioned on no mark and no live hold of
 *   another delivery; a delivery that meets one waits for it to commit, release or run out); then the
 *   handler runs, buffering its writes; then its writes and the processed mark (conditioned on the hold
 *   being this delivery's) commit in one `TransactWriteItems`, all or nothing. A throw or a timeout sends
 *   nothing and releases the hold. A handler writes at most 99 items (DynamoDB's 100 per transaction).
 * - `fail`, `requestRedrive`: one or two conditional `UpdateItem`s. `deadLetters`, `pendingRedrives` and
 *   `reap` scan the table (strongly consistent), reading every item of it.
 * - No `beginBatch`: the inbox runs a batch one message at a time.
 * - Times are the inbox's clock (`now`); processes sharing a table need clocks in sync.
 *
 * @throws TypeError naming the option when an option is invalid
 * @example
 * ```ts
 * import { createInbox } from 'retrysafe/inbox';
 * import { createDynamodbInboxStore } from 'retrysafe/dynamodb';
 * import { sqsBatchHandler } from 'retrysafe/sqs';
 *
 * const inbox = createInbox({ store: createDynamodbInboxStore({ client, table: 'idempotency' }), maxAttempts: 5 });
 * export const handler = sqsBatchHandler(inbox, async (record, tx) => {
 *   tx.put({ TableName: 'orders', Item: { id: { S: JSON.parse(record.body).id } } });
 * });
 * ```
 */
export function createDynamodbInboxStore(options: DynamodbInboxStoreOptions): InboxStore<DynamodbTransaction> {
  requireOptions('createDynamodbInboxStore', options);
  if (typeof (options.client as Partial<DynamoDBClient> | undefined)?.send !== 'function') {
    throw invalidOption('client', 'a DynamoDBClient of @aws-sdk/client-dynamodb', options.client);
  }
  const prefix = requireNonEmptyString('prefix', options.prefix ?? 'retrysafe', 255);
  if (prefix.includes('#')) throw new TypeError(`retrysafe: option "prefix" must not hold "#", got ${describe(prefix)}`);
  const keySchema = requireKeySchema(options.keySchema ?? DEFAULT_KEY_SCHEMA);
  return new DynamodbInboxStore(options.client, requireNonEmptyString('table', options.table, 255), keySchema, `inbox#${prefix}#`);
}

function failedCondition(error: unknown): Item | undefined | false {
  if (!(error instanceof ConditionalCheckFailedException)) return false;
  return error.Item;
}

function numberOr(item: Item, name: string): number | undefined {
  const value = item[name]?.N;
  return value === undefined ? undefined : Number(value);
}

function deadLetterOf(item: Item): DeadLetter {
  const headers = item.headers?.S;
  return {
    consumer: item.consumer?.S ?? '',
    messageId: item.messageId?.S ?? '',
    attempts: numberOr(item, 'attempts') ?? 0,
    error: item.lastError?.S,
    deadLetteredAt: numberOr(item, 'deadLetteredAt'),
    redriveRequestedAt: numberOr(item, 'redriveRequestedAt'),
    headers: headers === undefined ? {} : (JSON.parse(headers) as Record<string, string>),
    body: item.body?.B ?? new Uint8Array(0),
  };
}

class DynamodbInboxStore implements InboxStore<DynamodbTransaction> {
  constructor(
    private readonly client: DynamoDBClient,
    private readonly table: string,
    private readonly keySchema: DynamodbKeySchema,
    private readonly keyPrefix: string,
  ) {}

  async begin(consumer: string, messageId: string, now: number): Promise<BeginResult> {
    try {
      const updated = await this.update(consumer, messageId, {
        UpdateExpression:
          'SET #consumer = :consumer, #messageId = :messageId, #attempts = if_not_exists(#attempts, :zero) + :one, #firstAttemptAt = if_not_exists(#firstAttemptAt, :now), #lastAttemptAt = :now',
        ConditionExpression: LIVE,
        ExpressionAttributeValues: { ':consumer': { S: consumer }, ':messageId': { S: messageId }, ':zero': { N: '0' }, ':one': { N: '1' }, ':now': { N: String(now) } },
        ReturnValues: 'UPDATED_NEW',
      });
      return { state: 'attempt', attempts: numberOr(updated ?? {}, 'attempts') ?? 1 };
    } catch (error) {
      const old = failedCondition(error);
      if (old === false) throw error;
      return old?.processedAt !== undefined ? { state: 'processed' } : { state: 'dead' };
    }
  }

  async process(consumer: string, messageId: string, now: number, timeoutMs: number, fn: TransactionHandler<DynamodbTransaction>): Promise<'committed' | 'duplicate'> {
    const holder = randomLeaseToken();
    if (!(await this.hold(consumer, messageId, now, timeoutMs + HOLD_MARGIN_MS, holder))) return 'duplicate';
    const tx = new DynamodbTransaction();
    try {
      await runWithTimeout(fn, tx, timeoutMs, () => undefined);
    } catch (error) {
      await this.release(consumer, messageId, holder).catch(() => undefined);
      throw error;
    }
    const mark = this.markUpdate(consumer, messageId, now, holder);
    try {
      if (tx.items.length === 0) await this.client.send(new UpdateItemCommand(mark));
      else await this.client.send(new TransactWriteItemsCommand({ TransactItems: [...tx.items, { Update: mark }], ClientRequestToken: requestToken(this.table, consumer, messageId, holder) }));
    } catch (error) {
      const reasons = error instanceof TransactionCanceledException ? error.CancellationReasons : undefined;
      const markFailed = error instanceof ConditionalCheckFailedException || reasons?.[tx.items.length]?.Code === 'ConditionalCheckFailed';
      // A business condition that failed cancelled everything: the hold goes, and the failure is recorded.
      if (!markFailed) await this.release(consumer, messageId, holder).catch(() => undefined);
      throw markFailed ? new Error(`retrysafe: the inbox hold on ${messageId} was taken over before its commit; nothing was written`) : error;
    }
    return 'committed';
  }

  async fail(consumer: string, messageId: string, now: number, error: string, maxAttempts: number, message: StoredMessage): Promise<FailureResult | undefined> {
    for (;;) {
      const base = { ':error': { S: error }, ':max': { N: String(maxAttempts) } };
      try {
        const kept = await this.update(consumer, messageId, {
          UpdateExpression: 'SET #lastError = :error',
          ConditionExpression: `${LIVE} AND #attempts < :max`,
          ExpressionAttributeValues: base,
          ReturnValues: 'ALL_NEW',
        });
        return { attempts: numberOr(kept ?? {}, 'attempts') ?? 0, deadLettered: false };
      } catch (failure) {
        if (failedCondition(failure) === false) throw failure;
      }
      const body = message.body.byteLength > 0;
      try {
        const dead = await this.update(consumer, messageId, {
          UpdateExpression: `SET #lastError = :error, #deadLetteredAt = :now, #headers = :headers${body ? ', #body = :body' : ''} REMOVE #redriveRequestedAt${body ? '' : ', #body'}`,
          ConditionExpression: `${LIVE} AND #attempts >= :max`,
          ExpressionAttributeValues: { ...base, ':now': { N: String(now) }, ':headers': { S: JSON.stringify(message.headers) }, ...(body && { ':body': { B: message.body } }) },
          ReturnValues: 'ALL_NEW',
        });
        return { attempts: numberOr(dead ?? {}, 'attempts') ?? 0, deadLettered: true };
      } catch (failure) {
        const old = failedCondition(failure);
        if (old === false) throw failure;
        // Processed, dead-lettered or never begun: no live attempt. Otherwise the count moved: decide again.
        if (old === undefined || old.processedAt !== undefined || old.deadLetteredAt !== undefined || old.attempts === undefined) return undefined;
      }
    }
  }

  async deadLetters(consumer: string | undefined, limit: number): Promise<DeadLetter[]> {
    const letters = await this.scan('(attribute_exists(#deadLetteredAt) OR attribute_exists(#redriveRequestedAt))', consumer);
    const when = (letter: DeadLetter): number => letter.deadLetteredAt ?? letter.redriveRequestedAt ?? 0;
    return letters
      .sort((a, b) => when(a) - when(b) || compare(a.consumer, b.consumer) || compare(a.messageId, b.messageId))
      .slice(0, limit);
  }

  async requestRedrive(consumer: string, messageId: string, now: number): Promise<boolean> {
    try {
      await this.update(consumer, messageId, {
        UpdateExpression: 'SET #attempts = :zero, #redriveRequestedAt = :now REMOVE #deadLetteredAt',
        ConditionExpression: 'attribute_exists(#deadLetteredAt)',
        ExpressionAttributeValues: { ':zero': { N: '0' }, ':now': { N: String(now) } },
      });
      return true;
    } catch (error) {
      if (failedCondition(error) === false) throw error;
      return false;
    }
  }

  async pendingRedrives(consumer: string, limit: number): Promise<DeadLetter[]> {
    const letters = await this.scan('attribute_exists(#redriveRequestedAt)', consumer);
    return letters.sort((a, b) => (a.redriveRequestedAt ?? 0) - (b.redriveRequestedAt ?? 0) || compare(a.messageId, b.messageId)).slice(0, limit);
  }

  /**
   * Scans for processed marks older than `before` and attempt items (neither dead-lettered nor redrive
   * pending, not held) last tried before it, and deletes at most `limit` of each, each delete conditioned on
   * what the scan saw still holding.
   */
  async reap(before: number, limit: number): Promise<number> {
    const marks = `#processedAt < :before`;
    const attempts = `attribute_not_exists(#processedAt) AND #lastAttemptAt < :before AND attribute_not_exists(#deadLetteredAt) AND attribute_not_exists(#redriveRequestedAt) AND attribute_not_exists(#holder)`;
    let deleted = 0;
    for (const condition of [marks, attempts]) {
      let left = limit;
      const cutoff: Item = { ':before': { N: String(before) } };
      for await (const page of scanItems(this.scanConfig(), `begins_with(#pk, :prefix) AND ${condition}`, { ...cutoff, ':prefix': { S: this.keyPrefix } }, '#consumer, #messageId')) {
        for (const item of page.slice(0, left)) {
          if (await this.deleteIf(item.consumer?.S ?? '', item.messageId?.S ?? '', condition, cutoff)) {
            left--;
            deleted++;
          }
        }
        if (left === 0) break;
      }
    }
    return deleted;
  }

  /** Nothing to release: the client is the caller's. */
  close(): Promise<void> {
    return Promise.resolve();
  }

  /**
   * Takes the hold of one delivery on the message; `false` when the message is processed. A live hold of
   * another delivery is waited out: it commits (then `false`), releases (then the hold is taken) or runs
   * out by the inbox's clock, advanced by the time waited.
   */
  private async hold(consumer: string, messageId: string, now: number, holdMs: number, holder: string): Promise<boolean> {
    const started = performance.now();
    for (;;) {
      const at = now + Math.round(performance.now() - started);
      try {
        await this.update(consumer, messageId, {
          UpdateExpression: 'SET #holder = :holder, #heldUntil = :until',
          ConditionExpression: 'attribute_not_exists(#processedAt) AND (attribute_not_exists(#holder) OR #heldUntil <= :now)',
          ExpressionAttributeValues: { ':holder': { S: holder }, ':until': { N: String(at + holdMs) }, ':now': { N: String(at) } },
        });
        return true;
      } catch (error) {
        const old = failedCondition(error);
        if (old === false) throw error;
        if (old?.processedAt !== undefined) return false;
        await new Promise((resolve) => setTimeout(resolve, HOLD_POLL_MS));
      }
    }
  }

  private async release(consumer: string, messageId: string, holder: string): Promise<void> {
    try {
      await this.update(consumer, messageId, {
        UpdateExpression: 'REMOVE #holder, #heldUntil',
        ConditionExpression: '#holder = :holder',
        ExpressionAttributeValues: { ':holder': { S: holder } },
      });
    } catch (error) {
      if (failedCondition(error) === false) throw error;
    }
  }

  /** The processed mark, conditioned on the hold being `holder`'s; the attempts and any redrive go. */
  private markUpdate(consumer: string, messageId: string, now: number, holder: string): Update & { TableName: string } {
    const update = 'SET #processedAt = :now REMOVE #holder, #heldUntil, #attempts, #lastError, #redriveRequestedAt, #headers, #body';
    const condition = '#holder = :holder AND attribute_not_exists(#processedAt)';
    return {
      TableName: this.table,
      Key: this.keyOf(consumer, messageId),
      UpdateExpression: update,
      ConditionExpression: condition,
      ExpressionAttributeNames: namesOf(update, condition),
      ExpressionAttributeValues: { ':now': { N: String(now) }, ':holder': { S: holder } },
    };
  }

  /** One `UpdateItem` of the message's item, failed conditions handing back the old item; resolves the attributes asked for. */
  private async update(
    consumer: string,
    messageId: string,
    request: { UpdateExpression: string; ConditionExpression: string; ExpressionAttributeValues: Item; ReturnValues?: 'UPDATED_NEW' | 'ALL_NEW' },
  ): Promise<Item | undefined> {
    const result = await this.client.send(
      new UpdateItemCommand({
        TableName: this.table,
        Key: this.keyOf(consumer, messageId),
        ...request,
        ExpressionAttributeNames: namesOf(request.UpdateExpression, request.ConditionExpression),
        ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
      }),
    );
    return result.Attributes;
  }

  private async deleteIf(consumer: string, messageId: string, condition: string, values: Item): Promise<boolean> {
    try {
      await this.client.send(
        new DeleteItemCommand({
          TableName: this.table,
          Key: this.keyOf(consumer, messageId),
          ConditionExpression: condition,
          ExpressionAttributeNames: namesOf(condition),
          ExpressionAttributeValues: values,
        }),
      );
      return true;
    } catch (error) {
      if (failedCondition(error) === false) throw error;
      return false;
    }
  }

  /** The store's items matching `filter` (of `consumer` when given), as dead letters. */
  private async scan(filter: string, consumer: string | undefined): Promise<DeadLetter[]> {
    const values: Item = { ':prefix': { S: this.keyPrefix } };
    if (consumer !== undefined) values[':consumer'] = { S: consumer };
    const expression = `begins_with(#pk, :prefix) AND ${filter}${consumer === undefined ? '' : ' AND #consumer = :consumer'}`;
    const found: DeadLetter[] = [];
    for await (const page of scanItems(this.scanConfig(), expression, values, undefined)) found.push(...page.map(deadLetterOf));
    return found;
  }

  private scanConfig(): { client: DynamoDBClient; table: string; names: Record<string, string> } {
    return { client: this.client, table: this.table, names: { ...NAMES, '#pk': this.keySchema.partitionKey } };
  }

  /**
   * With a sort key: `inbox#<prefix>#<consumer>` and `m#<message id>`; without: the prefix and a base64url
   * SHA-256 of (consumer, message id).
   */
  private keyOf(consumer: string, messageId: string): Item {
    const { partitionKey, sortKey } = this.keySchema;
    if (sortKey === undefined) {
      const digest = createHash('sha256').update(`${consumer.length}:${consumer}${messageId}`).digest('base64url');
      return { [partitionKey]: { S: this.keyPrefix + digest } };
    }
    return { [partitionKey]: { S: this.keyPrefix + consumer }, [sortKey]: { S: `m#${messageId}` } };
  }
}

/** `ExpressionAttributeNames` for the `#name` placeholders the expressions use. */
function namesOf(...expressions: string[]): Record<string, string> {
  const used: Record<string, string> = {};
  for (const expression of expressions) {
    for (const [placeholder] of expression.matchAll(/#\w+/g)) {
      const name = NAMES[placeholder];
      if (name === undefined) throw new Error(`retrysafe: no attribute name for ${placeholder}`);
      used[placeholder] = name;
    }
  }
  return used;
}

function compare(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/** At most 36 characters, as `ClientRequestToken` takes: the SDK's retry of a lost reply applies once. */
function requestToken(table: string, consumer: string, messageId: string, holder: string): string {
  return createHash('sha256').update(`${table.length}:${table}${consumer.length}:${consumer}${messageId}${holder}`).digest('base64url').slice(0, 36);
}
