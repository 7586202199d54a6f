/**
 * Inbox observability: every outcome is reported to an optional `onEvent` hook and counted on an optional
 * OpenTelemetry `Meter` (`@opentelemetry/api`; only its types are imported, so the API package stays an
 * optional peer dependency and nothing is recorded unless a meter is given).
 *
 * @module
 */
import type { Counter, Meter } from '@opentelemetry/api';

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

/** Counter names, one per event type (OpenTelemetry semantic style: dotted, unit `{message}`). */
export const INBOX_COUNTERS: Readonly<Record<InboxEventType, string>> = Object.freeze({
  processed: 'retrysafe.inbox.processed',
  duplicate: 'retrysafe.inbox.duplicates',
  retry: 'retrysafe.inbox.retries',
  dead_lettered: 'retrysafe.inbox.dead_letters',
  rejected: 'retrysafe.inbox.rejected',
});

/** Sends each event to the hook and the matching counter (attribute `consumer`). */
export class InboxMetrics {
  private readonly counters: Partial<Record<InboxEventType, Counter>> = {};

  constructor(
    meter: Meter | undefined,
    private readonly onEvent: ((event: InboxEvent) => void) | undefined,
  ) {
    if (meter === undefined) return;
    for (const [type, name] of Object.entries(INBOX_COUNTERS) as [InboxEventType, string][]) {
      this.counters[type] = meter.createCounter(name, { description: `Inbox deliveries: ${type}`, unit: '{message}' });
    }
  }

  emit(event: InboxEvent): void {
    this.counters[event.type]?.add(1, { consumer: event.consumer });
    // A throwing hook must not turn a committed delivery into a failure (and a redelivery).
    try {
      this.onEvent?.(event);
    } catch {
      return;
    }
  }
}
