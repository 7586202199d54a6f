// retrysafe's function API (`idempotentFunction` of retrysafe/lambda) over the DynamoDB store, served by
// fastify: the column paired with `powertools-dynamodb` on the same DynamoDB Local endpoint (./_dynamodb.mjs).
// Wiring as docs/aws.md shows it: createDynamodbTable, then createDynamodbStore({ client, table }) and
// createReceiver({ store, leaseMs: 30_000 }) (a lease no longer than the fake invocation's 30 s left, so
// no renewal is ever written); the key is the event's idempotencyKey, the fingerprint its body.
import { PRODUCT_LABEL, dep, product } from './_retrysafe.mjs';
import { CONTEXT, clientOptions, countRequests, serve, tableOf } from './_dynamodb.mjs';

export const meta = {
  id: 'ours-dynamodb-fn',
  label: `${PRODUCT_LABEL}: retrysafe idempotentFunction + DynamoDB store (fastify, DynamoDB Local)`,
  framework: 'fastify',
  store: 'dynamodb',
  baseline: 'bare-fastify',
  idempotent: true,
  packages: ['fastify', '@aws-sdk/client-dynamodb'],
};

export async function start(ctx) {
  const Fastify = dep('fastify');
  const { DynamoDBClient } = dep('@aws-sdk/client-dynamodb');
  const { createReceiver } = await product('.');
  const { createDynamodbStore, createDynamodbTable } = await product('./dynamodb');
  const { idempotentFunction } = await product('./lambda');
  const client = new DynamoDBClient(clientOptions());
  const table = tableOf(ctx.keyPrefix);
  await createDynamodbTable(client, { table });
  const report = countRequests(client, meta.id);
  const store = createDynamodbStore({ client, table });
  const receiver = createReceiver({ store, leaseMs: 30_000 });
  const processPayment = idempotentFunction(async (event) => ctx.work(event.idempotencyKey, event.body), {
    receiver,
    key: (event) => event.idempotencyKey,
    fingerprint: (event) => event.body,
  });
  const app = await serve(Fastify, ctx, (event) => processPayment(event, CONTEXT));
  return {
    close: async () => {
      await app.close();
      report();
      await store.close();
      client.destroy();
    },
  };
}
