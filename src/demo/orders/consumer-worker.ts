/**
 * Entry point of the orders scenario's billing consumer: `startAmqpConsumer` on the run's RabbitMQ queue or
 * `startKafkaConsumer` on the run's Kafka topic, charging each `order.placed` once through the inbox
 * (`inboxProcessor` on `createPostgresInboxStore`), or — with `unsafe` — in a plain transaction of its own,
 * as an at-least-once consumer without the inbox would. The configured crash stops inside the handler
 * (after the charge INSERT, before COMMIT) or after the commit (before the ack, or before Kafka stores the
 * offset) until the parent's SIGKILL; RabbitMQ then redelivers what was unacknowledged, and the Kafka
 * group's next member reads again from the last committed offset.
 *
 * @module
 */
import pg from 'pg';
import { createInbox, createPostgresInboxStore, inboxProcessor, type BrokerMessage, type MessageProcessor } from '../../messaging/inbox/index.js';
import type { OrderPlaced } from './api.js';
import { workerTransport } from './broker.js';
import { awaitKill, onShutdown, tellParent, type WorkerConfig } from './protocol.js';

/** The inbox's consumer name. */
const BILLING_CONSUMER = 'billing';

const config = JSON.parse(process.argv[2] ?? '{}') as WorkerConfig;
const pool = new pg.Pool({ connectionString: config.store, max: 8 });
let handled = 0;
let settled = 0;

/** The business write: one charge row for the order, through the delivery's transaction. */
async function charge(message: BrokerMessage, tx: pg.PoolClient): Promise<void> {
  const order = JSON.parse(Buffer.from(message.body).toString('utf8')) as OrderPlaced;
  // $1 order id, $2 message id, $3 amount in cents
  await tx.query(`INSERT INTO "${config.schema}".charges (order_id, message_id, amount_cents) VALUES ($1, $2, $3)`, [order.orderId, message.id ?? '', order.amountCents]);
  if (config.crash?.kind === 'consumer-mid-handler' && config.crash.at === ++handled) {
    tellParent({ type: 'crash', kind: 'consumer-mid-handler' });
    await awaitKill();
  }
}

/** Without the inbox: the same write in a transaction of its own, acked after COMMIT. */
async function chargeWithoutInbox(message: BrokerMessage): Promise<'ack'> {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    await charge(message, client);
    await client.query('COMMIT');
    return 'ack';
  } catch (error) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw error;
  } finally {
    client.release();
  }
}

const inbox = createInbox({
  store: createPostgresInboxStore({ pool, schema: config.schema }),
  onEvent: (event) => {
    if (event.type === 'duplicate') tellParent({ type: 'count', counter: 'duplicates-skipped' });
  },
});
const decide: MessageProcessor = config.unsafe ? chargeWithoutInbox : inboxProcessor(inbox, BILLING_CONSUMER, charge);
const processor: MessageProcessor = async (message) => {
  tellParent({ type: 'count', counter: 'deliveries' });
  const disposition = await decide(message);
  if (config.crash?.kind === 'consumer-after-commit' && config.crash.at === ++settled) {
    tellParent({ type: 'crash', kind: 'consumer-after-commit' });
    await awaitKill();
  }
  return disposition;
};

const consumer = await (await workerTransport(config.broker)).consume(processor, (error) =>
  process.stderr.write(`retrysafe orders consumer: ${error instanceof Error ? error.message : String(error)}\n`),
);
onShutdown(async () => {
  await consumer.stop();
  await pool.end();
});
tellParent({ type: 'ready' });
