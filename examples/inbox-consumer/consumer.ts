/**
 * An effectively-once RabbitMQ consumer: each `order.paid` message credits loyalty points exactly once,
 * however often RabbitMQ delivers it (duplicates from the publisher, redeliveries after a crash).
 *
 * Run (PostgreSQL and RabbitMQ on localhost):
 *   node --import tsx examples/inbox-consumer/consumer.ts
 *   node --import tsx examples/inbox-consumer/consumer.ts publish 100   # in another shell: 100 orders, each sent twice
 *
 * In an application, import from 'retrysafe/inbox', 'retrysafe/amqp' and 'retrysafe/postgres'.
 */
import amqp from 'amqplib';
import pg from 'pg';
import { startAmqpConsumer } from '../../src/messaging/transports/amqp.js';
import { createInbox, createPostgresInboxStore, inboxProcessor } from '../../src/messaging/inbox/index.js';
import { migrate } from '../../src/postgres.js';

const DATABASE_URL = process.env['DATABASE_URL'] ?? 'postgres://postgres@127.0.0.1:5432/test';
const AMQP_URL = process.env['AMQP_URL'] ?? 'amqp://guest:guest@127.0.0.1:5672';
const QUEUE = 'retrysafe_example_orders';

interface OrderPaid {
  readonly orderId: string;
  readonly customerId: string;
  readonly amountCents: number;
}

const connection = await amqp.connect(AMQP_URL);
const channel = await connection.createChannel();
// Dead letters also go to a parking queue on the broker side.
await channel.assertQueue(`${QUEUE}_dead`, { durable: true });
await channel.assertQueue(QUEUE, { durable: true, arguments: { 'x-dead-letter-exchange': '', 'x-dead-letter-routing-key': `${QUEUE}_dead` } });

if (process.argv[2] === 'publish') {
  const count = Number(process.argv[3] ?? 10);
  for (let i = 0; i < count; i += 1) {
    const order: OrderPaid = { orderId: `order-${i}`, customerId: `customer-${i % 7}`, amountCents: 1_000 + i };
    // Sent twice with the same messageId, as a publisher retrying after a lost confirm would.
    for (let copy = 0; copy < 2; copy += 1) {
      channel.sendToQueue(QUEUE, Buffer.from(JSON.stringify(order)), { messageId: `order-paid:${order.orderId}`, persistent: true });
    }
  }
  await channel.close();
  await connection.close();
  process.exit(0);
}

const pool = new pg.Pool({ connectionString: DATABASE_URL });
await migrate({ pool });
await pool.query(`CREATE TABLE IF NOT EXISTS loyalty_points (customer_id text PRIMARY KEY, points bigint NOT NULL)`);

const inbox = createInbox({ store: createPostgresInboxStore({ pool }), maxAttempts: 5, handlerTimeoutMs: 10_000 });
const consumer = await startAmqpConsumer({
  channel,
  queue: QUEUE,
  prefetch: 16,
  process: inboxProcessor(inbox, 'loyalty', async (message, tx) => {
    const order = JSON.parse(Buffer.from(message.body).toString('utf8')) as OrderPaid;
    // Not idempotent on its own: a second run would credit twice. The inbox makes it run once.
    await tx.query(
      `INSERT INTO loyalty_points (customer_id, points) VALUES ($1, $2)
       ON CONFLICT (customer_id) DO UPDATE SET points = loyalty_points.points + EXCLUDED.points`,
      [order.customerId, Math.floor(order.amountCents / 100)],
    );
  }),
});
process.stdout.write(`consuming ${QUEUE}; Ctrl-C to stop\n`);

// Old marks go in small batches; several consumer instances may run this at once.
const cleanup = setInterval(() => {
  inbox.reap(1_000).catch((error: unknown) => console.error('reap failed', error));
}, 60_000);

const shutdown = async (): Promise<void> => {
  clearInterval(cleanup);
  await consumer.stop();
  await channel.close();
  await connection.close();
  await pool.end();
};
process.once('SIGINT', () => void shutdown());
process.once('SIGTERM', () => void shutdown());
