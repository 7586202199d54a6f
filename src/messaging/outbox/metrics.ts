/**
 * Relay observability: every outcome goes to an optional `onEvent` hook and to OpenTelemetry instruments
 * on a `Meter` (`@opentelemetry/api`; without an SDK registered the default meter records nothing).
 *
 * @module
 */
import type { BatchObservableCallback, Counter, Histogram, Meter, ObservableGauge } from '@opentelemetry/api';
import type { OutboxStatus } from './outbox.js';

/** What happened to one message (or to the relay, for `error`). */
export type OutboxEventType = 'published' | 'retry' | 'dead_lettered' | 'released' | 'error';

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
}

/** Instrument names (OpenTelemetry semantic style: dotted). */
export const OUTBOX_INSTRUMENTS = Object.freeze({
  published: 'retrysafe.outbox.published',
  retries: 'retrysafe.outbox.retries',
  deadLettered: 'retrysafe.outbox.dead_lettered',
  publishDuration: 'retrysafe.outbox.publish.duration',
  deliveryLatency: 'retrysafe.outbox.delivery.latency',
  pending: 'retrysafe.outbox.pending',
  oldestPendingAge: 'retrysafe.outbox.oldest_pending.age',
  deadLetters: 'retrysafe.outbox.dead_letters',
});

/** Sends events to the hook and the instruments (attribute `topic`); observes the status gauges. */
export class OutboxMetrics {
  private readonly published: Counter;
  private readonly retries: Counter;
  private readonly deadLettered: Counter;
  private readonly publishDuration: Histogram;
  private readonly deliveryLatency: Histogram;
  private readonly gauges: readonly ObservableGauge[];
  private readonly observe: BatchObservableCallback;

  constructor(
    private readonly meter: Meter,
    private readonly onEvent: ((event: OutboxEvent) => void) | undefined,
    readStatus: () => Promise<OutboxStatus>,
  ) {
    const n = OUTBOX_INSTRUMENTS;
    this.published = meter.createCounter(n.published, { description: 'Messages the broker confirmed', unit: '{message}' });
    this.retries = meter.createCounter(n.retries, { description: 'Failed publish attempts to be retried', unit: '{message}' });
    this.deadLettered = meter.createCounter(n.deadLettered, { description: 'Messages dead-lettered', unit: '{message}' });
    this.publishDuration = meter.createHistogram(n.publishDuration, { description: 'Publish to broker confirm', unit: 'ms' });
    this.deliveryLatency = meter.createHistogram(n.deliveryLatency, { description: 'Enqueue to broker confirm', unit: 'ms' });
    const pending = meter.createObservableGauge(n.pending, { description: 'Pending outbox messages', unit: '{message}' });
    const oldest = meter.createObservableGauge(n.oldestPendingAge, { description: 'Age of the oldest pending message', unit: 'ms' });
    const dead = meter.createObservableGauge(n.deadLetters, { description: 'Dead-lettered messages', unit: '{message}' });
    this.gauges = [pending, oldest, dead];
    this.observe = async (observer) => {
      const status = await readStatus();
      observer.observe(pending, status.pending);
      observer.observe(oldest, status.oldestPendingAgeMs);
      observer.observe(dead, status.deadLetters);
    };
  }

  /** Starts observing the gauges (one status query per collection). */
  register(): void {
    this.meter.addBatchObservableCallback(this.observe, [...this.gauges]);
  }

  /** Stops observing the gauges. */
  unregister(): void {
    this.meter.removeBatchObservableCallback(this.observe, [...this.gauges]);
  }

  emit(event: OutboxEvent): void {
    const attributes = event.topic === undefined ? {} : { topic: event.topic };
    if (event.type === 'published') this.published.add(1, attributes);
    if (event.type === 'retry') this.retries.add(1, attributes);
    if (event.type === 'dead_lettered') this.deadLettered.add(1, attributes);
    if (event.publishMs !== undefined) this.publishDuration.record(event.publishMs, attributes);
    if (event.latencyMs !== undefined) this.deliveryLatency.record(event.latencyMs, attributes);
    // A throwing hook must not fail a batch whose messages the broker already confirmed.
    try {
      this.onEvent?.(event);
    } catch {
      return;
    }
  }
}

