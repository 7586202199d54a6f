/**
 * `retrysafe/dynamodb`: everything on Amazon DynamoDB, through the AWS SDK v3 (`@aws-sdk/client-dynamodb`):
 * the idempotency store and its table (`src/stores/dynamodb`), the client-session store and the inbox store. The table,
 * the clock it runs on and how it maps to AWS Lambda Powertools' layout are in docs/aws.md.
 *
 * @module
 */
export { createDynamodbStore, createDynamodbTable, dynamodbTableDefinition, DynamodbTransaction } from './stores/dynamodb/index.js';
export type { DynamodbKeySchema, DynamodbStore, DynamodbStoreOptions, DynamodbTableOptions, DynamodbTableResult } from './stores/dynamodb/index.js';
export { createDynamodbSessionStore, type DynamodbSessionStoreOptions } from './sessions/dynamodb.js';
export { createDynamodbInboxStore, type DynamodbInboxStoreOptions } from './messaging/inbox/dynamodb.js';
