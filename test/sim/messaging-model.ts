/**
 * The model-based simulation of outbox → relay → broker → inbox (fast-check commands), on the real outbox
 * and inbox stores with the real relay and inbox consumer code; the broker is simulated (`broker.ts`).
 *
 * Each run drives one random history: business transactions write an order and enqueue its message, then
 * commit, roll back or die before COMMIT; relays (each a fresh process) claim rows and publish them, dying
 * before a publish or after one and before marking it sent, or meeting a broker that refuses a message
 * (for now, or for good: an outbox dead letter); two relays may claim at once; the broker delivers copies
 * out of order within a window, duplicates them, and redelivers what a lost connection left unacknowledged;
 * consumers (each a fresh process) run the inbox, dying inside the handler's transaction or after it
 * committed and before the ack; handlers fail (a flaky message's first attempt; a poison message on one
 * consumer until the operator fixes it) so messages are retried and dead-lettered; the operator redrives
 * dead letters of the inbox and of the outbox; connections to PostgreSQL are dropped; the clock moves past
 * backoffs and relay leases.
 *
 * Invariants:
 * - every publish carries a committed order's message, with the id that order was enqueued with (no
 *   rolled-back row is ever published, and a row published again keeps its id);
 * - a consumer applies each message id at most once (checked after every delivery and at the end);
 * - after quiescence (no more faults; relay and consumers run until nothing moves) every committed order
 *   was published at least once or is an outbox dead letter, and each consumer applied it exactly once or
 *   holds it (or the outbox holds it) as a dead letter; nothing else was applied;
 * - once the operator has fixed the handler and redriven every dead letter, and the system is quiet
 *   again, every committed order is applied exactly once by every consumer: a dead letter redriven
 *   during the history or at its end included.
 *
 * A store error is allowed only after connections were dropped, or inside a process the history killed.
 */
import { createNoopMeter } from '@opentelemetry/api';
import fc from 'fast-check';
import type pg from 'pg';
import { createInbox, type Inbox } from '../../src/messaging/inbox/inbox.js';
import { inboxProcessor, type Disposition, type MessageProcessor } from '../../src/messaging/inbox/processor.js';
import type { BeginResult, DeadLetter, FailureResult, InboxStore, StoredMessage, TransactionHandler } from '../../src/messaging/inbox/store.js';
import { PublishError } from '../../src/messaging/outbox/errors.js';
import type { OutboxMessage } from '../../src/messaging/outbox/publisher.js';
import { createRelay, type Relay } from '../../src/messaging/outbox/relay.js';
import { REORDER_WINDOW, SimBroker, type QueuedCopy } from './broker.js';
import { SimulatedCrash } from './harness.js';
import type { EnqueueOutcome, MessagingHarness, SimOrder } from './messaging-harness.js';
import { InvariantViolation } from './store-model.js';

/** The consumers every message fans out to; dedup is per (consumer, message id). */
export const CONSUMERS = ['c1', 'c2'] as const;
/** The consumer whose handler fails on poison messages until the operator fixes it. */
const POISONED = 'c1';
const KEYS = ['k1', 'k2', 'k3'] as const;

/** The relay's options in the simulation (milliseconds on the injected clock). */
export const SIM_RELAY = Object.freeze({
  leaseMs: 10_000,
  publishTimeoutMs: 5_000,
  maxAttempts: 4,
  backoffBaseMs: 100,
  backoffMaxMs: 400,
  batchSize: 4,
  perKeyLimit: 2,
});
/** The inbox's `maxAttempts` in the simulation. */
export const SIM_INBOX_MAX_ATTEMPTS = 2;
/** Relay-and-deliver rounds quiescence may take before the run counts as stuck. */
const QUIESCE_ROUNDS = 30;
/** Deliveries to one consumer in one drain before the run counts as stuck. */
const DRAIN_DELIVERIES = 1_000;

interface ModelOrder extends SimOrder {
  /** The id the outbox assigned at enqueue (undefined when the enqueue failed before it). */
  id: string | undefined;
  committed: boolean;
}

/** What the run has done and seen so far. */
export class MessagingModel {
  readonly orders = new Map<number, ModelOrder>();
  nextOrder = 0;
  /** Publishes the broker took, per message id. */
  readonly published = new Map<string, number>();
  /** Poisoned (consumer, id) pairs whose handler the operator fixed before redriving them. */
  readonly fixed = new Set<string>();
  /** Inbox dead letters the operator redrove during the history, as (consumer, id) pairs. */
  readonly redriven = new Set<string>();
  /** Set when the operator fixed the poisoned handler for every message (the final redrive). */
  allFixed = false;
  /** Dropped connections so far: store errors are allowed only after one. */
  faults = 0;
  /** Consumer processes started so far (the `inbox-forgets-id` defect records each one's deliveries apart). */
  processes = 0;
  /** Broken invariants met inside callbacks the code under test would swallow (a publish), thrown after the step. */
  readonly broken: string[] = [];
}

/** The system under test in one run: the harness's real stores, and the simulated broker. */
interface Real {
  readonly h: MessagingHarness;
  readonly broker: SimBroker;
}

type Cmd = fc.AsyncCommand<MessagingModel, Real>;

function violation(message: string): never {
  throw new InvariantViolation(message);
}

function throwBroken(m: MessagingModel, how: string): void {
  const [first] = m.broken;
  if (first !== undefined) violation(`${how}: ${first}`);
}

function orderOf(body: Uint8Array): SimOrder {
  return JSON.parse(Buffer.from(body).toString('utf8')) as SimOrder;
}

function pair(consumer: string, id: string): string {
  return `${consumer}\0${id}`;
}

/** A failure is allowed only inside a process the history killed, or after connections were dropped. */
function allowFailure(m: MessagingModel, died: boolean, how: string, error: unknown): void {
  if (!died && m.faults === 0) violation(`${how}: failed with no fault injected: ${error instanceof Error ? `${error.name}: ${error.message}` : String(error)}`);
}

// ---------------------------------------------------------------------------------------------------------
// The relay side

type RelayFaultKind = 'none' | 'crash-before-publish' | 'crash-after-publish' | 'refuse' | 'refuse-for-good';

/** A fault of one relay step: what happens at its `at`-th publish (from 0). */
interface RelayFault {
  readonly kind: RelayFaultKind;
  readonly at: number;
}

const NO_RELAY_FAULT: RelayFault = { kind: 'none', at: 0 };

/**
 * One relay process: the real relay over the harness's pool, publishing into the simulated broker. Once it
 * died, its statements and publishes fail, as a killed process's would never reach the servers.
 */
class RelayProcess {
  dead = false;
  private publishes = 0;
  readonly relay: Relay;

  constructor(
    private readonly m: MessagingModel,
    private readonly real: Real,
    private readonly fault: RelayFault,
  ) {
    const pool = {
      query: (text: string, values?: unknown[]) => (this.dead ? Promise.reject(new SimulatedCrash('the relay died')) : real.h.pool.query(text, values)),
      connect: () => Promise.reject(new Error('the simulated relay runs without LISTEN')),
    } as unknown as pg.Pool;
    this.relay = createRelay({
      ...SIM_RELAY,
      pool,
      listen: false,
      outbox: real.h.outbox,
      clock: real.h.clock,
      meter: createNoopMeter(),
      publisher: { publish: (message) => this.publish(message), close: () => Promise.resolve() },
    });
  }

  private publish(message: OutboxMessage): Promise<void> {
    if (this.dead) return Promise.reject(new SimulatedCrash('the relay died'));
    const fault = this.publishes++ === this.fault.at ? this.fault.kind : 'none';
    switch (fault) {
      case 'crash-before-publish':
        this.dead = true;
        return Promise.reject(new SimulatedCrash('the relay died before publishing'));
      case 'refuse':
        return Promise.reject(new Error('the broker refused the message'));
      case 'refuse-for-good':
        return Promise.reject(new PublishError('the broker refused the message for good', true));
      default: {
        // The planted defect: a message published again gets a new id instead of the one fixed at enqueue.
        const sent = this.real.h.defect === 'relay-new-id' && message.attempt > 1 ? { ...message, id: `${message.id}-attempt-${message.attempt}` } : message;
        observePublish(this.m, sent);
        this.real.broker.publish(sent);
        // The broker confirmed; the process dies before it marks the row sent.
        if (fault === 'crash-after-publish') this.dead = true;
        return Promise.resolve();
      }
    }
  }
}

function observePublish(m: MessagingModel, message: OutboxMessage): void {
  const { no } = orderOf(message.payload);
  const order = m.orders.get(no);
  if (order?.committed !== true) {
    m.broken.push(`order ${no} was published (id ${message.id}) though its transaction ${order ? 'did not commit' : 'never ran'}`);
  } else if (order.id !== message.id) {
    m.broken.push(`order ${no} was published with id ${message.id}, not with the id ${order.id ?? '?'} it was enqueued with`);
  }
  m.published.set(message.id, (m.published.get(message.id) ?? 0) + 1);
}

// ---------------------------------------------------------------------------------------------------------
// The consumer side

type DeliveryFault = 'none' | 'crash-before-commit' | 'crash-after-commit';

/**
 * The real inbox store as one consumer process sees it: once the process died, every call fails (a killed
 * process records nothing more). With the `inbox-forgets-id` defect, it records this process's deliveries
 * under ids of their own instead of the message's.
 */
class ProcessInboxStore implements InboxStore<unknown> {
  constructor(
    private readonly store: InboxStore<unknown>,
    private readonly owner: { readonly dead: boolean },
    private readonly suffix: string,
  ) {}

  begin(consumer: string, messageId: string, now: number): Promise<BeginResult> {
    return this.alive(() => this.store.begin(consumer, this.id(messageId), now));
  }
  process(consumer: string, messageId: string, now: number, timeoutMs: number, fn: TransactionHandler<unknown>): Promise<'committed' | 'duplicate'> {
    return this.alive(() => this.store.process(consumer, this.id(messageId), now, timeoutMs, fn));
  }
  fail(consumer: string, messageId: string, now: number, error: string, maxAttempts: number, message: StoredMessage): Promise<FailureResult | undefined> {
    return this.alive(() => this.store.fail(consumer, this.id(messageId), now, error, maxAttempts, message));
  }
  deadLetters(consumer: string | undefined, limit: number): Promise<DeadLetter[]> {
    return this.alive(() => this.store.deadLetters(consumer, limit));
  }
  requestRedrive(consumer: string, messageId: string, now: number): Promise<boolean> {
    return this.alive(() => this.store.requestRedrive(consumer, messageId, now));
  }
  pendingRedrives(consumer: string, limit: number): Promise<DeadLetter[]> {
    return this.alive(() => this.store.pendingRedrives(consumer, limit));
  }
  reap(before: number, limit: number): Promise<number> {
    return this.alive(() => this.store.reap(before, limit));
  }
  close(): Promise<void> {
    return Promise.resolve();
  }

  private id(messageId: string): string {
    return `${messageId}${this.suffix}`;
  }

  private alive<T>(call: () => Promise<T>): Promise<T> {
    return this.owner.dead ? Promise.reject(new SimulatedCrash('the consumer process died')) : call();
  }
}

/** One consumer process: the real inbox and `inboxProcessor` over the harness's inbox store. */
class ConsumerProcess {
  dead = false;
  readonly inbox: Inbox<unknown>;
  readonly processor: MessageProcessor;

  constructor(m: MessagingModel, real: Real, consumer: string, fault: DeliveryFault) {
    const suffix = real.h.defect === 'inbox-forgets-id' ? `#${++m.processes}` : '';
    this.inbox = createInbox({ store: new ProcessInboxStore(real.h.inboxStore, this, suffix), clock: real.h.clock, maxAttempts: SIM_INBOX_MAX_ATTEMPTS });
    this.processor = inboxProcessor(this.inbox, consumer, async (message, tx, context) => {
      const id = message.id ?? violation(`${consumer} got a message without an id`);
      const order = orderOf(message.body);
      await real.h.applyEffect(tx, consumer, id);
      if (fault === 'crash-before-commit') {
        this.dead = true;
        await real.h.dieInTransaction(tx);
      }
      if (order.kind === 'poison' && consumer === POISONED && !m.allFixed && !m.fixed.has(pair(consumer, id))) {
        throw new Error('poison: this handler fails on the message until the operator fixes it');
      }
      if (order.kind === 'flaky' && context.attempt === 1) throw new Error('flaky: the first attempt fails');
    });
  }
}

function settle(broker: SimBroker, consumer: string, copy: QueuedCopy, disposition: Disposition): void {
  if (disposition === 'retry') broker.requeue(consumer, copy);
  else broker.ack(consumer, copy);
}

/** Runs one copy through a fresh consumer process with `fault`, settles it with the broker, checks dedup. */
async function deliver(m: MessagingModel, real: Real, consumer: string, copy: QueuedCopy, fault: DeliveryFault, how: string): Promise<void> {
  const process = new ConsumerProcess(m, real, consumer, fault);
  let disposition: Disposition | undefined;
  try {
    disposition = await process.processor({ id: copy.id, headers: copy.headers, body: copy.body, redelivered: copy.redelivered });
  } catch (error) {
    allowFailure(m, process.dead, how, error);
  }
  if (disposition === 'reject') violation(`${how}: the inbox rejected message ${copy.id}, which has an id`);
  // Died after the inbox committed and before the ack: the copy stays unacknowledged until the connection drops.
  if (disposition !== undefined && fault !== 'crash-after-commit') settle(real.broker, consumer, copy, disposition);
  await checkAppliedAtMostOnce(real, consumer, copy.id, how);
}

async function checkAppliedAtMostOnce(real: Real, consumer: string, messageId: string, how: string): Promise<number> {
  const n = (await real.h.effects({ consumer, messageId })).length;
  if (n > 1) violation(`${how}: ${consumer} applied message ${messageId} ${n} times`);
  return n;
}

// ---------------------------------------------------------------------------------------------------------
// Commands

class EnqueueCmd implements Cmd {
  constructor(
    readonly key: string,
    readonly kind: SimOrder['kind'],
    readonly outcome: EnqueueOutcome,
  ) {}
  check(): boolean {
    return true;
  }
  async run(m: MessagingModel, real: Real): Promise<void> {
    const how = this.toString();
    const order: ModelOrder = { no: ++m.nextOrder, key: this.key, kind: this.kind, id: undefined, committed: false };
    m.orders.set(order.no, order);
    try {
      order.id = await real.h.enqueue({ no: order.no, key: order.key, kind: order.kind }, this.outcome);
      order.committed = this.outcome === 'commit';
    } catch (error) {
      allowFailure(m, false, how, error);
      // Indeterminate: the business table says whether it committed.
      const id = (await real.h.committedOrders()).get(order.no);
      if (id !== undefined && this.outcome !== 'commit') violation(`${how}: order ${order.no} committed though its transaction ${this.outcome === 'rollback' ? 'rolled back' : 'died before COMMIT'}`);
      order.id = id;
      order.committed = id !== undefined;
    }
  }
  toString(): string {
    return `enqueue(${this.key}, ${this.kind}, then ${this.outcome})`;
  }
}

class RelayCmd implements Cmd {
  constructor(readonly fault: RelayFault) {}
  check(): boolean {
    return true;
  }
  async run(m: MessagingModel, real: Real): Promise<void> {
    const how = this.toString();
    await real.h.untilClaimable();
    const process = new RelayProcess(m, real, this.fault);
    try {
      await process.relay.runOnce();
    } catch (error) {
      allowFailure(m, process.dead, how, error);
    }
    throwBroken(m, how);
  }
  toString(): string {
    return this.fault.kind === 'none' ? 'relay' : `relay(${this.fault.kind} at publish ${this.fault.at + 1})`;
  }
}

class TwoRelaysCmd implements Cmd {
  check(): boolean {
    return true;
  }
  async run(m: MessagingModel, real: Real): Promise<void> {
    const how = this.toString();
    await real.h.untilClaimable();
    const relays = [new RelayProcess(m, real, NO_RELAY_FAULT), new RelayProcess(m, real, NO_RELAY_FAULT)];
    const outcomes = await Promise.allSettled(relays.map((process) => process.relay.runOnce()));
    for (const outcome of outcomes) if (outcome.status === 'rejected') allowFailure(m, false, how, outcome.reason);
    throwBroken(m, how);
  }
  toString(): string {
    return 'two relays at once';
  }
}

class DeliverCmd implements Cmd {
  constructor(
    readonly consumer: string,
    readonly pick: number,
    readonly fault: DeliveryFault,
  ) {}
  check(): boolean {
    return true;
  }
  async run(m: MessagingModel, real: Real): Promise<void> {
    const copy = real.broker.take(this.consumer, this.pick);
    if (copy !== undefined) await deliver(m, real, this.consumer, copy, this.fault, `${this.toString()} of ${copy.id}`);
  }
  toString(): string {
    return `deliver(${this.consumer}, copy ${this.pick + 1} of the queue${this.fault === 'none' ? '' : `, ${this.fault}`})`;
  }
}

/** A consumer works through everything queued for it, with no fault (retries included, so poison is dead-lettered). */
class DrainCmd implements Cmd {
  constructor(readonly consumer: string) {}
  check(): boolean {
    return true;
  }
  async run(m: MessagingModel, real: Real): Promise<void> {
    await drain(m, real, this.consumer, this.toString());
  }
  toString(): string {
    return `${this.consumer} drains its queue`;
  }
}

/** Delivers `consumer`'s queued copies, fault-free, until its queue is empty. */
async function drain(m: MessagingModel, real: Real, consumer: string, how: string): Promise<void> {
  let deliveries = 0;
  for (let copy = real.broker.take(consumer, 0); copy !== undefined; copy = real.broker.take(consumer, 0)) {
    // Each copy is retried at most maxAttempts times before it is dead-lettered.
    if (++deliveries > DRAIN_DELIVERIES) violation(`${how}: ${consumer} still gets copies after ${DRAIN_DELIVERIES} deliveries (retried forever?)`);
    await deliver(m, real, consumer, copy, 'none', `${how}: deliver(${consumer}) of ${copy.id}`);
  }
}

class RedeliverCmd implements Cmd {
  constructor(readonly consumer: string) {}
  check(): boolean {
    return true;
  }
  run(_m: MessagingModel, real: Real): Promise<void> {
    real.broker.connectionLost(this.consumer);
    return Promise.resolve();
  }
  toString(): string {
    return `${this.consumer}'s broker connection drops (unacknowledged copies redelivered)`;
  }
}

class DuplicateCmd implements Cmd {
  constructor(
    readonly consumer: string,
    readonly pick: number,
  ) {}
  check(): boolean {
    return true;
  }
  run(_m: MessagingModel, real: Real): Promise<void> {
    real.broker.duplicate(this.consumer, this.pick);
    return Promise.resolve();
  }
  toString(): string {
    return `the broker duplicates copy ${this.pick + 1} of ${this.consumer}'s queue`;
  }
}

class AdvanceCmd implements Cmd {
  constructor(readonly ms: number) {}
  check(): boolean {
    return true;
  }
  run(_m: MessagingModel, real: Real): Promise<void> {
    real.h.clock.advance(this.ms);
    return Promise.resolve();
  }
  toString(): string {
    return `advance ${this.ms} ms`;
  }
}

/** The operator fixes the poisoned handler for the consumer's dead letters and redrives them. */
class RedriveInboxCmd implements Cmd {
  constructor(readonly consumer: string) {}
  check(): boolean {
    return true;
  }
  async run(m: MessagingModel, real: Real): Promise<void> {
    const how = this.toString();
    const process = new ConsumerProcess(m, real, this.consumer, 'none');
    const redriven: string[] = [];
    try {
      for (const letter of await process.inbox.deadLetters({ consumer: this.consumer })) {
        m.fixed.add(pair(this.consumer, letter.messageId));
        if (await process.inbox.redrive(this.consumer, letter.messageId)) redriven.push(letter.messageId);
      }
      await process.processor.redrivePending?.();
    } catch (error) {
      allowFailure(m, false, how, error);
      return;
    }
    // Its replay may fail again (a flaky handler) and stay pending; at the end it must have been applied once.
    for (const id of redriven) {
      m.redriven.add(pair(this.consumer, id));
      await checkAppliedAtMostOnce(real, this.consumer, id, how);
    }
  }
  toString(): string {
    return `operator fixes and redrives ${this.consumer}'s dead letters`;
  }
}

class RedriveOutboxCmd implements Cmd {
  check(): boolean {
    return true;
  }
  async run(m: MessagingModel, real: Real): Promise<void> {
    try {
      for (const letter of await real.h.outbox.deadLetters(real.h.pool, 100)) await real.h.outbox.redrive(real.h.pool, letter.id);
    } catch (error) {
      allowFailure(m, false, this.toString(), error);
    }
  }
  toString(): string {
    return "operator redrives the outbox's dead letters";
  }
}

class ReapOutboxCmd implements Cmd {
  check(): boolean {
    return true;
  }
  async run(m: MessagingModel, real: Real): Promise<void> {
    try {
      await real.h.outbox.reap(real.h.pool, { retentionMs: 1 });
    } catch (error) {
      allowFailure(m, false, this.toString(), error);
    }
  }
  toString(): string {
    return 'reap sent outbox rows';
  }
}

class DropCmd implements Cmd {
  check(): boolean {
    return true;
  }
  async run(m: MessagingModel, real: Real): Promise<void> {
    m.faults++;
    await real.h.dropConnections();
  }
  toString(): string {
    return 'drop PostgreSQL connections';
  }
}

/**
 * The commands a history is made of; `maxCommands` bounds its length, `replayPath` (printed with a
 * failure) replays a shrunk history exactly. Relay steps, deliveries, drains and redrives are listed more
 * than once, and histories are longer than the store simulation's, so that messages get through, fail,
 * are dead-lettered and are redriven within one history (about one history in four redrives one).
 */
export function messagingCommands(maxCommands = 80, replayPath?: string): fc.Arbitrary<Iterable<Cmd>> {
  const key = fc.constantFrom(...KEYS);
  const kind = fc.constantFrom<SimOrder['kind']>('ok', 'ok', 'ok', 'flaky', 'poison', 'poison');
  const outcome = fc.constantFrom<EnqueueOutcome>('commit', 'commit', 'commit', 'rollback', 'crash');
  const consumer = fc.constantFrom(...CONSUMERS);
  const pick = fc.nat({ max: REORDER_WINDOW - 1 });
  const relayFault = fc.record({
    kind: fc.constantFrom<RelayFaultKind>('none', 'none', 'crash-before-publish', 'crash-after-publish', 'refuse', 'refuse-for-good'),
    at: fc.nat({ max: 3 }),
  });
  const deliveryFault = fc.constantFrom<DeliveryFault>('none', 'none', 'none', 'crash-before-commit', 'crash-after-commit');
  const enqueue = fc.tuple(key, kind, outcome).map(([k, n, o]) => new EnqueueCmd(k, n, o));
  const relay = relayFault.map((fault) => new RelayCmd(fault));
  const deliver = fc.tuple(consumer, pick, deliveryFault).map(([c, p, f]) => new DeliverCmd(c, p, f));
  const { leaseMs, backoffBaseMs, backoffMaxMs } = SIM_RELAY;
  const advance = fc.constantFrom(backoffBaseMs, backoffMaxMs + 1, leaseMs + 1).map((ms) => new AdvanceCmd(ms));
  return fc.commands(
    [
      enqueue,
      enqueue,
      enqueue,
      relay,
      relay,
      relay,
      fc.constant(new TwoRelaysCmd()),
      deliver,
      deliver,
      deliver,
      deliver,
      advance,
      consumer.map((c) => new DrainCmd(c)),
      consumer.map((c) => new DrainCmd(c)),
      consumer.map((c) => new RedeliverCmd(c)),
      fc.tuple(consumer, pick).map(([c, p]) => new DuplicateCmd(c, p)),
      consumer.map((c) => new RedriveInboxCmd(c)),
      consumer.map((c) => new RedriveInboxCmd(c)),
      consumer.map((c) => new RedriveInboxCmd(c)),
      fc.constant(new RedriveOutboxCmd()),
      fc.constant(new ReapOutboxCmd()),
      fc.constant(new DropCmd()),
    ],
    { maxCommands, size: 'max', ...(replayPath === undefined ? {} : { replayPath }) },
  );
}

// ---------------------------------------------------------------------------------------------------------
// Quiescence and the end-of-run invariants

async function redrivesPending(real: Real): Promise<boolean> {
  for (const consumer of CONSUMERS) if ((await real.h.inboxStore.pendingRedrives(consumer, 1)).length > 0) return true;
  return false;
}

/** No more faults: relays and consumers run, the clock passing backoffs and leases, until nothing moves. */
async function quiesce(m: MessagingModel, real: Real, how: string): Promise<void> {
  for (let round = 0; round < QUIESCE_ROUNDS; round++) {
    real.h.clock.advance(SIM_RELAY.leaseMs + SIM_RELAY.backoffMaxMs + 1);
    await real.h.untilClaimable();
    const relay = new RelayProcess(m, real, NO_RELAY_FAULT);
    try {
      while ((await relay.relay.runOnce()) > 0);
    } catch (error) {
      // Connections dropped at the end of the history fail the first statements on them.
      allowFailure(m, false, how, error);
    }
    throwBroken(m, how);
    for (const consumer of CONSUMERS) {
      real.broker.connectionLost(consumer);
      await drain(m, real, consumer, how);
      try {
        await new ConsumerProcess(m, real, consumer, 'none').processor.redrivePending?.();
      } catch (error) {
        allowFailure(m, false, how, error);
      }
    }
    if ((await real.h.outboxPending()) > 0 || CONSUMERS.some((consumer) => real.broker.pending(consumer) > 0)) continue;
    // A redriven message whose replay failed stays pending for the next round.
    if (!(await redrivesPending(real))) return;
  }
  violation(`${how}: still moving after ${QUIESCE_ROUNDS} rounds of relaying and delivering`);
}

/**
 * The invariants of a quiet system. With `everyApplied`, every committed order must have been applied by
 * every consumer (after every dead letter was redriven); else a dead letter may stand in for it.
 */
async function checkSettled(m: MessagingModel, real: Real, how: string, everyApplied: boolean): Promise<void> {
  const committed = await real.h.committedOrders();
  for (const [no, order] of m.orders) {
    const id = committed.get(no);
    if (order.committed && id !== order.id) violation(`${how}: order ${no} committed with id ${order.id ?? '?'}, the business table has ${id ?? 'nothing'}`);
    if (!order.committed && id !== undefined) violation(`${how}: order ${no} is in the business table though its transaction did not commit`);
  }
  const committedIds = new Set(committed.values());
  const outboxDead = new Set((await real.h.outbox.deadLetters(real.h.pool, 1_000)).map((letter) => letter.id));
  const inboxDead = new Set((await real.h.inboxStore.deadLetters(undefined, 1_000)).map((letter) => pair(letter.consumer, letter.messageId)));
  const applied = new Map<string, number>();
  for (const effect of await real.h.effects()) {
    if (!committedIds.has(effect.messageId)) violation(`${how}: ${effect.consumer} applied ${effect.messageId}, which no committed order carries`);
    const at = pair(effect.consumer, effect.messageId);
    applied.set(at, (applied.get(at) ?? 0) + 1);
  }
  for (const [no, id] of committed) {
    if (!m.published.has(id) && !outboxDead.has(id)) violation(`${how}: order ${no} (${id}) committed but was never published, and is no outbox dead letter`);
    for (const consumer of CONSUMERS) {
      const n = applied.get(pair(consumer, id)) ?? 0;
      if (n > 1) violation(`${how}: ${consumer} applied order ${no} (${id}) ${n} times`);
      if (n === 1) continue;
      if (everyApplied) violation(`${how}: ${consumer} never applied order ${no} (${id})${m.redriven.has(pair(consumer, id)) ? ', a dead letter redriven during the history' : ''}`);
      if (!outboxDead.has(id) && !inboxDead.has(pair(consumer, id))) {
        violation(`${how}: ${consumer} neither applied order ${no} (${id}) nor holds it as a dead letter, nor does the outbox`);
      }
    }
  }
}

/** The operator fixes the handler for every message and redrives every dead letter, outbox and inbox. */
async function redriveEverything(m: MessagingModel, real: Real): Promise<void> {
  m.allFixed = true;
  for (const letter of await real.h.outbox.deadLetters(real.h.pool, 1_000)) await real.h.outbox.redrive(real.h.pool, letter.id);
  for (const consumer of CONSUMERS) {
    const { inbox } = new ConsumerProcess(m, real, consumer, 'none');
    for (const letter of await inbox.deadLetters({ consumer, limit: 1_000 })) await inbox.redrive(consumer, letter.messageId);
  }
}

/** Runs one history (the harness reset first), then quiescence and the end-of-run invariants. */
export async function runMessagingHistory(h: MessagingHarness, commands: Iterable<Cmd>): Promise<void> {
  await h.reset();
  const real: Real = { h, broker: new SimBroker(CONSUMERS) };
  const m = new MessagingModel();
  await fc.asyncModelRun(() => ({ model: m, real }), commands);
  await quiesce(m, real, 'quiescence');
  await checkSettled(m, real, 'after quiescence', false);
  await redriveEverything(m, real);
  await quiesce(m, real, 'quiescence after every dead letter was redriven');
  await checkSettled(m, real, 'after every dead letter was redriven', true);
}
