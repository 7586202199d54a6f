/**
 * How a record is laid out as one DynamoDB item: its primary key (a partition key and a sort key, or one
 * partition key holding a hash of both), its attributes, and the conversions both ways.
 *
 * | attribute | type | holds |
 * |---|---|---|
 * | partition key (`pk`) | S | `s#` + scope; or, with no sort key, the base64url SHA-256 of (scope, key) |
 * | sort key (`sk`) | S | `k#` + key (the prefixes keep an empty scope or key a valid key value) |
 * | `scope`, `key` | S | the scope and key as given |
 * | `fingerprint` | S | the claiming request's fingerprint |
 * | `state` | S | `in_progress` or `completed` |
 * | `leaseToken` | S | the fencing token of the current holder |
 * | `fence` | N | a counter bumped by every claim, takeover included: the version a takeover is conditioned on |
 * | `leaseExpiresAt`, `createdAt`, `expiresAt`, `completedAt` | N | ms since the epoch, by the callers' clocks |
 * | `recoveryPoint` | S | the last recovery point of a multi-phase operation |
 * | `status`, `headers`, `body` | N, S, B | the saved response: status, headers as JSON, body bytes |
 * | TTL attribute (`ttl`) | N | seconds since the epoch after which DynamoDB may delete the item |
 *
 * @module
 */
import { createHash } from 'node:crypto';
import type { AttributeValue } from '@aws-sdk/client-dynamodb';
import type { IdempotencyRecord, RecordDraft, StoredResponse } from '../../core/record.js';

/** An item as the low-level client reads and writes it. */
export type Item = Record<string, AttributeValue>;

/** The names of a table's key attributes: a partition key and, optionally, a sort key. */
export interface DynamodbKeySchema {
  /** Name of the partition (HASH) key attribute, of type S. */
  readonly partitionKey: string;
  /**
   * Name of the sort (RANGE) key attribute, of type S; `undefined` for a table with a partition key only,
   * which then holds a SHA-256 of (scope, key).
   */
  readonly sortKey: string | undefined;
}

/** The default key schema: `pk` (`s#` + scope) and `sk` (`k#` + key). */
export const DEFAULT_KEY_SCHEMA: DynamodbKeySchema = Object.freeze({ partitionKey: 'pk', sortKey: 'sk' });

/** The record attributes, by role. Every expression names them through `#` placeholders (several are reserved words). */
export const A = Object.freeze({
  scope: 'scope',
  key: 'key',
  fingerprint: 'fingerprint',
  state: 'state',
  leaseToken: 'leaseToken',
  fence: 'fence',
  leaseExpiresAt: 'leaseExpiresAt',
  createdAt: 'createdAt',
  completedAt: 'completedAt',
  expiresAt: 'expiresAt',
  recoveryPoint: 'recoveryPoint',
  status: 'status',
  headers: 'headers',
  body: 'body',
});

/** `ExpressionAttributeNames` for every record attribute: `#scope` → `scope`, and so on. */
export function attributeNames(ttlAttribute: string): Record<string, string> {
  const names: Record<string, string> = { '#ttl': ttlAttribute };
  for (const name of Object.values(A)) names[`#${name}`] = name;
  return names;
}

/** The primary key of (scope, key) under `schema`. */
export function itemKey(schema: DynamodbKeySchema, scope: string, key: string): Item {
  if (schema.sortKey === undefined) {
    // Length-prefixed, so ("a:b", "c") and ("a", "b:c") hash apart.
    const digest = createHash('sha256').update(`${scope.length}:${scope}${key}`).digest('base64url');
    return { [schema.partitionKey]: { S: digest } };
  }
  return { [schema.partitionKey]: { S: `s#${scope}` }, [schema.sortKey]: { S: `k#${key}` } };
}

/** A DynamoDB number. */
export function n(value: number): AttributeValue {
  return { N: String(value) };
}

/** A DynamoDB string. */
export function s(value: string): AttributeValue {
  return { S: value };
}

/**
 * The TTL attribute's value for a record whose last deadline is `untilMs` (ms since the epoch): whole
 * seconds, plus `graceSeconds`. DynamoDB deletes an item some time after that (typically within days, never
 * before), so every decision still reads `expiresAt` and `leaseExpiresAt`; the TTL only clears the table.
 */
export function ttlSeconds(untilMs: number, graceSeconds: number): number {
  return Math.ceil(untilMs / 1000) + graceSeconds;
}

function number(item: Item, name: string): number {
  const value = item[name]?.N;
  if (value === undefined) throw new Error(`retrysafe: DynamoDB item without the number attribute "${name}"`);
  return Number(value);
}

function text(item: Item, name: string): string {
  const value = item[name]?.S;
  if (value === undefined) throw new Error(`retrysafe: DynamoDB item without the string attribute "${name}"`);
  return value;
}

/** The record an item holds. */
export function decodeItem(item: Item): IdempotencyRecord {
  const record: RecordDraft = {
    scope: text(item, A.scope),
    key: text(item, A.key),
    fingerprint: text(item, A.fingerprint),
    state: text(item, A.state) === 'completed' ? 'completed' : 'in_progress',
    leaseToken: text(item, A.leaseToken),
    leaseExpiresAt: number(item, A.leaseExpiresAt),
    createdAt: number(item, A.createdAt),
    expiresAt: number(item, A.expiresAt),
  };
  const recoveryPoint = item[A.recoveryPoint]?.S;
  if (recoveryPoint !== undefined) record.recoveryPoint = recoveryPoint;
  if (record.state === 'completed') {
    record.completedAt = number(item, A.completedAt);
    record.response = decodeResponse(item);
  }
  return record;
}

function decodeResponse(item: Item): StoredResponse {
  const body = item[A.body]?.B;
  return {
    status: number(item, A.status),
    headers: JSON.parse(text(item, A.headers)) as Record<string, string>,
    // DynamoDB rejects an empty binary attribute, so an empty body is stored as no attribute.
    body: body === undefined ? new Uint8Array(0) : body,
  };
}

/** The fence counter of an item (0 for an item written before it had one). */
export function fenceOf(item: Item): number {
  const value = item[A.fence]?.N;
  return value === undefined ? 0 : Number(value);
}
