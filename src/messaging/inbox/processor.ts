/**
 * The seam between broker adapters and the inbox: an adapter turns each delivery into a
 * {@link BrokerMessage}, asks a {@link MessageProcessor} what to do with it and settles it with the broker
 * only after the processor returns, that is after the inbox transaction committed or rolled back.
 *
 * The same adapter runs with or without the inbox: pass {@link inboxProcessor} for effectively-once
 * processing, or a plain function returning `'ack'` for an at-least-once consumer (what `npm run bench`
 * compares).
 *
 * @module
 */
import { describe } from '../../core/validate.js';
import { MAX_MESSAGE_ID_LENGTH, MessageIdMissingError } from './errors.js';
import type { HandlerContext, Inbox } from './inbox.js';

/** A delivery as broker adapters present it. */
export interface BrokerMessage {
  /** The id used for dedup (AMQP `messageId`, NATS `Nats-Msg-Id`, or the adapter's `messageId` extractor). */
  readonly id: string | undefined;
  /** Headers flattened to strings. */
  readonly headers: Readonly<Record<string, string>>;
  /** The body bytes. */
  readonly body: Uint8Array;
  /** Whether the broker says it delivered this message before (redriven dead letters say `true`). */
  readonly redelivered: boolean;
}

/**
 * What the adapter tells the broker:
 * - `ack` — done (processed, or a duplicate);
 * - `retry` — deliver again (AMQP: nack with requeue; NATS: nak with delay);
 * - `dead_letter` — give up; the inbox saved the message (AMQP: nack without requeue, so the queue's
 *   dead-letter exchange gets it if one is configured; NATS: term);
 * - `reject` — refuse without processing (no message id); same broker action as `dead_letter`.
 */
export type Disposition = 'ack' | 'retry' | 'dead_letter' | 'reject';

/**
 * Decides a delivery's disposition. A rejection (the inbox's store failing) makes the adapter redeliver.
 * `redrivePending`, when present, is polled by the adapters (every `redriveIntervalMs`) to run the dead
 * letters an operator asked to redrive (`retrysafe inbox redrive`); it returns how many it ran.
 */
export interface MessageProcessor {
  (message: BrokerMessage): Promise<Disposition>;
  readonly redrivePending?: () => Promise<number>;
}

/**
 * How a broker adapter's consumer (`startAmqpConsumer`, `startNatsConsumer`, `startKafkaConsumer`) runs the
 * dead letters an operator asked to redrive: it polls the processor's {@link MessageProcessor.redrivePending}.
 */
export interface RedriveOptions {
  /**
   * How often the dead letters an operator asked to redrive are polled and run (the processor's
   * `redrivePending`), in milliseconds, a positive integer; `false` turns it off. @defaultValue 5_000
   */
  readonly redriveIntervalMs?: number | false;
}

/** Business code for one message under the inbox: write through `tx`; a throw means retry. */
export type MessageHandler<Tx> = (message: BrokerMessage, tx: Tx, context: HandlerContext) => Promise<void>;

/**
 * Builds the processor that runs `handler` through `inbox` for consumer `consumer`: duplicates are acked
 * without running it; failures are retried up to the inbox's `maxAttempts`, then dead-lettered; messages
 * without an id are rejected.
 *
 * @throws TypeError when `consumer` is not a valid consumer name or `handler` is not a function
 * @example
 * ```ts
 * const processor = inboxProcessor(inbox, 'billing', async (message, tx) => {
 *   const order = JSON.parse(Buffer.from(message.body).toString());
 *   await tx.query('INSERT INTO invoices (order_id) VALUES ($1)', [order.id]);
 * });
 * await startAmqpConsumer({ channel, queue: 'orders', process: processor });
 * ```
 */
export function inboxProcessor<Tx>(inbox: Inbox<Tx>, consumer: string, handler: MessageHandler<Tx>): MessageProcessor {
  if (typeof consumer !== 'string' || consumer.length === 0 || consumer.length > MAX_MESSAGE_ID_LENGTH || consumer.includes('\0')) {
    throw new TypeError(`retrysafe: inboxProcessor "consumer" must be a non-empty string of at most ${MAX_MESSAGE_ID_LENGTH} characters without NUL, got ${describe(consumer)}`);
  }
  if (typeof handler !== 'function') {
    throw new TypeError(`retrysafe: inboxProcessor "handler" must be a function, got ${describe(handler)}`);
  }
  const run = async (message: BrokerMessage): Promise<Disposition> => {
    let outcome;
    try {
      outcome = await inbox.handle({ consumer, messageId: message.id, headers: message.headers, body: message.body }, (tx, context) =>
        handler(message, tx, context),
      );
    } catch (error) {
      if (error instanceof MessageIdMissingError) return 'reject';
      throw error;
    }
    return dispositionOf(outcome.status);
  };
  const redrivePending = async (): Promise<number> => {
    const pending = await inbox.pendingRedrives(consumer);
    for (const letter of pending) {
      await run({ id: letter.messageId, headers: letter.headers, body: letter.body, redelivered: true });
    }
    return pending.length;
  };
  return Object.assign(run, { redrivePending });
}

/**
 * How a broker settles a delivery whose inbox outcome is `status`: processed and duplicate are acked, retry
 * is redelivered, dead_lettered goes to the dead letters, and a delivery without a usable id (`rejected`,
 * batches only) is rejected.
 */
export function dispositionOf(status: 'processed' | 'duplicate' | 'retry' | 'dead_lettered' | 'rejected'): Disposition {
  switch (status) {
    case 'processed':
    case 'duplicate':
      return 'ack';
    case 'retry':
      return 'retry';
    case 'dead_lettered':
      return 'dead_letter';
    case 'rejected':
      return 'reject';
  }
}
