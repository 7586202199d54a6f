/**
 * The resolved configuration every part of the DynamoDB store kit reads.
 *
 * @module
 */
import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import type { Clock } from '../../core/clock.js';
import { attributeNames, itemKey, type DynamodbKeySchema, type Item } from './layout.js';

/** The frozen configuration of a DynamoDB store (see `createDynamodbStore`, which validates it). */
export interface DynamodbStoreConfig {
  readonly client: DynamoDBClient;
  readonly table: string;
  readonly keySchema: DynamodbKeySchema;
  readonly ttlAttribute: string;
  /** Seconds the TTL attribute adds past a record's last deadline. */
  readonly ttlGraceSeconds: number;
  /** "Now" for every decision: DynamoDB has no server clock a condition can read. */
  readonly clock: Clock;
  readonly generateId: () => string;
  /** `#name` → attribute name, for the record, key and TTL attributes. */
  readonly names: Readonly<Record<string, string>>;
  /** The primary key of (scope, key). */
  itemKey(scope: string, key: string): Item;
  /** Closes what the store owns (a client it created itself); nothing for a caller's client. */
  readonly dispose: () => void;
}

/** The configuration, frozen, with the derived attribute names and key function. */
export function resolveConfig(
  base: Omit<DynamodbStoreConfig, 'names' | 'itemKey'>,
): DynamodbStoreConfig {
  const names: Record<string, string> = { ...attributeNames(base.ttlAttribute), '#pk': base.keySchema.partitionKey };
  if (base.keySchema.sortKey !== undefined) names['#sk'] = base.keySchema.sortKey;
  const schema = base.keySchema;
  return Object.freeze({ ...base, names: Object.freeze(names), itemKey: (scope: string, key: string) => itemKey(schema, scope, key) });
}
