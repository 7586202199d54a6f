/**
 * The orders scenario's report: what happened on every hop (HTTP → outbox → relay → RabbitMQ or Kafka →
 * inbox consumer), the faults injected on each, and the verdict: every logical order charged exactly once.
 *
 * @module
 */
import { formatRows, type ReportRow } from '../harness/table.js';
import type { BrokerName } from './broker.js';
import type { LedgerCounts } from './database.js';

/** Faults that took effect, per hop. */
export interface OrdersFaults {
  /** HTTP: replies destroyed after the commit. */
  readonly lostReplies: number;
  /** HTTP: handlers that outlasted the client's per-attempt timeout. */
  readonly clientTimeouts: number;
  /** HTTP: orders sent as a burst of concurrent calls under one key. */
  readonly duplicateBursts: number;
  /** Relay: SIGKILLs after the broker's confirm (Kafka: acknowledgement), before the row was marked sent. */
  readonly relayKilledAfterConfirm: number;
  /** Consumer: SIGKILLs after the inbox commit, before the ack (Kafka: before the offset was stored). */
  readonly consumerKilledAfterCommit: number;
  /** Consumer: SIGKILLs inside the handler, before COMMIT. */
  readonly consumerKilledMidHandler: number;
  /** Broker: extra copies of a message delivered with the same id. */
  readonly brokerDuplicates: number;
}

/** The report of one orders run. */
export interface OrdersReport {
  readonly scenario: 'orders';
  readonly seed: number;
  /** The broker between the relay and the consumer (`kafka`: librdkafka's mock cluster in the demo's process). */
  readonly broker: BrokerName;
  /** The consumer ran without the inbox. */
  readonly unsafe: boolean;
  /** The PostgreSQL schema the run created (`retrysafe_orders_<run>`) and dropped at its end. */
  readonly schema: string;
  /** Logical orders (distinct Idempotency-Keys) sent. */
  readonly ordersPlaced: number;
  /** HTTP attempts, retries and burst copies included. */
  readonly httpAttempts: number;
  /** Answers replayed by the idempotency middleware (`Idempotent-Replayed: true`). */
  readonly replays: number;
  /** Logical orders whose calls gave up. */
  readonly httpGaveUp: number;
  readonly ordersWritten: number;
  readonly duplicateOrders: number;
  readonly eventsEnqueued: number;
  readonly eventsUnsent: number;
  /** Publish attempts handed to the broker (republishes and duplicate copies included). */
  readonly eventsPublished: number;
  /** Deliveries the consumer processes saw (redeliveries included; those cut off by a SIGKILL may be missing). */
  readonly deliveries: number;
  /** Deliveries the inbox answered as duplicates without running the handler. */
  readonly duplicatesSkipped: number;
  readonly chargesWritten: number;
  /** Charges beyond the first of an order, plus orders written more than once. Must be 0. */
  readonly doubles: number;
  /** Logical orders without an order row, plus order rows without a charge. Must be 0. */
  readonly lost: number;
  readonly faults: OrdersFaults;
  /** Worker restarts after the injected crashes. */
  readonly restarts: number;
  readonly durationMs: number;
  readonly passed: boolean;
}

/** Inputs of {@link buildOrdersReport} besides the ledger counts. */
export interface OrdersObservations {
  readonly seed: number;
  readonly broker: BrokerName;
  readonly unsafe: boolean;
  readonly schema: string;
  /** Idempotency keys of the logical orders. */
  readonly keys: readonly string[];
  readonly httpAttempts: number;
  readonly replays: number;
  readonly httpGaveUp: number;
  readonly eventsPublished: number;
  readonly deliveries: number;
  readonly duplicatesSkipped: number;
  readonly faults: OrdersFaults;
  readonly restarts: number;
  readonly durationMs: number;
}

/** Judges a run: passed when nothing was lost and nothing happened twice. */
export function buildOrdersReport(observed: OrdersObservations, ledger: LedgerCounts): OrdersReport {
  const missingOrders = observed.keys.filter((key) => !ledger.orderKeys.has(key)).length;
  const lost = missingOrders + ledger.unchargedOrders;
  const doubles = ledger.doubleCharges + ledger.duplicateOrders;
  return {
    scenario: 'orders',
    seed: observed.seed,
    broker: observed.broker,
    unsafe: observed.unsafe,
    schema: observed.schema,
    ordersPlaced: observed.keys.length,
    httpAttempts: observed.httpAttempts,
    replays: observed.replays,
    httpGaveUp: observed.httpGaveUp,
    ordersWritten: ledger.ordersWritten,
    duplicateOrders: ledger.duplicateOrders,
    eventsEnqueued: ledger.eventsEnqueued,
    eventsUnsent: ledger.eventsUnsent,
    eventsPublished: observed.eventsPublished,
    deliveries: observed.deliveries,
    duplicatesSkipped: observed.duplicatesSkipped,
    chargesWritten: ledger.chargesWritten,
    doubles,
    lost,
    faults: observed.faults,
    restarts: observed.restarts,
    durationMs: Math.round(observed.durationMs),
    passed: lost === 0 && doubles === 0,
  };
}

/** How the text report names each broker and its acknowledgements. */
const BROKER_WORDS: Readonly<Record<BrokerName, { readonly name: string; readonly confirm: string; readonly ack: string }>> = {
  rabbitmq: { name: 'RabbitMQ', confirm: 'confirm', ack: 'ack' },
  kafka: { name: 'Kafka (mock cluster, 3 brokers)', confirm: 'acks=all acknowledgement', ack: 'offset stored' },
};

/** The report as text for a terminal. */
export function formatOrdersReport(report: OrdersReport): string {
  const f = report.faults;
  const words = BROKER_WORDS[report.broker];
  const rows: ReportRow[] = [
    ['orders placed (logical)', report.ordersPlaced],
    ['HTTP attempts', report.httpAttempts],
    ['replayed answers', report.replays],
    ['calls that gave up', report.httpGaveUp],
    ['orders written', report.ordersWritten],
    ['events enqueued (outbox)', report.eventsEnqueued],
    ['events left unsent', report.eventsUnsent],
    ['events published (publish attempts)', report.eventsPublished],
    ['deliveries to the consumer', report.deliveries],
    ['duplicates skipped by the inbox', report.unsafe ? 'n/a (no inbox)' : report.duplicatesSkipped],
    ['charges written', report.chargesWritten],
    ['double effects (must be 0)', report.doubles],
    ['lost (must be 0)', report.lost],
  ];
  const hops: ReportRow[] = [
    ['HTTP', `${f.lostReplies} lost replies, ${f.clientTimeouts} client timeouts, ${f.duplicateBursts} duplicate bursts`],
    ['relay', `${f.relayKilledAfterConfirm} SIGKILL after ${words.confirm}, before marking sent`],
    ['broker', `${f.brokerDuplicates} duplicate deliveries (same message id)`],
    ['consumer', `${f.consumerKilledAfterCommit} SIGKILL after commit before ${words.ack}, ${f.consumerKilledMidHandler} SIGKILL mid-handler`],
  ];
  const lines = [
    `retrysafe demo --scenario orders --broker ${report.broker}${report.unsafe ? ' --unsafe (consumer WITHOUT the inbox)' : ''} (seed ${report.seed}, ${report.durationMs} ms)`,
    `HTTP order API (Express + retrysafe, PostgreSQL transactional) → outbox → relay → ${words.name} → inbox consumer`,
    '',
    ...formatRows(rows),
    '',
    'faults injected:',
    ...formatRows([...hops, ['restarts', `${report.restarts} worker restarts`]]),
    '',
    report.passed
      ? `PASS: ${report.ordersPlaced} orders, each written once and charged exactly once.`
      : `FAIL: ${report.doubles} double effects, ${report.lost} lost.`,
    '',
  ];
  return lines.join('\n');
}
