/**
 * One run of `retrysafe demo --scenario orders`: the HTTP order API writes each order and its
 * `order.placed` event in one transaction; a relay process publishes the outbox to RabbitMQ, or to Kafka
 * (librdkafka's mock cluster, started in this process); a consumer process charges each order once through
 * the inbox. Faults are injected on every hop, and the charges table is checked against the logical orders
 * at the end.
 *
 * @module
 */
import { randomBytes } from 'node:crypto';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import pg from 'pg';
import { createOutbox } from '../../messaging/outbox/index.js';
import { createPostgresStore } from '../../postgres.js';
import { SLOW_HANDLER_MS } from '../harness/chaos.js';
import { ATTEMPT_TIMEOUT_MS, createDemoClient } from '../harness/client.js';
import { planFaults, MIN_PAYMENTS } from '../harness/plan.js';
import { concurrencyOf, drive } from '../harness/traffic.js';
import { DemoInterruptedError } from '../harness/interrupted.js';
import { reportProgress, type DriveTally } from '../harness/progress.js';
import { ServiceUnavailableError } from '../harness/unavailable.js';
import { createOrdersApp } from './api.js';
import type { BrokerName } from './broker.js';
import type { RunBroker } from './transport.js';
import { countLedger, createOrdersSchema, dropOrdersSchema, progress } from './database.js';
import type { WorkerConfig, WorkerCounter, WorkerCrash } from './protocol.js';
import { buildOrdersReport, type OrdersReport } from './report.js';
import { WorkerSupervisor } from './workers.js';

/** The PostgreSQL the scenario uses unless told otherwise (the development machine's). */
export const DEFAULT_ORDERS_STORE = 'postgres://postgres@127.0.0.1:5432/test';
/** The RabbitMQ the scenario uses unless told otherwise. */
export const DEFAULT_ORDERS_AMQP = 'amqp://guest:guest@127.0.0.1:5672';

/** Options of {@link runOrders}. */
export interface OrdersOptions {
  /** Logical orders, at least 10. @defaultValue 100 */
  readonly orders?: number;
  /** Orders in flight at once, 1..256. @defaultValue 12 */
  readonly concurrency?: number;
  /** Seed of the HTTP fault plan, 0..2^32-1. @defaultValue a random one (printed in the report) */
  readonly seed?: number;
  /** PostgreSQL URL; the run creates and drops schema `retrysafe_orders_<run>`. @defaultValue {@link DEFAULT_ORDERS_STORE} */
  readonly store?: string;
  /**
   * The broker between the relay and the consumer: `rabbitmq`, or `kafka` (librdkafka's mock cluster of 3
   * brokers, started in this process and gone with the run: no Kafka server is needed). @defaultValue 'rabbitmq'
   */
  readonly broker?: BrokerName;
  /**
   * RabbitMQ URL (`broker: 'rabbitmq'` only); the run declares and deletes exchange `retrysafe.orders.<run>`
   * and its queue. @defaultValue {@link DEFAULT_ORDERS_AMQP}
   */
  readonly amqp?: string;
  /** Run the consumer WITHOUT the inbox, to show the check failing. @defaultValue false */
  readonly unsafe?: boolean;
  /** Longest wait for the pipeline to drain after the last order, in milliseconds. @defaultValue 45_000 */
  readonly drainTimeoutMs?: number;
  /** Stops the run (Ctrl-C): what it created is removed and it rejects with {@link DemoInterruptedError}. */
  readonly signal?: AbortSignal;
  /**
   * Told every 2 s while the run goes, one line such as `orders 37/100 answered (48 sent), 412 HTTP attempts`,
   * then `draining: 96/100 orders charged, 3 events unsent` while the pipeline drains.
   * @defaultValue no progress is reported
   */
  readonly onProgress?: (line: string) => void;
}

/** The idempotency lease of the order API, in milliseconds. */
const API_LEASE_MS = 3_000;
/** How often the drain is checked, in milliseconds. */
const POLL_MS = 150;

/**
 * Runs the scenario and resolves with its report (whether it passed or not). Everything the run created
 * (schema, RabbitMQ exchange and queue or mock Kafka cluster, processes) is removed before it resolves or
 * rejects.
 *
 * @throws TypeError naming the option when an option is invalid (`amqp` with `broker: 'kafka'` too)
 * @throws {@link ServiceUnavailableError} when PostgreSQL or RabbitMQ does not answer
 * @throws Error when the mock Kafka cluster does not start
 * @throws Error when a worker process fails in a way the scenario did not cause
 * @throws {@link DemoInterruptedError} when `signal` aborts, once what the run created is removed
 * @example
 * ```ts
 * const report = await runOrders({ orders: 100 });
 * process.exitCode = report.passed ? 0 : 1;
 * ```
 */
export async function runOrders(options: OrdersOptions = {}): Promise<OrdersReport> {
  const started = performance.now();
  const orders = options.orders ?? 100;
  const concurrency = concurrencyOf(options.concurrency);
  const seed = options.seed ?? randomBytes(4).readUInt32BE(0);
  const unsafe = options.unsafe ?? false;
  const store = options.store ?? DEFAULT_ORDERS_STORE;
  const brokerName = options.broker ?? 'rabbitmq';
  if (brokerName !== 'rabbitmq' && brokerName !== 'kafka') {
    throw new TypeError(`retrysafe: option "broker" must be 'rabbitmq' or 'kafka', got ${JSON.stringify(brokerName)}`);
  }
  if (brokerName === 'kafka' && options.amqp !== undefined) {
    throw new TypeError(`retrysafe: option "amqp" applies to broker 'rabbitmq' only, got it with broker 'kafka'`);
  }
  const amqp = options.amqp ?? DEFAULT_ORDERS_AMQP;
  const drainTimeoutMs = options.drainTimeoutMs ?? 45_000;
  const runId = randomBytes(4).toString('hex');
  if (!Number.isSafeInteger(orders) || orders < MIN_PAYMENTS) {
    throw new TypeError(`retrysafe: option "orders" must be an integer >= ${MIN_PAYMENTS}, got ${String(orders)}`);
  }
  const plan = planFaults({ seed, payments: orders, keyPrefix: `ord-${runId}`, crashes: [] });

  const pool = new pg.Pool({ connectionString: store, max: 16 });
  pool.on('error', () => undefined);
  try {
    await pool.query('SELECT 1').catch((error: unknown) => {
      throw new ServiceUnavailableError('PostgreSQL', store, error, '--store postgres://…');
    });
    const broker = await openBroker(brokerName, amqp, runId);
    const schema = `retrysafe_orders_${runId}`;
    try {
      await createOrdersSchema(pool, schema);
      const interrupted = new DemoInterruptedError([`schema ${schema}`, ...broker.created]);
      return await runPipeline({
        pool,
        broker,
        brokerName,
        schema,
        store,
        plan,
        concurrency,
        seed,
        unsafe,
        drainTimeoutMs,
        started,
        signal: options.signal,
        interrupted,
        onProgress: options.onProgress,
      });
    } finally {
      await dropOrdersSchema(pool, schema);
      await broker.dispose();
    }
  } finally {
    await pool.end();
  }
}

interface PipelineInput {
  readonly pool: pg.Pool;
  readonly broker: RunBroker;
  readonly brokerName: BrokerName;
  readonly schema: string;
  readonly store: string;
  readonly plan: ReturnType<typeof planFaults>;
  readonly concurrency: number;
  readonly seed: number;
  readonly unsafe: boolean;
  readonly drainTimeoutMs: number;
  readonly started: number;
  readonly signal: AbortSignal | undefined;
  readonly interrupted: DemoInterruptedError;
  readonly onProgress: ((line: string) => void) | undefined;
}

async function runPipeline(input: PipelineInput): Promise<OrdersReport> {
  const { pool, broker, schema, plan, unsafe } = input;
  const counts: Record<WorkerCounter, number> = { publishes: 0, 'duplicate-copies': 0, deliveries: 0, 'duplicates-skipped': 0 };
  const crashes: Record<WorkerCrash, number> = { 'relay-after-confirm': 0, 'consumer-after-commit': 0, 'consumer-mid-handler': 0 };
  const http = { lostReplies: 0, clientTimeouts: 0 };
  const failure = new AbortController();
  const onInterrupt = (): void => failure.abort(input.interrupted);
  if (input.signal?.aborted === true) throw input.interrupted;
  input.signal?.addEventListener('abort', onInterrupt, { once: true });
  const client = createDemoClient({ attemptTimeoutMs: ATTEMPT_TIMEOUT_MS, deadlineMs: 30_000, maxAttempts: 100 });

  const { relay, consumers } = supervisors(input, {
    onCount: (counter: WorkerCounter) => counts[counter]++,
    onCrash: (kind: WorkerCrash) => crashes[kind]++,
    onFailure: (error: Error) => failure.abort(error),
  });

  const postgresStore = createPostgresStore({ pool, schema });
  const app = createOrdersApp({
    store: postgresStore,
    outbox: createOutbox({ schema }),
    schema,
    leaseMs: API_LEASE_MS,
    slowMs: SLOW_HANDLER_MS,
    onFault: ({ key, fault }) => {
      if (fault === 'lost-reply') http.lostReplies++;
      else if (fault === 'slow') http.clientTimeouts++;
      client.faultApplied(key);
    },
  });
  const server = createServer(app);
  const tally: DriveTally = { sent: 0, answered: 0 };
  let phase = 'starting the relay and the consumers';
  const progress = reportProgress(input.onProgress, () =>
    phase === 'traffic' ? `orders ${tally.answered}/${plan.length} answered (${tally.sent} sent), ${client.counters.attempts} HTTP attempts` : phase,
  );
  try {
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    await Promise.all([relay.start(), ...consumers.map((consumer) => consumer.start())]);
    phase = 'traffic';
    const calls = await drive({ plan, concurrency: input.concurrency, origin, path: '/orders', fetch: client.fetch, signal: failure.signal, tally });
    const gaveUp = new Set(calls.filter((call) => call.status !== 201).map((call) => call.key));
    phase = 'draining the outbox and the broker';
    await drain(pool, schema, broker, input.drainTimeoutMs, failure.signal, (state) => {
      phase = `draining: ${state.charged}/${state.orders} orders charged, ${state.unsent} events unsent`;
    });
    phase = 'stopping the relay and the consumers';
    await relay.stop();
    await Promise.all(consumers.map((consumer) => consumer.stop()));
    const ledger = await countLedger(pool, schema);
    return buildOrdersReport(
      {
        seed: input.seed,
        broker: input.brokerName,
        unsafe,
        schema,
        keys: plan.map((order) => order.key),
        httpAttempts: client.counters.attempts,
        replays: client.counters.replays,
        httpGaveUp: gaveUp.size,
        eventsPublished: counts.publishes,
        deliveries: counts.deliveries,
        duplicatesSkipped: counts['duplicates-skipped'],
        faults: {
          lostReplies: http.lostReplies,
          clientTimeouts: http.clientTimeouts,
          duplicateBursts: plan.filter((order) => order.fault === 'burst').length,
          relayKilledAfterConfirm: crashes['relay-after-confirm'],
          consumerKilledAfterCommit: crashes['consumer-after-commit'],
          consumerKilledMidHandler: crashes['consumer-mid-handler'],
          brokerDuplicates: counts['duplicate-copies'],
        },
        restarts: Object.values(crashes).reduce((a, b) => a + b, 0),
        durationMs: performance.now() - input.started,
      },
      ledger,
    );
  } finally {
    progress.stop();
    input.signal?.removeEventListener('abort', onInterrupt);
    await relay.stop();
    await Promise.all(consumers.map((consumer) => consumer.stop()));
    await new Promise<void>((resolve) => {
      server.close(() => resolve());
      server.closeAllConnections();
    });
    await client.close();
    await postgresStore.close();
  }
}

/** The relay's and the consumers' supervisors, with the crash each incarnation is to suffer. */
function supervisors(
  input: PipelineInput,
  common: Pick<ConstructorParameters<typeof WorkerSupervisor>[0], 'onCount' | 'onCrash' | 'onFailure'>,
): { relay: WorkerSupervisor; consumers: WorkerSupervisor[] } {
  const base: WorkerConfig = { store: input.store, schema: input.schema, broker: input.broker.endpoint, crash: undefined, duplicateEvery: 0, unsafe: input.unsafe };
  // Crash points sit a fifth of the way in, so traffic is flowing when each worker dies and keeps coming after.
  const at = Math.ceil(input.plan.length / 5);
  const relay = new WorkerSupervisor({
    ...common,
    entry: 'relay-worker',
    incarnations: [
      { ...base, duplicateEvery: 10, crash: { kind: 'relay-after-confirm', at } },
      { ...base, duplicateEvery: 10 },
    ],
  });
  // RabbitMQ hands a dead consumer's unacknowledged messages to the next one at once, so one consumer process
  // goes through both crashes in turn. A Kafka group gives a SIGKILLed member's partitions away only once its
  // session has timed out, so there the billing consumer is a group of two members, each killed once and early
  // in its half of the records (before the other's restart makes the group rebalance), so that the two
  // recoveries overlap.
  const kafka = input.brokerName === 'kafka';
  const consumerAt = kafka ? Math.ceil(at / 2) : at;
  const midHandler: WorkerConfig = { ...base, crash: { kind: 'consumer-mid-handler', at: consumerAt } };
  const afterCommit: WorkerConfig = { ...base, crash: { kind: 'consumer-after-commit', at: consumerAt } };
  const consumerPlans: readonly (readonly WorkerConfig[])[] = kafka ? [[midHandler, base], [afterCommit, base]] : [[midHandler, afterCommit, base]];
  const consumers = consumerPlans.map((incarnations) => new WorkerSupervisor({ ...common, entry: 'consumer-worker', incarnations }));
  return { relay, consumers };
}

/**
 * Opens the run's broker side: declares the RabbitMQ exchange and queue, or starts the mock Kafka cluster
 * with the run's topic (its error log lines, if any, go to stderr; the report still judges the run).
 */
async function openBroker(name: BrokerName, amqp: string, runId: string): Promise<RunBroker> {
  if (name === 'kafka') {
    const { startKafkaBroker } = await import('./kafka.js');
    return startKafkaBroker(runId, (message) => process.stderr.write(`retrysafe demo: mock Kafka cluster: ${message}\n`));
  }
  const { declareRabbitBroker } = await import('./rabbitmq.js');
  return declareRabbitBroker(amqp, runId).catch((error: unknown) => {
    throw new ServiceUnavailableError('RabbitMQ', amqp, error, '--amqp amqp://…');
  });
}

/**
 * Waits until every order row has a charge, the outbox has nothing unsent and the broker nothing unsettled, twice
 * in a row (a straggling duplicate still gets its chance to arrive), or until the timeout: the report then
 * shows what was left undone.
 */
async function drain(
  pool: pg.Pool,
  schema: string,
  broker: RunBroker,
  timeoutMs: number,
  signal: AbortSignal,
  onState: (state: Awaited<ReturnType<typeof progress>>) => void,
): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  let quiet = 0;
  while (quiet < 2 && performance.now() < deadline) {
    signal.throwIfAborted();
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
    const state = await progress(pool, schema);
    onState(state);
    const done = state.unsent === 0 && state.charged >= state.orders && (await broker.backlog()) === 0;
    quiet = done ? quiet + 1 : 0;
  }
}
