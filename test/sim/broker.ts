/**
 * An in-process, at-least-once broker for the messaging simulation: every message a relay publishes is
 * fanned out to one queue per consumer. A consumer takes a copy from near the head of its queue (so copies
 * overtake each other, within a window), and the copy stays unacknowledged until the consumer settles it:
 * ack removes it, retry puts it back at the tail, dead-letter drops it. A lost consumer connection puts
 * every unacknowledged copy back at the head; a copy may also be duplicated (a publisher's retry that the
 * broker took twice).
 *
 * The properties under test are the outbox's, the relay's and the inbox's; the broker only has to be as
 * unreliable as a real one is allowed to be.
 */
import type { OutboxMessage } from '../../src/messaging/outbox/publisher.js';

/** How far from the head a consumer may take a copy: copies reorder within this window. */
export const REORDER_WINDOW = 3;

/** How many copies of one message a queue may hold at once through duplication. */
export const MAX_COPIES = 3;

/** One copy of a message in a consumer's queue. */
export interface QueuedCopy {
  readonly id: string;
  readonly body: Uint8Array;
  readonly headers: Readonly<Record<string, string>>;
  /** Whether the broker delivered this copy before (AMQP's redelivered flag). */
  readonly redelivered: boolean;
}

export class SimBroker {
  private readonly queues = new Map<string, QueuedCopy[]>();
  private readonly unacked = new Map<string, QueuedCopy[]>();

  constructor(readonly consumers: readonly string[]) {
    for (const consumer of consumers) {
      this.queues.set(consumer, []);
      this.unacked.set(consumer, []);
    }
  }

  /** Takes a published message (the relay's confirm): one copy into every consumer's queue. */
  publish(message: OutboxMessage): void {
    for (const consumer of this.consumers) {
      this.queue(consumer).push({ id: message.id, body: Uint8Array.from(message.payload), headers: { ...message.headers }, redelivered: false });
    }
  }

  /** Delivers the copy at `pick` (modulo the reorder window) of `consumer`'s queue; it stays unacknowledged. */
  take(consumer: string, pick: number): QueuedCopy | undefined {
    const queue = this.queue(consumer);
    if (queue.length === 0) return undefined;
    const [copy] = queue.splice(pick % Math.min(REORDER_WINDOW, queue.length), 1);
    if (copy !== undefined) this.inFlight(consumer).push(copy);
    return copy;
  }

  /** The consumer acknowledged the copy (processed, a duplicate, or dead-lettered by the inbox). */
  ack(consumer: string, copy: QueuedCopy): void {
    this.settle(consumer, copy);
  }

  /** The consumer asked for the copy again later (nack with requeue): back at the tail. */
  requeue(consumer: string, copy: QueuedCopy): void {
    this.settle(consumer, copy);
    this.queue(consumer).push({ ...copy, redelivered: true });
  }

  /** The consumer's connection dropped: every copy it had not settled goes back to the head of its queue. */
  connectionLost(consumer: string): void {
    const lost = this.inFlight(consumer).splice(0);
    this.queue(consumer).unshift(...lost.map((copy) => ({ ...copy, redelivered: true })));
  }

  /** Duplicates the copy at `pick` (modulo the reorder window) at the tail, up to {@link MAX_COPIES} copies. */
  duplicate(consumer: string, pick: number): QueuedCopy | undefined {
    const queue = this.queue(consumer);
    if (queue.length === 0) return undefined;
    const copy = queue[pick % Math.min(REORDER_WINDOW, queue.length)];
    if (copy === undefined || queue.filter((c) => c.id === copy.id).length >= MAX_COPIES) return undefined;
    queue.push(copy);
    return copy;
  }

  /** Copies queued or unacknowledged for `consumer`. */
  pending(consumer: string): number {
    return this.queue(consumer).length + this.inFlight(consumer).length;
  }

  private settle(consumer: string, copy: QueuedCopy): void {
    const inFlight = this.inFlight(consumer);
    const at = inFlight.indexOf(copy);
    if (at >= 0) inFlight.splice(at, 1);
  }

  private queue(consumer: string): QueuedCopy[] {
    const queue = this.queues.get(consumer);
    if (queue === undefined) throw new Error(`no queue for consumer ${consumer}`);
    return queue;
  }

  private inFlight(consumer: string): QueuedCopy[] {
    const inFlight = this.unacked.get(consumer);
    if (inFlight === undefined) throw new Error(`no queue for consumer ${consumer}`);
    return inFlight;
  }
}
