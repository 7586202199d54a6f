/**
 * The DynamoDB kit: the idempotency store on Amazon DynamoDB, through the AWS SDK v3
 * (`@aws-sdk/client-dynamodb`). The table, the clock it runs on and how it maps to AWS Lambda Powertools'
 * layout are in docs/aws.md.
 *
 * @module
 */
export { createDynamodbStore, type DynamodbStore, type DynamodbStoreOptions } from './factory.js';
export type { DynamodbKeySchema } from './layout.js';
export { createDynamodbTable, dynamodbTableDefinition, type DynamodbTableOptions, type DynamodbTableResult } from './table.js';
export { DynamodbTransaction } from './transaction.js';
