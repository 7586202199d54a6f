/**
 * The table the DynamoDB store needs, and the helper that creates it (`retrysafe migrate --store
 * dynamodb://…` runs it).
 *
 * @module
 */
import {
  CreateTableCommand,
  DescribeTableCommand,
  DescribeTimeToLiveCommand,
  ResourceNotFoundException,
  UpdateTimeToLiveCommand,
  type CreateTableCommandInput,
  type DynamoDBClient,
} from '@aws-sdk/client-dynamodb';
import { requireNonEmptyString, requireOptions } from '../../core/validate.js';
import { DEFAULT_KEY_SCHEMA, type DynamodbKeySchema } from './layout.js';

/** What {@link dynamodbTableDefinition} and {@link createDynamodbTable} are told about the table. */
export interface DynamodbTableOptions {
  /** The table's name. */
  readonly table: string;
  /** Its key attributes, as the store is given them. @defaultValue `{ partitionKey: 'pk', sortKey: 'sk' }` */
  readonly keySchema?: DynamodbKeySchema;
  /** The attribute TTL is enabled on, as the store is given it. @defaultValue 'ttl' */
  readonly ttlAttribute?: string;
}

/**
 * The `CreateTable` input of the store's table: the key attributes (type S), on-demand capacity
 * (`PAY_PER_REQUEST`). The same table as CloudFormation:
 *
 * ```yaml
 * IdempotencyTable:
 *   Type: AWS::DynamoDB::Table
 *   Properties:
 *     BillingMode: PAY_PER_REQUEST
 *     AttributeDefinitions: [{ AttributeName: pk, AttributeType: S }, { AttributeName: sk, AttributeType: S }]
 *     KeySchema: [{ AttributeName: pk, KeyType: HASH }, { AttributeName: sk, KeyType: RANGE }]
 *     TimeToLiveSpecification: { AttributeName: ttl, Enabled: true }
 * ```
 *
 * TTL is a separate call on DynamoDB (`UpdateTimeToLive`), made by {@link createDynamodbTable}.
 *
 * @example
 * ```ts
 * await client.send(new CreateTableCommand(dynamodbTableDefinition({ table: 'idempotency' })));
 * ```
 */
export function dynamodbTableDefinition(options: DynamodbTableOptions): CreateTableCommandInput {
  requireOptions('dynamodbTableDefinition', options);
  const table = requireNonEmptyString('table', options.table, 255);
  const { partitionKey, sortKey } = options.keySchema ?? DEFAULT_KEY_SCHEMA;
  const keys = sortKey === undefined ? [partitionKey] : [partitionKey, sortKey];
  return {
    TableName: table,
    BillingMode: 'PAY_PER_REQUEST',
    AttributeDefinitions: keys.map((name) => ({ AttributeName: name, AttributeType: 'S' })),
    KeySchema: keys.map((name, i) => ({ AttributeName: name, KeyType: i === 0 ? 'HASH' : 'RANGE' })),
  };
}

/** What {@link createDynamodbTable} did. */
export interface DynamodbTableResult {
  /** `true` when the table was created, `false` when it existed already. */
  readonly created: boolean;
  /** `true` when TTL was switched on now, `false` when it was on already. */
  readonly ttlEnabled: boolean;
}

/** How long {@link createDynamodbTable} waits for a new table to become ACTIVE, in milliseconds. */
const ACTIVE_TIMEOUT_MS = 120_000;

/**
 * Creates the store's table when it does not exist, waits until it is ACTIVE, and enables TTL on the TTL
 * attribute when it is not yet. Idempotent: safe at every deploy. An existing table is left as it is (its
 * key schema is not checked against `options`).
 *
 * @throws the SDK's error when DynamoDB refuses (no permission, a bad name), or Error when the table does
 *   not become ACTIVE within 2 minutes
 * @example
 * ```ts
 * import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
 * import { createDynamodbTable } from 'retrysafe/dynamodb';
 * await createDynamodbTable(new DynamoDBClient({}), { table: 'idempotency' });
 * ```
 */
export async function createDynamodbTable(client: DynamoDBClient, options: DynamodbTableOptions): Promise<DynamodbTableResult> {
  const definition = dynamodbTableDefinition(options);
  const table = definition.TableName as string;
  const ttlAttribute = requireNonEmptyString('ttlAttribute', options.ttlAttribute ?? 'ttl', 255);
  let created = false;
  if (!(await tableExists(client, table))) {
    try {
      await client.send(new CreateTableCommand(definition));
      created = true;
    } catch (error) {
      // Another deploy created it first.
      if ((error as { name?: unknown }).name !== 'ResourceInUseException') throw error;
    }
  }
  await untilActive(client, table);
  const ttl = await client.send(new DescribeTimeToLiveCommand({ TableName: table }));
  const status = ttl.TimeToLiveDescription?.TimeToLiveStatus;
  if (status === 'ENABLED' || status === 'ENABLING') return { created, ttlEnabled: false };
  await client.send(new UpdateTimeToLiveCommand({ TableName: table, TimeToLiveSpecification: { Enabled: true, AttributeName: ttlAttribute } }));
  return { created, ttlEnabled: true };
}

/** Whether `table` exists (in any status). */
export async function tableExists(client: DynamoDBClient, table: string): Promise<boolean> {
  try {
    await client.send(new DescribeTableCommand({ TableName: table }));
    return true;
  } catch (error) {
    if (error instanceof ResourceNotFoundException || (error as { name?: unknown }).name === 'ResourceNotFoundException') return false;
    throw error;
  }
}

async function untilActive(client: DynamoDBClient, table: string): Promise<void> {
  const deadline = Date.now() + ACTIVE_TIMEOUT_MS;
  for (;;) {
    const { Table } = await client.send(new DescribeTableCommand({ TableName: table }));
    if (Table?.TableStatus === 'ACTIVE') return;
    if (Date.now() > deadline) throw new Error(`retrysafe: the DynamoDB table ${table} did not become ACTIVE within ${ACTIVE_TIMEOUT_MS} ms`);
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
}
