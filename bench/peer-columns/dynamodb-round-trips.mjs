// The DynamoDB column pair without HTTP: retrysafe's idempotentFunction over the DynamoDB store and
// Powertools' makeIdempotent over DynamoDBPersistenceLayer, called directly on the same DynamoDB Local
// (BENCH_DYNAMODB_URL). For new keys and for replays it reports, per call: the DynamoDB requests sent
// (by command), the wall time, the CPU time of this process (the library and the SDK: marshalling,
// signing, HTTP) and, given BENCH_DYNAMODB_PID, the CPU time of DynamoDB Local's JVM; then calls/s at 32
// concurrent calls. A raw GetItem/PutItem loop on the same client gives DynamoDB Local's own floor.
// Run from the peer benchmark's candidates/ (beside _retrysafe.mjs and _dynamodb.mjs):
//   BENCH_DYNAMODB_URL=http://127.0.0.1:8000 BENCH_DYNAMODB_PID=<java pid> RETRYSAFE_DIR=<built checkout> \
//     node candidates/dynamodb-round-trips.mjs [calls per phase, default 400]
// Subjects run A B B A, each on a fresh table, between two runs of the floor (the second on a warm JVM).
import { readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import process from 'node:process';
import { randomUUID } from 'node:crypto';
import { CreateTableCommand, DynamoDBClient, GetItemCommand, PutItemCommand } from '@aws-sdk/client-dynamodb';
import { IdempotencyConfig, makeIdempotent } from '@aws-lambda-powertools/idempotency';
import { DynamoDBPersistenceLayer } from '@aws-lambda-powertools/idempotency/dynamodb';
import { dep, product } from './_retrysafe.mjs';
import { CONTEXT, clientOptions, tableOf } from './_dynamodb.mjs';

const CALLS = Number(process.argv[2] ?? 400);
const CONCURRENCY = 32;
const BODY = { amount: 1000, currency: 'EUR' };
const TICK_US = 1e6 / 100; // USER_HZ

/** CPU µs of DynamoDB Local's JVM so far, or NaN without its pid. */
function jvmCpuUs() {
  const pid = process.env.BENCH_DYNAMODB_PID;
  if (!pid) return NaN;
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return (Number(fields[11]) + Number(fields[12])) * TICK_US;
}

function counter(client) {
  const sent = new Map();
  client.middlewareStack.add(
    (next, context) => (args) => {
      sent.set(context.commandName, (sent.get(context.commandName) ?? 0) + 1);
      return next(args);
    },
    { step: 'initialize', name: 'benchCountRequests' },
  );
  return sent;
}

/** Runs `call(i)` for i < CALLS one at a time, then measures calls/s with CONCURRENCY in flight. */
async function phase(label, sent, call) {
  sent.clear();
  const cpu0 = process.cpuUsage();
  const jvm0 = jvmCpuUs();
  const t0 = performance.now();
  for (let i = 0; i < CALLS; i++) await call(i);
  const wall = (performance.now() - t0) / CALLS;
  const cpu = process.cpuUsage(cpu0);
  const jvm = (jvmCpuUs() - jvm0) / CALLS;
  const requests = Object.fromEntries([...sent].map(([name, n]) => [name.replace(/Command$/, ''), +(n / CALLS).toFixed(2)]));
  let next = CALLS;
  const t1 = performance.now();
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (next < 4 * CALLS) await call(next++);
    }),
  );
  const rate = (3 * CALLS) / ((performance.now() - t1) / 1000);
  process.stdout.write(
    `${label.padEnd(34)} requests/call ${JSON.stringify(requests).padEnd(44)} wall ${wall.toFixed(2)} ms  cpu ${((cpu.user + cpu.system) / CALLS).toFixed(0)} µs  jvm ${jvm.toFixed(0)} µs  c${CONCURRENCY} ${rate.toFixed(0)}/s\n`,
  );
}

async function ours(prefix) {
  const { DynamoDBClient: ProductClient } = dep('@aws-sdk/client-dynamodb');
  const { createReceiver } = await product('.');
  const { createDynamodbStore, createDynamodbTable } = await product('./dynamodb');
  const { idempotentFunction } = await product('./lambda');
  const client = new ProductClient(clientOptions());
  const table = tableOf('rt_ours');
  await createDynamodbTable(client, { table });
  const sent = counter(client);
  const receiver = createReceiver({ store: createDynamodbStore({ client, table }), leaseMs: 30_000 });
  const fn = idempotentFunction(async (event) => ({ id: randomUUID(), key: event.idempotencyKey }), {
    receiver,
    key: (event) => event.idempotencyKey,
    fingerprint: (event) => event.body,
  });
  return { client, sent, call: (key) => fn({ idempotencyKey: `${prefix}${key}`, body: BODY }, CONTEXT) };
}

async function powertools(prefix) {
  const client = new DynamoDBClient(clientOptions());
  const tableName = tableOf('rt_powertools');
  await client.send(
    new CreateTableCommand({
      TableName: tableName,
      BillingMode: 'PAY_PER_REQUEST',
      AttributeDefinitions: [{ AttributeName: 'id', AttributeType: 'S' }],
      KeySchema: [{ AttributeName: 'id', KeyType: 'HASH' }],
    }),
  );
  const sent = counter(client);
  const config = new IdempotencyConfig({ eventKeyJmesPath: 'idempotencyKey', throwOnNoIdempotencyKey: true, expiresAfterSeconds: 3600, lambdaContext: CONTEXT });
  const fn = makeIdempotent(async (event) => ({ id: randomUUID(), key: event.idempotencyKey }), {
    persistenceStore: new DynamoDBPersistenceLayer({ tableName, awsSdkV3Client: client }),
    config,
  });
  return { client, sent, call: (key) => fn({ idempotencyKey: `${prefix}${key}`, body: BODY }) };
}

/** DynamoDB Local's floor on one client: a PutItem and a GetItem of small items, as the libraries send. */
async function floor() {
  const client = new DynamoDBClient(clientOptions());
  const TableName = tableOf('rt_floor');
  await client.send(
    new CreateTableCommand({ TableName, BillingMode: 'PAY_PER_REQUEST', AttributeDefinitions: [{ AttributeName: 'id', AttributeType: 'S' }], KeySchema: [{ AttributeName: 'id', KeyType: 'HASH' }] }),
  );
  const sent = counter(client);
  await phase('floor: PutItem', sent, (i) => client.send(new PutItemCommand({ TableName, Item: { id: { S: `k${i}` }, v: { S: 'x'.repeat(200) } } })));
  await phase('floor: GetItem (consistent)', sent, (i) => client.send(new GetItemCommand({ TableName, Key: { id: { S: `k${i % CALLS}` } }, ConsistentRead: true })));
  client.destroy();
}

await floor();
// A B B A: DynamoDB Local's JVM keeps compiling as it runs, which favours whoever goes later.
const subjects = [
  ['retrysafe idempotentFunction', ours],
  ['powertools makeIdempotent', powertools],
];
for (const [name, open] of [...subjects, ...subjects.reverse()]) {
  const run = `${randomUUID()}-`;
  const subject = await open(run);
  await phase(`${name}: new keys`, subject.sent, (i) => subject.call(i));
  await phase(`${name}: replays`, subject.sent, (i) => subject.call(i % CALLS));
  subject.client.destroy();
}
// Again once the JVM is warm: the floor to compare the subjects with.
await floor();
