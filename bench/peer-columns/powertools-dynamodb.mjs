// @aws-lambda-powertools/idempotency: makeIdempotent + DynamoDBPersistenceLayer, served by fastify: the
// column paired with `ours-dynamodb-fn` on the same DynamoDB Local endpoint (./_dynamodb.mjs). Wired as the
// harness's powertools-redis column (peers/_powertools.mjs: eventKeyJmesPath 'idempotencyKey', a constant
// fake context, 1 h expiry), on Powertools' own table layout (partition key `id`), the client handed in
// as `awsSdkV3Client`. Needs @aws-sdk/client-dynamodb and @aws-sdk/lib-dynamodb installed in the harness
// (npm install --save-exact, same versions as the product's).
import Fastify from 'fastify';
import { CreateTableCommand, DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { IdempotencyConfig, makeIdempotent } from '@aws-lambda-powertools/idempotency';
import { DynamoDBPersistenceLayer } from '@aws-lambda-powertools/idempotency/dynamodb';
import { CONTEXT, clientOptions, countRequests, serve, tableOf } from './_dynamodb.mjs';

export const meta = {
  id: 'powertools-dynamodb',
  label: 'powertools makeIdempotent + DynamoDBPersistenceLayer (fake ctx, DynamoDB Local)',
  framework: 'fastify',
  store: 'dynamodb',
  baseline: 'bare-fastify',
  idempotent: true,
  packages: ['@aws-lambda-powertools/idempotency', '@aws-sdk/client-dynamodb', 'fastify'],
};

export async function start(ctx) {
  const client = new DynamoDBClient(clientOptions());
  const tableName = tableOf(ctx.keyPrefix);
  await client.send(
    new CreateTableCommand({
      TableName: tableName,
      BillingMode: 'PAY_PER_REQUEST',
      AttributeDefinitions: [{ AttributeName: 'id', AttributeType: 'S' }],
      KeySchema: [{ AttributeName: 'id', KeyType: 'HASH' }],
    }),
  );
  const report = countRequests(client, meta.id);
  const persistenceStore = new DynamoDBPersistenceLayer({ tableName, awsSdkV3Client: client });
  const config = new IdempotencyConfig({
    eventKeyJmesPath: 'idempotencyKey',
    throwOnNoIdempotencyKey: true,
    expiresAfterSeconds: 3600,
    lambdaContext: CONTEXT,
  });
  const processPayment = makeIdempotent(async (event) => ctx.work(event.idempotencyKey, event.body), {
    persistenceStore,
    config,
    keyPrefix: ctx.keyPrefix.replace(/:$/, ''),
  });
  const app = await serve(Fastify, ctx, (event) => processPayment(event));
  return {
    close: async () => {
      await app.close();
      report();
      client.destroy();
    },
  };
}
