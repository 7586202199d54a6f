import amqplib from 'amqplib';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import type { OrdersReport } from '../../../src/demo/orders/report.js';
import { AMQP_URL, POSTGRES_URL, postgresAvailable, serviceAvailable } from '../../support/services.js';
import { runCli } from '../../support/run-cli.js';

const postgres = await postgresAvailable();
const rabbit = await serviceAvailable('RabbitMQ', async () => {
  const connection = await amqplib.connect(AMQP_URL);
  await connection.close();
});

async function orders(...args: string[]): Promise<{ code: number | null; report: OrdersReport }> {
  const broker = args.includes('--broker') ? [] : ['--amqp', AMQP_URL];
  const result = await runCli(['demo', '--scenario', 'orders', '--json', '--seed', '11', '--orders', '40', '--store', POSTGRES_URL, ...broker, ...args], 90_000);
  try {
    return { code: result.code, report: JSON.parse(result.stdout) as OrdersReport };
  } catch (error) {
    throw new Error(`the orders scenario printed no JSON report (exit ${String(result.code)}):\n${result.stderr}`, { cause: error });
  }
}

/** Whether the run's own schema is still there (other runs on the same server have their own). */
async function schemaExists(schema: string): Promise<boolean> {
  const client = new pg.Client({ connectionString: POSTGRES_URL });
  await client.connect();
  try {
    const { rows } = await client.query('SELECT 1 FROM pg_namespace WHERE nspname = $1', [schema]);
    return rows.length > 0;
  } finally {
    await client.end();
  }
}

describe.runIf(postgres && rabbit)('retrysafe demo --scenario orders (HTTP → outbox → RabbitMQ → inbox, real SIGKILLs)', () => {
  it('charges every order exactly once with at least one fault of each kind on every hop, and cleans up', { timeout: 90_000 }, async () => {
    const { code, report } = await orders();
    expect(report).toMatchObject({ scenario: 'orders', unsafe: false, ordersPlaced: 40, ordersWritten: 40, eventsEnqueued: 40, eventsUnsent: 0, chargesWritten: 40, doubles: 0, lost: 0, passed: true });
    expect(code).toBe(0);
    const f = report.faults;
    for (const count of [f.lostReplies, f.clientTimeouts, f.duplicateBursts, f.relayKilledAfterConfirm, f.consumerKilledAfterCommit, f.consumerKilledMidHandler, f.brokerDuplicates]) {
      expect(count).toBeGreaterThanOrEqual(1);
    }
    expect(report.restarts).toBe(3);
    // Retries reached the API and were answered from the saved response; republished and duplicated
    // events reached the consumer and were skipped by the inbox.
    expect(report.httpAttempts).toBeGreaterThan(40);
    expect(report.replays).toBeGreaterThanOrEqual(1);
    expect(report.eventsPublished).toBeGreaterThan(40);
    expect(report.deliveries).toBeGreaterThan(40);
    expect(report.duplicatesSkipped).toBeGreaterThanOrEqual(1);
    expect(report.schema).toMatch(/^retrysafe_orders_[0-9a-f]{8}$/);
    expect(await schemaExists(report.schema)).toBe(false);
  });

  it('--unsafe: the same pipeline with a consumer WITHOUT the inbox charges twice and exits 1', { timeout: 90_000 }, async () => {
    const { code, report } = await orders('--unsafe');
    expect(report.unsafe).toBe(true);
    expect(report.lost).toBe(0);
    expect(report.doubles).toBeGreaterThan(0);
    expect(report.chargesWritten).toBe(40 + report.doubles);
    expect(report.passed).toBe(false);
    expect(code).toBe(1);
  });

  it('exits 2 with a clear message when RabbitMQ is not reachable', { timeout: 30_000 }, async () => {
    const result = await runCli(['demo', '--scenario', 'orders', '--store', POSTGRES_URL, '--amqp', 'amqp://guest:guest@127.0.0.1:1']);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('RabbitMQ is not reachable at amqp://guest:***@127.0.0.1:1');
  });

  it('exits 2 when --store is not PostgreSQL', { timeout: 30_000 }, async () => {
    const result = await runCli(['demo', '--scenario', 'orders', '--store', 'memory:']);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('--scenario orders needs --store postgres://');
  });
});

describe.runIf(postgres)('retrysafe demo --scenario orders --broker kafka (librdkafka mock cluster in the demo, real SIGKILLs)', () => {
  it('charges every order exactly once through a relay killed after the acks=all acknowledgement, duplicate records and group members killed mid-handler and after commit', { timeout: 90_000 }, async () => {
    const { code, report } = await orders('--broker', 'kafka');
    expect(report).toMatchObject({ scenario: 'orders', broker: 'kafka', unsafe: false, ordersPlaced: 40, ordersWritten: 40, eventsEnqueued: 40, eventsUnsent: 0, chargesWritten: 40, doubles: 0, lost: 0, passed: true });
    expect(code).toBe(0);
    const f = report.faults;
    // Each crash is planned once, and each worker that dies is restarted once.
    expect({ relay: f.relayKilledAfterConfirm, afterCommit: f.consumerKilledAfterCommit, midHandler: f.consumerKilledMidHandler, restarts: report.restarts }).toEqual({
      relay: 1,
      afterCommit: 1,
      midHandler: 1,
      restarts: 3,
    });
    for (const count of [f.lostReplies, f.clientTimeouts, f.duplicateBursts, f.brokerDuplicates]) expect(count).toBeGreaterThanOrEqual(1);
    // The relay republished what it had published before its SIGKILL, and sent duplicate copies; the group
    // read again what the killed members had not committed; the inbox answered those records as duplicates.
    expect(report.eventsPublished).toBeGreaterThan(report.eventsEnqueued);
    expect(report.deliveries).toBeGreaterThan(report.chargesWritten);
    expect(report.duplicatesSkipped).toBeGreaterThanOrEqual(1);
  });
});
