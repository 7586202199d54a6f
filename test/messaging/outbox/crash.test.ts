/**
 * A relay SIGKILLed after RabbitMQ confirmed a message but before the row was marked sent: another relay
 * publishes it again once the lease expired, with the same id, and the consumer's inbox skips the copy,
 * so the effect lands once end to end.
 */
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import amqplib, { type Channel, type ChannelModel } from 'amqplib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createAmqpPublisher } from '../../../src/messaging/transports/amqp.js';
import { createInbox, createPostgresInboxStore } from '../../../src/messaging/inbox/index.js';
import { createOutbox, createRelay } from '../../../src/messaging/outbox/index.js';
import { createTestSchema, postgresAvailable, type TestSchema } from '../../support/postgres-schema.js';
import { AMQP_URL, POSTGRES_URL, serviceAvailable, uniqueName } from '../../support/services.js';
import { untilVisible } from '../../support/outbox.js';

const CHILD = fileURLToPath(new URL('./fixtures/relay-child.ts', import.meta.url));

const available =
  (await postgresAvailable()) &&
  (await serviceAvailable('RabbitMQ', async () => {
    const connection = await amqplib.connect(AMQP_URL);
    await connection.close();
  }));

/** Runs the child relay until it reports a confirm, then SIGKILLs it; resolves with the confirmed id. */
function killAfterConfirm(schema: string): Promise<string> {
  const child = spawn(process.execPath, ['--import', 'tsx', CHILD], {
    env: { ...process.env, OUTBOX_SCHEMA: schema, OUTBOX_PG_URL: POSTGRES_URL, OUTBOX_AMQP_URL: AMQP_URL },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stderr.on('data', (chunk: Buffer) => void (stderr += chunk.toString()));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`the child relay confirmed nothing; stderr: ${stderr}`));
    }, 20_000);
    child.stdout.on('data', (chunk: Buffer) => {
      stdout += chunk.toString();
      const match = /confirmed (\S+)\n/.exec(stdout);
      if (match?.[1] === undefined) return;
      clearTimeout(timer);
      child.kill('SIGKILL');
      child.once('exit', (_code, signal) => (signal === 'SIGKILL' ? resolve(match[1] as string) : reject(new Error(`exit ${String(signal)}`))));
    });
    child.once('exit', (code, signal) => {
      if (signal === null) {
        clearTimeout(timer);
        reject(new Error(`the child relay exited with code ${String(code)}; stderr: ${stderr}`));
      }
    });
  });
}

describe.runIf(available)('outbox relay crash between broker confirm and marking sent', () => {
  let db: TestSchema;
  let connection: ChannelModel;
  let channel: Channel;
  const queue = uniqueName('rs_outbox_crash');

  beforeAll(async () => {
    db = await createTestSchema('rs_outbox_crash', 6);
    await db.pool.query(`CREATE TABLE "${db.schema}".effects (message_id text NOT NULL)`);
    connection = await amqplib.connect(AMQP_URL);
    channel = await connection.createChannel();
    await channel.assertQueue(queue, { durable: false });
  });

  afterAll(async () => {
    await channel.deleteQueue(queue);
    await connection.close();
    await db.drop();
  });

  it('republishes with the same id after the lease; the inbox makes the effect count 1', async () => {
    const outbox = createOutbox({ schema: db.schema });
    const client = await db.pool.connect();
    let id: string;
    try {
      await client.query('BEGIN');
      id = await outbox.enqueue(client, { topic: queue, key: 'order-1', payload: '{"order":1}' });
      await client.query('COMMIT');
    } finally {
      client.release();
    }

    // The child runs one batch only: the row must be claimable (below every open transaction's xmin) first.
    await untilVisible(db.pool, db.schema);
    expect(await killAfterConfirm(db.schema)).toBe(id);
    const row = await db.pool.query<{ status: number; attempts: number }>(`SELECT status, attempts FROM "${db.schema}".outbox`);
    expect(row.rows).toEqual([{ status: 0, attempts: 1 }]);

    // A relay that sees the lease as expired (its clock 60 s ahead of the 30 s lease) takes over.
    const publisher = createAmqpPublisher({ url: AMQP_URL });
    const relay = createRelay({ pool: db.pool, outbox, publisher, clock: { now: () => Date.now() + 60_000 } });
    expect(await relay.runOnce()).toBe(1);
    await relay.stop();
    await publisher.close();
    expect((await outbox.status(db.pool)).pending).toBe(0);

    const inbox = createInbox({ store: createPostgresInboxStore({ pool: db.pool, schema: db.schema }) });
    const outcomes: string[] = [];
    for (;;) {
      const message = await channel.get(queue, { noAck: true });
      if (message === false) break;
      const outcome = await inbox.handle({ consumer: 'billing', messageId: message.properties.messageId as string }, async (tx) => {
        await tx.query(`INSERT INTO "${db.schema}".effects (message_id) VALUES ($1)`, [message.properties.messageId]);
      });
      outcomes.push(outcome.status);
    }
    expect(outcomes).toEqual(['processed', 'duplicate']);
    const effects = await db.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${db.schema}".effects WHERE message_id = $1`, [id]);
    expect(effects.rows[0]?.n).toBe(1);
  });
});
