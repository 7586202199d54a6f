/**
 * The client and the store a `dynamodb://` store URL opens (for the CLI's `--store dynamodb://…`).
 *
 * @module
 */
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { createStore, type DynamodbStore } from './factory.js';
import type { DynamodbUrl } from './target.js';

/** A client for what `target` names: its region and endpoint, credentials from the SDK's default chain. */
export function clientFor(target: DynamodbUrl): DynamoDBClient {
  return new DynamoDBClient({
    ...(target.region !== undefined && { region: target.region }),
    ...(target.endpoint !== undefined && { endpoint: target.endpoint }),
  });
}

/**
 * A store on the table `target` names, with a client of its own that its `close()` destroys.
 *
 * @example
 * ```ts
 * const store = openDynamodbStore({ table: 'idempotency', region: 'eu-west-1', endpoint: undefined, keySchema: { partitionKey: 'pk', sortKey: 'sk' }, ttlAttribute: 'ttl' });
 * await store.ping();
 * ```
 */
export function openDynamodbStore(target: DynamodbUrl): DynamodbStore {
  const client = clientFor(target);
  return createStore({ client, table: target.table, keySchema: target.keySchema, ttlAttribute: target.ttlAttribute }, () => client.destroy());
}
