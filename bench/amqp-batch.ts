/**
 * RabbitMQ consumer throughput with the PostgreSQL inbox: `startAmqpBatchConsumer` with
 * `inboxBatchProcessor` (batch size 50, prefetch 100) against `startAmqpConsumer` with `inboxProcessor`
 * (prefetch 32, which is also its concurrency), in the same run, alternating, over several rounds. Each
 * round publishes the messages to a fresh queue first, then times the consumer from its start until every
 * message is acked. Each message does one business INSERT. Reports messages/s (median and range over rounds).
 *
 * Run: `node --import tsx bench/amqp-batch.ts`. Environment: BENCH_AMQP_BATCH_MESSAGES (per round and mode,
 * default 2000), BENCH_AMQP_BATCH_SIZE (50), BENCH_AMQP_BATCH_ROUNDS (3), RETRYSAFE_POSTGRES_URL,
 * RETRYSAFE_AMQP_URL. The schema (`bench_ab_<run>`) and the queues it creates are removed at the end.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import amqp from 'amqplib';
import pg from 'pg';
import { createInbox, createPostgresInboxStore, inboxBatchProcessor, inboxProcessor, type BatchProcessor, type MessageProcessor } from '../src/messaging/inbox/index.js';
import { startAmqpBatchConsumer, startAmqpConsumer, type AmqpConsumer } from '../src/messaging/transports/amqp.js';
import { migrate } from '../src/postgres.js';
import { effectInsert, envCount } from './messaging/context.js';

const messages = envCount('BENCH_AMQP_BATCH_MESSAGES', 2_000);
const batchSize = envCount('BENCH_AMQP_BATCH_SIZE', 50);
const rounds = envCount('BENCH_AMQP_BATCH_ROUNDS', 3);
const run = randomBytes(4).toString('hex');
const schema = `bench_ab_${run}`;
const pool = new pg.Pool({ connectionString: process.env['RETRYSAFE_POSTGRES_URL'] ?? 'postgres://postgres@127.0.0.1:5432/test', max: 8 });
const connection = await amqp.connect(process.env['RETRYSAFE_AMQP_URL'] ?? 'amqp://guest:guest@127.0.0.1:5672');
const queues: string[] = [];

/** Publishes `messages` to a fresh queue and answers its name once the broker confirmed them all. */
async function fill(): Promise<string> {
  const queue = `bench.${run}.${queues.length}`;
  queues.push(queue);
  const channel = await connection.createConfirmChannel();
  await channel.assertQueue(queue, { durable: false });
  for (let i = 0; i < messages; i += 1) channel.sendToQueue(queue, Buffer.from('x'), { messageId: randomUUID() });
  await channel.waitForConfirms();
  await channel.close();
  return queue;
}

/** Times `start` from its call until `messages` deliveries were settled `ack`; answers messages/s. */
async function measure(start: (queue: string, acked: () => void) => Promise<AmqpConsumer>): Promise<number> {
  const queue = await fill();
  let acked = 0;
  let done: () => void = () => undefined;
  const finished = new Promise<void>((resolve) => (done = resolve));
  const started = performance.now();
  const consumer = await start(queue, () => {
    acked += 1;
    if (acked === messages) done();
  });
  await finished;
  const seconds = (performance.now() - started) / 1000;
  await consumer.stop();
  return messages / seconds;
}

function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)] as number;
}

try {
  await migrate({ pool, schema });
  await pool.query(`CREATE TABLE "${schema}".bench_effects (id bigserial PRIMARY KEY, message_id text NOT NULL, body text NOT NULL)`);
  const insert = effectInsert(schema);
  const inbox = createInbox({ store: createPostgresInboxStore({ pool, schema }) });
  const single: number[] = [];
  const batched: number[] = [];
  for (let round = 0; round < rounds; round += 1) {
    single.push(
      await measure(async (queue, acked) => {
        const inner = inboxProcessor(inbox, 'bench', async (message, tx) => void (await tx.query(insert, [message.id, 'x'])));
        const process: MessageProcessor = async (message) => {
          const disposition = await inner(message);
          if (disposition === 'ack') acked();
          return disposition;
        };
        return startAmqpConsumer({ channel: await connection.createChannel(), queue, process, prefetch: 32, redriveIntervalMs: false });
      }),
    );
    batched.push(
      await measure(async (queue, acked) => {
        const inner = inboxBatchProcessor(inbox, 'bench', async (message, tx) => void (await tx.query(insert, [message.id, 'x'])));
        const process: BatchProcessor = async (batch) => {
          const dispositions = await inner(batch);
          for (const disposition of dispositions) if (disposition === 'ack') acked();
          return dispositions;
        };
        const channel = await connection.createChannel();
        return startAmqpBatchConsumer({ channel, queue, process, maxBatchSize: batchSize, maxBatchWaitMs: 20, prefetch: 2 * batchSize, redriveIntervalMs: false });
      }),
    );
    process.stderr.write(`round ${round + 1}/${rounds}: ${Math.round(single.at(-1) ?? 0)} vs ${Math.round(batched.at(-1) ?? 0)} msg/s\n`);
  }
  const ratios = single.map((rate, i) => (batched[i] ?? 0) / rate);
  const f = (n: number): string => Math.round(n).toString();
  const row = (label: string, rates: readonly number[]): string => `| ${label} | ${f(median(rates))} | ${f(Math.min(...rates))}–${f(Math.max(...rates))} |`;
  const lines = [
    `${messages} messages per round and mode, ${rounds} rounds, published before the consumer starts, one business INSERT per message.`,
    '',
    '| mode | msg/s (median) | msg/s (range) |',
    '|---|---:|---:|',
    row('`startAmqpConsumer` + `inboxProcessor`, prefetch 32', single),
    row(`\`startAmqpBatchConsumer\` + \`inboxBatchProcessor\`, batch size ${batchSize}, prefetch ${2 * batchSize}`, batched),
    '',
    `Batched / per message, per round: median ${median(ratios).toFixed(2)}×, range ${Math.min(...ratios).toFixed(2)}–${Math.max(...ratios).toFixed(2)}×.`,
  ];
  process.stdout.write(`${lines.join('\n')}\n`);
} finally {
  const channel = await connection.createChannel();
  for (const queue of queues) await channel.deleteQueue(queue);
  await connection.close();
  await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  await pool.end();
}
