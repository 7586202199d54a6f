/**
 * The factory of the DynamoDB store: options, their validation, and the frozen configuration.
 *
 * @module
 */
import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { systemClock, type Clock } from '../../core/clock.js';
import { randomLeaseToken } from '../../core/lease-token.js';
import { describe, invalidOption, requireClock, requireGenerateId, requireIntegerIn, requireNonEmptyString, requireObject, requireOptions } from '../../core/validate.js';
import { resolveConfig } from './config.js';
import { DEFAULT_KEY_SCHEMA, type DynamodbKeySchema } from './layout.js';
import { DynamodbStore } from './store.js';

/**
 * The store `createDynamodbStore` returns: every optional method of the contract but `waitFor`, plus
 * `renew` (fenced lease keep-alive).
 */
export type { DynamodbStore };

/** Options of {@link createDynamodbStore}. */
export interface DynamodbStoreOptions {
  /**
   * The low-level client (`@aws-sdk/client-dynamodb`) the store sends its requests through; caller-owned:
   * `close()` leaves it open. Its retry strategy applies: a retried claim or completion whose first reply
   * was lost is recognised by its lease token, so retries are safe.
   */
  readonly client: DynamoDBClient;
  /** The table (see `dynamodbTableDefinition`; `createDynamodbTable` or `retrysafe migrate` creates it). */
  readonly table: string;
  /**
   * The table's key attributes: a partition key and a sort key (records of a scope share a partition), or
   * a partition key only (`sortKey: undefined`, one partition per record, keyed by a SHA-256 of scope and
   * key). Both of type S. @defaultValue `{ partitionKey: 'pk', sortKey: 'sk' }`
   */
  readonly keySchema?: DynamodbKeySchema;
  /**
   * The attribute the table's TTL is enabled on (a number, seconds since the epoch). DynamoDB deletes an
   * expired item late (typically within days), so the store never trusts it: every condition still checks
   * the record's own expiry. @defaultValue 'ttl'
   */
  readonly ttlAttribute?: string;
  /**
   * Seconds the TTL attribute adds past a record's last deadline (its retention, or a lease outliving
   * it), a margin for callers' clocks that run behind AWS's. @defaultValue 300
   */
  readonly ttlGraceSeconds?: number;
  /**
   * Time source of every decision (lease expiry, retention). DynamoDB has no server clock a condition
   * expression can read, so "now" is the caller's: processes sharing the table need synchronised clocks
   * (NTP; on AWS, the Time Sync Service keeps Lambda and EC2 within a millisecond or so). A process whose
   * clock runs ahead by more than a lease takes over live leases; keep leases far longer than the skew.
   * @defaultValue the system clock
   */
  readonly clock?: Clock;
  /** Fencing-token generator. @defaultValue a random UUID (version 4) */
  readonly generateId?: () => string;
}

/** DynamoDB attribute names: 1 to 255 bytes. */
const NAME_BYTES = 255;

/**
 * Creates an {@link IdempotencyStore} on one DynamoDB table. Each operation is one conditional write (or
 * one read): `claim` is a conditional `UpdateItem` that creates the record or replaces an expired one and
 * bumps the item's fence counter, and a refused claim (a replay, a key in progress) is answered from the
 * failed condition's old item (`ReturnValuesOnConditionCheckFailure: ALL_OLD`) without a second read; a
 * takeover of an expired lease is a second write conditioned on the fence counter. `complete`, `release`,
 * `checkpoint` and `renew` are conditioned on the lease token. A response over the 400 KB item limit is
 * saved without its body and replays as a 410 problem. `listAbandoned`, `listRecords`, `reap` and
 * `countExpiredLeases` scan the table. No `waitFor`: DynamoDB has no notifications, so a waiting
 * duplicate polls (`pollIntervalMs`).
 *
 * "Now" is the caller's clock (option `clock`): see docs/aws.md for the table definition and the clock.
 *
 * @throws TypeError naming the option when an option is invalid
 * @example
 * ```ts
 * import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
 * import { createReceiver } from 'retrysafe';
 * import { createDynamodbStore } from 'retrysafe/dynamodb';
 *
 * const store = createDynamodbStore({ client: new DynamoDBClient({}), table: 'idempotency' });
 * const receiver = createReceiver({ store });
 * ```
 */
export function createDynamodbStore(options: DynamodbStoreOptions): DynamodbStore {
  return createStore(options, () => undefined);
}

/** {@link createDynamodbStore}, with `dispose` run by the store's `close()` (a client the store owns). */
export function createStore(options: DynamodbStoreOptions, dispose: () => void): DynamodbStore {
  requireOptions('createDynamodbStore', options);
  // Duck-typed: an application may hold another copy of the SDK than the one this package resolves.
  if (typeof (options.client as Partial<DynamoDBClient> | undefined)?.send !== 'function') {
    throw invalidOption('client', 'a DynamoDBClient of @aws-sdk/client-dynamodb', options.client);
  }
  const table = requireNonEmptyString('table', options.table, 255);
  const keySchema = requireKeySchema(options.keySchema ?? DEFAULT_KEY_SCHEMA);
  const ttlAttribute = requireNonEmptyString('ttlAttribute', options.ttlAttribute ?? 'ttl', NAME_BYTES);
  const ttlGraceSeconds = requireIntegerIn('ttlGraceSeconds', options.ttlGraceSeconds ?? 300, 0, 31_536_000);
  const clock = requireClock(options.clock ?? systemClock);
  const generateId = requireGenerateId(options.generateId ?? randomLeaseToken);
  return new DynamodbStore(resolveConfig({ client: options.client, table, keySchema, ttlAttribute, ttlGraceSeconds, clock, generateId, dispose }));
}

/**
 * The key schema, frozen, when both names are non-empty and distinct.
 *
 * @throws TypeError naming `keySchema` (or the attribute) otherwise
 */
export function requireKeySchema(value: DynamodbKeySchema): DynamodbKeySchema {
  requireObject('keySchema', value);
  const partitionKey = requireNonEmptyString('keySchema.partitionKey', value.partitionKey, NAME_BYTES);
  const sortKey = value.sortKey === undefined ? undefined : requireNonEmptyString('keySchema.sortKey', value.sortKey, NAME_BYTES);
  if (sortKey === partitionKey) {
    throw new TypeError(`retrysafe: option "keySchema" must name two different attributes, got ${describe(value)}`);
  }
  return Object.freeze({ partitionKey, sortKey });
}
