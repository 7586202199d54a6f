/**
 * The DynamoDB session store (`@aws-sdk/client-dynamodb`): one item per session, holding its lease, its
 * low-water mark and the requests above the mark (laid out as `dynamodb-item.ts` says). Every step that
 * validates or advances a session reads the item and writes the next one conditioned on the version it
 * read; `complete` and `release` are one conditional `UpdateItem` on the request's token.
 *
 * @module
 */
import {
  ConditionalCheckFailedException,
  DeleteItemCommand,
  GetItemCommand,
  PutItemCommand,
  UpdateItemCommand,
  type DynamoDBClient,
} from '@aws-sdk/client-dynamodb';
import { describe, invalidOption, requireIntegerIn, requireLimit, requireNonEmptyString, requireOptions } from '../core/validate.js';
import { failedConditionItem } from '../stores/dynamodb/expression.js';
import { requireKeySchema } from '../stores/dynamodb/factory.js';
import { DEFAULT_KEY_SCHEMA, ttlSeconds, type DynamodbKeySchema, type Item } from '../stores/dynamodb/layout.js';
import { scanItems } from '../stores/dynamodb/scan.js';
import {
  beginStep,
  decodeSession,
  encodeSession,
  keepAliveStep,
  newSession,
  SESSION_ATTRIBUTES,
  type SessionItem,
  type Step,
} from './dynamodb-item.js';
import { sessionCounters } from './counters.js';
import type { BeginInput, BeginResult, KeepAliveResult, SessionQuery, SessionStats, SessionStore, SessionSummary } from './store.js';

/** Options of {@link createDynamodbSessionStore}. */
export interface DynamodbSessionStoreOptions {
  /** The low-level client the store sends its requests through; caller-owned: `close()` leaves it open. */
  readonly client: DynamoDBClient;
  /**
   * The table (`createDynamodbTable` creates it; the idempotency store's table will do: session items
   * have keys of their own).
   */
  readonly table: string;
  /** The table's key attributes, both of type S. @defaultValue `{ partitionKey: 'pk', sortKey: 'sk' }` */
  readonly keySchema?: DynamodbKeySchema;
  /**
   * Namespace of the store's items: a session's partition key is `session#<prefix>#<client id>`. Non-empty,
   * without `#`; `reap` and `listSessions` keep to it. @defaultValue 'retrysafe'
   */
  readonly prefix?: string;
  /** The attribute the table's TTL is enabled on (a number, seconds since the epoch). @defaultValue 'ttl' */
  readonly ttlAttribute?: string;
  /**
   * Seconds the TTL attribute adds past a session's lease: DynamoDB's safety net for a session nobody
   * reaps, and how long a tombstone answers `session-expired` before the client meets `session-unknown`
   * (both refuse the request). No decision reads the TTL. @defaultValue 86_400
   */
  readonly ttlGraceSeconds?: number;
}

/** Writes in a row that may meet a version another process wrote first before `begin` or `keepAlive` give up. */
const MAX_WRITE_ATTEMPTS = 50;

/** The sort key of every session item, on a table that has a sort key. */
const SORT_KEY_VALUE = 'session';

const A = SESSION_ATTRIBUTES;

/**
 * Creates a {@link SessionStore} on one DynamoDB table: the session-based Idempotent Receiver of
 * *Patterns of Distributed Systems*, with Raft's client sessions (Ongaro's thesis, section 6.3).
 *
 * - A session is one item: its lease, low-water mark, and the requests above the mark with their saved
 *   responses (so a session's saved responses share DynamoDB's 400 KB item limit; a completion that would
 *   pass it is refused by DynamoDB and answered unsaved).
 * - `begin` and `keepAlive` read the item (strongly consistent) and write the next version with
 *   `PutItem` conditioned on `version = :read`: the whole step — refusing an unknown, expired or stale
 *   request, raising the low-water mark and dropping the requests at or below it, renewing the lease,
 *   claiming the request number — commits at once or not at all. A write that meets a newer version
 *   decides again from the item the failed condition returns, so N parallel `begin`s of one request number,
 *   from any number of processes, yield exactly one `execute`. Two round trips per step.
 * - `complete` and `release` are one `UpdateItem` conditioned on the request being in progress under the
 *   token; they bump the version too.
 * - Within one process the store runs the steps of one session one after another, so concurrent requests
 *   of one client do not make each other's writes fail; across processes the version condition decides.
 * - Leases are decided by the `now` the receiver passes in (its clock): processes sharing a table need
 *   clocks in sync to well within a lease.
 * - `reap` and `listSessions` scan the table (strongly consistent), reading every item of it.
 *
 * Errors: operations reject with the SDK's error when DynamoDB fails (the receiver answers
 * `StoreUnavailableError`), and with an Error when a session's item kept changing under 50 writes in a row.
 *
 * @throws TypeError naming the option when an option is invalid
 * @example
 * ```ts
 * import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
 * import { createDynamodbSessionStore, createDynamodbTable } from 'retrysafe/dynamodb';
 * import { createSessionReceiver } from 'retrysafe/sessions';
 *
 * const client = new DynamoDBClient({});
 * await createDynamodbTable(client, { table: 'sessions' });
 * const receiver = createSessionReceiver({ store: createDynamodbSessionStore({ client, table: 'sessions' }) });
 * ```
 */
export function createDynamodbSessionStore(options: DynamodbSessionStoreOptions): SessionStore & Pick<Required<SessionStore>, 'listSessions'> {
  requireOptions('createDynamodbSessionStore', options);
  if (typeof (options.client as Partial<DynamoDBClient> | undefined)?.send !== 'function') {
    throw invalidOption('client', 'a DynamoDBClient of @aws-sdk/client-dynamodb', options.client);
  }
  const prefix = requireNonEmptyString('prefix', options.prefix ?? 'retrysafe', 255);
  if (prefix.includes('#')) throw new TypeError(`retrysafe: option "prefix" must not hold "#", got ${describe(prefix)}`);
  return new DynamodbSessionStore({
    client: options.client,
    table: requireNonEmptyString('table', options.table, 255),
    keySchema: requireKeySchema(options.keySchema ?? DEFAULT_KEY_SCHEMA),
    prefix,
    ttlAttribute: requireNonEmptyString('ttlAttribute', options.ttlAttribute ?? 'ttl', 255),
    ttlGraceSeconds: requireIntegerIn('ttlGraceSeconds', options.ttlGraceSeconds ?? 86_400, 0, 31_536_000),
  });
}

interface Config {
  readonly client: DynamoDBClient;
  readonly table: string;
  readonly keySchema: DynamodbKeySchema;
  readonly prefix: string;
  readonly ttlAttribute: string;
  readonly ttlGraceSeconds: number;
}

function isFailedCondition(error: unknown): boolean {
  return error instanceof ConditionalCheckFailedException;
}

class DynamodbSessionStore implements SessionStore {
  /** The tail of each session's steps in this process (see `serial`). */
  private readonly queues = new Map<string, Promise<void>>();
  /** `#name` → attribute name, for the scans. */
  private readonly names: Readonly<Record<string, string>>;
  private readonly keyPrefix: string;

  constructor(private readonly config: Config) {
    this.keyPrefix = `session#${config.prefix}#`;
    this.names = Object.freeze({ '#pk': config.keySchema.partitionKey, '#leaseExpiresAt': A.leaseExpiresAt, '#clientId': A.clientId });
  }

  create(clientId: string, now: number, leaseMs: number): Promise<boolean> {
    return this.serial(clientId, async () => {
      try {
        await this.config.client.send(
          new PutItemCommand({
            TableName: this.config.table,
            Item: this.itemOf(newSession(clientId, now + leaseMs)),
            ConditionExpression: 'attribute_not_exists(#pk)',
            ExpressionAttributeNames: { '#pk': this.config.keySchema.partitionKey },
          }),
        );
        return true;
      } catch (error) {
        if (isFailedCondition(error)) return false;
        throw error;
      }
    });
  }

  begin(input: BeginInput): Promise<BeginResult> {
    return this.serial(input.clientId, () => this.step(input.clientId, (session) => beginStep(session, input)));
  }

  complete(clientId: string, requestNumber: number, token: string, response: string): Promise<boolean> {
    return this.fenced(clientId, requestNumber, token, 'SET #requests.#n.#state = :completed, #requests.#n.#response = :response, #version = #version + :one', {
      ':completed': { S: 'completed' },
      ':response': { S: response },
    });
  }

  release(clientId: string, requestNumber: number, token: string): Promise<boolean> {
    return this.fenced(clientId, requestNumber, token, 'REMOVE #requests.#n SET #version = #version + :one', {});
  }

  keepAlive(clientId: string, lowWaterMark: number, now: number, leaseMs: number): Promise<KeepAliveResult> {
    return this.serial(clientId, () => this.step(clientId, (session) => keepAliveStep(session, lowWaterMark, now, leaseMs)));
  }

  end(clientId: string): Promise<boolean> {
    return this.serial(clientId, async () => {
      const deleted = await this.config.client.send(new DeleteItemCommand({ TableName: this.config.table, Key: this.keyOf(clientId), ReturnValues: 'ALL_OLD' }));
      return deleted.Attributes !== undefined;
    });
  }

  /**
   * Scans the store's sessions whose lease ended at or before `now` and deletes each with a `DeleteItem`
   * conditioned on that still being so (a session renewed meanwhile stays), stopping at `limit`.
   */
  async reap(now: number, limit: number): Promise<number> {
    let deleted = 0;
    const filter = 'begins_with(#pk, :prefix) AND #leaseExpiresAt <= :now';
    const values: Item = { ':prefix': { S: this.keyPrefix }, ':now': { N: String(now) } };
    for await (const page of scanItems({ ...this.config, names: this.names }, filter, values, '#clientId')) {
      for (let i = 0; i < page.length && deleted < limit; ) {
        const slice = page.slice(i, i + (limit - deleted));
        i += slice.length;
        const outcomes = await Promise.all(slice.map((item) => this.reapOne(item[A.clientId]?.S ?? '', now)));
        deleted += outcomes.filter(Boolean).length;
      }
      if (deleted >= limit) break;
    }
    return deleted;
  }

  async stats(clientId: string): Promise<SessionStats | undefined> {
    const session = await this.read(clientId);
    return session && sessionCounters(session).stats;
  }

  /**
   * One page in client-id order (JavaScript string order): a strongly consistent scan of the table keeping
   * the first `query.limit` matching sessions in memory. Costs a read of the whole table per page.
   */
  async listSessions(query: SessionQuery): Promise<SessionSummary[]> {
    const { limit, clientIdPrefix, after } = query;
    requireLimit('listSessions', limit);
    const values: Item = { ':prefix': { S: this.keyPrefix + (clientIdPrefix ?? '') } };
    let page: SessionItem[] = [];
    for await (const items of scanItems({ ...this.config, names: this.names }, 'begins_with(#pk, :prefix)', values, undefined)) {
      for (const item of items) {
        const session = decodeSession(item);
        if (after === undefined || session.clientId > after) page.push(session);
      }
      page = page.sort((a, b) => (a.clientId < b.clientId ? -1 : 1)).slice(0, limit);
    }
    return page.map((session) => {
      const { stats, highest } = sessionCounters(session);
      return { clientId: session.clientId, ...stats, ...(highest !== undefined && { highestRequestNumber: highest }) };
    });
  }

  /** Nothing to release: the client is the caller's. */
  close(): Promise<void> {
    return Promise.resolve();
  }

  /**
   * Runs `run` after every step of `clientId` this store started before, so one process never races
   * itself on a session's version; the queue of a session is dropped once it drains.
   */
  private serial<R>(clientId: string, run: () => Promise<R>): Promise<R> {
    const current = (this.queues.get(clientId) ?? Promise.resolve()).then(run);
    const tail = current.then(
      () => undefined,
      () => undefined,
    );
    this.queues.set(clientId, tail);
    void tail.then(() => {
      if (this.queues.get(clientId) === tail) this.queues.delete(clientId);
    });
    return current;
  }

  /**
   * Reads the session, decides with `decide`, and writes the next version (when there is one) conditioned
   * on the version read. A write that meets another version decides again from the item the failed
   * condition hands back (read strongly consistent when the endpoint does not return it).
   */
  private async step<R>(clientId: string, decide: (session: SessionItem | undefined) => Step<R>): Promise<R> {
    let session = await this.read(clientId);
    for (let attempt = 1; ; attempt++) {
      const { result, next } = decide(session);
      if (next === undefined || session === undefined) return result;
      try {
        await this.config.client.send(
          new PutItemCommand({
            TableName: this.config.table,
            Item: this.itemOf(next),
            ConditionExpression: '#version = :read',
            ExpressionAttributeNames: { '#version': A.version },
            ExpressionAttributeValues: { ':read': { N: String(session.version) } },
            ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
          }),
        );
        return result;
      } catch (error) {
        const failed = await failedConditionItem(error, this.config.client, this.config.table, this.keyOf(clientId));
        if (failed === undefined) throw error;
        if (attempt >= MAX_WRITE_ATTEMPTS) throw new Error(`retrysafe: the DynamoDB session ${clientId} changed under ${attempt} writes in a row`);
        session = failed.item && decodeSession(failed.item);
      }
    }
  }

  /** One `UpdateItem` of request `requestNumber`, conditioned on it being in progress under `token`. */
  private fenced(clientId: string, requestNumber: number, token: string, update: string, values: Item): Promise<boolean> {
    return this.serial(clientId, async () => {
      try {
        await this.config.client.send(
          new UpdateItemCommand({
            TableName: this.config.table,
            Key: this.keyOf(clientId),
            UpdateExpression: update,
            ConditionExpression: '#requests.#n.#state = :inProgress AND #requests.#n.#token = :token',
            ExpressionAttributeNames: {
              '#requests': A.requests,
              '#n': String(requestNumber),
              '#state': 'state',
              '#token': 'token',
              '#version': A.version,
              ...(update.includes('#response') && { '#response': 'response' }),
            },
            ExpressionAttributeValues: { ...values, ':inProgress': { S: 'in_progress' }, ':token': { S: token }, ':one': { N: '1' } },
          }),
        );
        return true;
      } catch (error) {
        if (isFailedCondition(error)) return false;
        throw error;
      }
    });
  }

  private async reapOne(clientId: string, now: number): Promise<boolean> {
    try {
      await this.config.client.send(
        new DeleteItemCommand({
          TableName: this.config.table,
          Key: this.keyOf(clientId),
          ConditionExpression: '#leaseExpiresAt <= :now',
          ExpressionAttributeNames: { '#leaseExpiresAt': A.leaseExpiresAt },
          ExpressionAttributeValues: { ':now': { N: String(now) } },
        }),
      );
      return true;
    } catch (error) {
      if (isFailedCondition(error)) return false;
      throw error;
    }
  }

  private async read(clientId: string): Promise<SessionItem | undefined> {
    const read = await this.config.client.send(new GetItemCommand({ TableName: this.config.table, Key: this.keyOf(clientId), ConsistentRead: true }));
    return read.Item && decodeSession(read.Item);
  }

  private keyOf(clientId: string): Item {
    const key: Item = { [this.config.keySchema.partitionKey]: { S: this.keyPrefix + clientId } };
    if (this.config.keySchema.sortKey !== undefined) key[this.config.keySchema.sortKey] = { S: SORT_KEY_VALUE };
    return key;
  }

  /** The whole item of `session`: key, attributes and TTL (the lease plus the grace). */
  private itemOf(session: SessionItem): Item {
    return {
      ...this.keyOf(session.clientId),
      ...encodeSession(session),
      [this.config.ttlAttribute]: { N: String(ttlSeconds(session.leaseExpiresAt, this.config.ttlGraceSeconds)) },
    };
  }
}
