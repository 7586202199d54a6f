/**
 * Relay observability: every outcome goes to an optional `onEvent` hook and to OpenTelemetry instruments
 * on a `Meter` (`@opentelemetry/api`; without an SDK registered the default meter records nothing).
 *
 * Naming follows the receiver's (`retrysafe.*`, the OpenTelemetry semantic conventions): one counter of
 * messages with an `outcome` attribute, durations and ages in seconds (unit `s`). Attributes are bounded:
 * `outcome` from a fixed list and `topic` (the application's routing keys, subjects or webhook names);
 * never the message id or its ordering key. The `onEvent` hook keeps milliseconds.
 *
 * @module
 */
import type { Attributes, BatchObservableCallback, Counter, Histogram, Meter } from '@opentelemetry/api';
import { MeterSource } from '../../observability/meter-source.js';
import type { OutboxStatus } from './outbox.js';

/** What happened to one message (or to the relay, for `error`). */
export type OutboxEventType = 'published' | 'retry' | 'dead_lettered' | 'released' | 'error' | 'waiting' | 'woken';

/**
 * Why a relay that slept waiting for rows (a `waiting` event: it held the waiting lock and had claimed
 * every row committed without a NOTIFY, so every later enqueue NOTIFYs) woke up (a `woken` event):
 * `notification`, a NOTIFY from a committed enqueue; `poll`, the poll interval ran out; `stop`, `stop()`
 * was called; `listener_lost`, its LISTEN connection went away (it polls until it reconnects).
 */
export type RelayWakeCause = 'notification' | 'poll' | 'stop' | 'listener_lost';

/** One outcome, as given to `onEvent`. Durations in milliseconds. */
export interface OutboxEvent {
  readonly type: OutboxEventType;
  /** The message id (undefined for `error`, which concerns a batch or the relay). */
  readonly id: string | undefined;
  readonly key: string | undefined;
  readonly topic: string | undefined;
  /** The attempt number, from 1 (undefined for `error`). */
  readonly attempt: number | undefined;
  /** Time from handing the message to the publisher to its confirm or failure (published, retry, dead_lettered). */
  readonly publishMs: number | undefined;
  /** Time from enqueue to confirm (published only), by the relay's clock. */
  readonly latencyMs: number | undefined;
  /** The error's message (retry, dead_lettered, error). */
  readonly error: string | undefined;
  /** Why the relay woke up (`woken` only: one event each time a wait for rows that began with `waiting` ends). */
  readonly cause?: RelayWakeCause;
}

/** How a publish attempt ended (the `outcome` attribute of `retrysafe.outbox.messages`). */
export type OutboxMessageOutcome = 'published' | 'retry' | 'dead_lettered';

/** Instrument names of the outbox relay. */
export const OUTBOX_INSTRUMENTS = Object.freeze({
  /**
   * Counter, `{message}`: publish attempts by `outcome` (an {@link OutboxMessageOutcome}: `published` when
   * the broker confirmed, `retry` when it failed and will be retried, `dead_lettered` when it failed for
   * good); attribute `topic`.
   */
  messages: 'retrysafe.outbox.messages',
  /** Histogram, `s`: handing a message to the publisher to its confirm or failure; attributes `outcome`, `topic`. */
  publishDuration: 'retrysafe.outbox.publish.duration',
  /** Histogram, `s`: enqueue to the broker's confirm (published messages), by the relay's clock; attribute `topic`. */
  deliveryDuration: 'retrysafe.outbox.delivery.duration',
  /** Gauge, `{message}`: rows not yet sent and not dead-lettered (in flight included). */
  pending: 'retrysafe.outbox.pending',
  /** Gauge, `s`: age of the oldest pending row (0 when none). */
  oldestPendingAge: 'retrysafe.outbox.oldest_pending.age',
  /** Gauge, `{message}`: dead-lettered rows. */
  deadLetters: 'retrysafe.outbox.dead_letters',
});

/**
 * Sends events to the hook and the instruments; observes the status gauges while the relay runs. Without a
 * meter given the instruments follow the global provider ({@link MeterSource}), read as each claim starts.
 */
export class OutboxMetrics {
  private readonly source: MeterSource<Instruments>;
  /** The instruments recorded to, taken at the last {@link OutboxMetrics.begin}. */
  private instruments: Instruments | undefined;
  /** Whether the relay runs, and so whether the gauges of `instruments` are observed. */
  private running = false;
  /** Attribute objects, one per (outcome, topic), so recording allocates nothing. */
  private readonly attributes = new Map<string, Attributes>();

  constructor(
    /** The meter given in the options; otherwise the global provider's `retrysafe` meter. */
    meter: Meter | undefined,
    private readonly onEvent: ((event: OutboxEvent) => void) | undefined,
    readStatus: () => Promise<OutboxStatus>,
  ) {
    this.source = new MeterSource(meter, (m) => createInstruments(m, readStatus));
  }

  /**
   * Called as each claim starts: takes the instruments of the provider to record to, and while the relay
   * runs moves the gauges' observation to them when they are new. One read of the global per claim.
   */
  begin(): void {
    const instruments = this.source.instruments();
    if (instruments === this.instruments) return;
    if (this.running) {
      this.instruments?.unobserve();
      instruments?.observe();
    }
    this.instruments = instruments;
  }

  /** Starts observing the gauges (one status query per collection). */
  register(): void {
    this.begin();
    this.running = true;
    this.instruments?.observe();
  }

  /** Stops observing the gauges. */
  unregister(): void {
    this.running = false;
    this.instruments?.unobserve();
  }

  emit(event: OutboxEvent): void {
    const { type, topic } = event;
    const instruments = this.instruments;
    if (instruments !== undefined && (type === 'published' || type === 'retry' || type === 'dead_lettered')) {
      const attributes = this.attributesOf(type, topic);
      instruments.messages.add(1, attributes);
      if (event.publishMs !== undefined) instruments.publishDuration.record(event.publishMs / 1000, attributes);
      if (event.latencyMs !== undefined) instruments.deliveryDuration.record(event.latencyMs / 1000, this.attributesOf(undefined, topic));
    }
    // A throwing hook must not fail a batch whose messages the broker already confirmed.
    try {
      this.onEvent?.(event);
    } catch {
      return;
    }
  }

  private attributesOf(outcome: OutboxMessageOutcome | undefined, topic: string | undefined): Attributes {
    const key = `${outcome ?? ''}\0${topic ?? ''}`;
    let attributes = this.attributes.get(key);
    if (attributes === undefined) {
      attributes = Object.freeze({ ...(outcome === undefined ? {} : { outcome }), ...(topic === undefined ? {} : { topic }) });
      this.attributes.set(key, attributes);
    }
    return attributes;
  }
}

interface Instruments {
  readonly messages: Counter;
  readonly publishDuration: Histogram;
  readonly deliveryDuration: Histogram;
  /** Starts observing the status gauges on their meter. */
  observe(): void;
  /** Stops observing them. */
  unobserve(): void;
}

function createInstruments(meter: Meter, readStatus: () => Promise<OutboxStatus>): Instruments {
  const n = OUTBOX_INSTRUMENTS;
  const pending = meter.createObservableGauge(n.pending, { description: 'Pending outbox messages', unit: '{message}' });
  const oldest = meter.createObservableGauge(n.oldestPendingAge, { description: 'Age of the oldest pending message', unit: 's' });
  const dead = meter.createObservableGauge(n.deadLetters, { description: 'Dead-lettered messages', unit: '{message}' });
  const gauges = [pending, oldest, dead];
  const observeStatus: BatchObservableCallback = async (observer) => {
    const status = await readStatus();
    observer.observe(pending, status.pending);
    observer.observe(oldest, status.oldestPendingAgeMs / 1000);
    observer.observe(dead, status.deadLetters);
  };
  return {
    messages: meter.createCounter(n.messages, { description: 'Outbox publish attempts by outcome', unit: '{message}' }),
    publishDuration: meter.createHistogram(n.publishDuration, { description: 'Publish to broker confirm or failure', unit: 's' }),
    deliveryDuration: meter.createHistogram(n.deliveryDuration, { description: 'Enqueue to broker confirm', unit: 's' }),
    observe: () => meter.addBatchObservableCallback(observeStatus, gauges),
    unobserve: () => meter.removeBatchObservableCallback(observeStatus, gauges),
  };
}
