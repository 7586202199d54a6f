/**
 * Inbox metrics: every outcome is reported to an optional `onEvent` hook and to OpenTelemetry instruments
 * (`@opentelemetry/api`; without an SDK registered, or a `meter` given, nothing is recorded).
 *
 * Naming follows the receiver's (`retrysafe.*`, the OpenTelemetry semantic conventions): one counter of
 * deliveries with an `outcome` attribute, durations as histograms in seconds (unit `s`, like
 * `messaging.process.duration`). Attributes are bounded: `outcome` from a fixed list and `consumer` (the
 * names an application gives its consumers); never the message id.
 *
 * @module
 */
import type { Attributes, Counter, Histogram, Meter } from '@opentelemetry/api';
import { MeterSource } from '../../observability/meter-source.js';

/** What happened to one delivery. */
export type InboxEventType = 'processed' | 'duplicate' | 'retry' | 'dead_lettered' | 'rejected';

/** One delivery's outcome, as given to `onEvent`. */
export interface InboxEvent {
  readonly type: InboxEventType;
  readonly consumer: string;
  /** The message id (`undefined` for a message rejected for lacking one). */
  readonly messageId: string | undefined;
  /** Attempts counted so far (`undefined` for duplicates and rejections). */
  readonly attempts: number | undefined;
}

/**
 * How one delivery ended (the `outcome` attribute of `retrysafe.inbox.messages`): an {@link InboxEventType},
 * or `store_unavailable` when the inbox's store failed and `handle` threw (the broker redelivers it).
 */
export type InboxMessageOutcome = InboxEventType | 'store_unavailable';

/** Instrument names of the inbox. */
export const INBOX_INSTRUMENTS = Object.freeze({
  /** Counter, `{message}`: deliveries by `outcome` (an {@link InboxMessageOutcome}); attribute `consumer`. */
  messages: 'retrysafe.inbox.messages',
  /**
   * Histogram, `s`: one delivery through `inbox.handle`, from the call to its outcome (the committed attempt
   * count, the transaction running the handler, the failure's record); attributes `outcome` (every outcome
   * but `rejected`), `consumer`.
   */
  processDuration: 'retrysafe.inbox.process.duration',
});

interface Instruments {
  readonly messages: Counter;
  readonly duration: Histogram;
}

/** Counts outcomes and times deliveries; sends each event to the hook. */
export class InboxMetrics {
  /** Made again when the global provider changed, so a meter provider registered after the inbox is seen. */
  private readonly source: MeterSource<Instruments>;
  /** Attribute objects, one per (outcome, consumer), so recording allocates nothing. */
  private readonly attributes = new Map<string, Attributes>();

  constructor(
    /** The meter given in the options; otherwise the global provider's `retrysafe` meter, read at each delivery. */
    meter: Meter | undefined,
    private readonly onEvent: ((event: InboxEvent) => void) | undefined,
  ) {
    this.source = new MeterSource(meter, createInstruments);
  }

  /** Records `event` (and its delivery's duration in seconds, when timed) and calls the hook. */
  emit(event: InboxEvent, seconds: number | undefined): void {
    this.record(event.type, event.consumer, seconds);
    // A throwing hook must not turn a committed delivery into a failure (and a redelivery).
    try {
      this.onEvent?.(event);
    } catch {
      return;
    }
  }

  /** Records a delivery whose store failed (no event: `handle` threw). */
  storeUnavailable(consumer: string, seconds: number): void {
    this.record('store_unavailable', consumer, seconds);
  }

  private record(outcome: InboxMessageOutcome, consumer: string, seconds: number | undefined): void {
    const instruments = this.source.instruments();
    if (instruments === undefined) return;
    const attributes = this.attributesOf(outcome, consumer);
    instruments.messages.add(1, attributes);
    if (seconds !== undefined) instruments.duration.record(seconds, attributes);
  }

  private attributesOf(outcome: InboxMessageOutcome, consumer: string): Attributes {
    const key = `${outcome}\0${consumer}`;
    let attributes = this.attributes.get(key);
    if (attributes === undefined) {
      attributes = Object.freeze({ outcome, consumer });
      this.attributes.set(key, attributes);
    }
    return attributes;
  }
}

function createInstruments(meter: Meter): Instruments {
  const n = INBOX_INSTRUMENTS;
  return {
    messages: meter.createCounter(n.messages, { description: 'Inbox deliveries by outcome', unit: '{message}' }),
    duration: meter.createHistogram(n.processDuration, { description: 'One delivery through the inbox, call to outcome', unit: 's' }),
  };
}
