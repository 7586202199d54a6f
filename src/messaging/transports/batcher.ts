/**
 * What the batched consumers share: gathering deliveries into batches (full at `maxBatchSize`, or handed on
 * `maxBatchWaitMs` after their first delivery), asking a {@link BatchProcessor} for each delivery's
 * disposition, and the checks of the batch options.
 *
 * @module
 */
import { describe, requireDurationMs, requireIntegerIn } from '../../core/validate.js';
import type { BatchProcessor } from '../inbox/batch-processor.js';
import type { BrokerMessage, Disposition } from '../inbox/processor.js';
import type { InFlight } from './runner.js';

/** The batching options of the RabbitMQ and NATS batched consumers. */
export interface BatchingOptions {
  /** Deliveries handed to `process` at once, at most; an integer from 1 to 10,000. @defaultValue 50 */
  readonly maxBatchSize?: number;
  /**
   * The longest time, in milliseconds, a batch waits after its first delivery for more before it is handed
   * to `process` unfilled (a positive integer). @defaultValue 20
   */
  readonly maxBatchWaitMs?: number;
}

/** The validated {@link BatchingOptions}. */
interface Batching {
  readonly maxBatchSize: number;
  readonly maxBatchWaitMs: number;
}

/**
 * Validates the batching options against the number of unacknowledged deliveries the broker lets the
 * consumer hold (`prefetch`, `max_ack_pending`): a batch larger than that would never fill, every batch
 * would wait out `maxBatchWaitMs` and the broker's limit would be the real batch size.
 *
 * @param limitName - the option or setting that bounds the unacknowledged deliveries, for the message
 * @throws TypeError naming the option when one is invalid, or when `maxBatchSize` exceeds `limit`
 */
export function resolveBatching(adapter: string, options: BatchingOptions, limitName: string, limit: number): Batching {
  const maxBatchSize = requireIntegerIn('maxBatchSize', options.maxBatchSize ?? 50, 1, 10_000, adapter);
  const maxBatchWaitMs = requireDurationMs('maxBatchWaitMs', options.maxBatchWaitMs ?? 20, adapter);
  requireBatchFits(adapter, maxBatchSize, limitName, limit);
  return { maxBatchSize, maxBatchWaitMs };
}

/**
 * @throws TypeError when `maxBatchSize` exceeds `limit`, the broker's bound on unacknowledged deliveries
 */
export function requireBatchFits(adapter: string, maxBatchSize: number, limitName: string, limit: number): void {
  if (maxBatchSize > limit) {
    throw new TypeError(
      `retrysafe: ${adapter} option "maxBatchSize" (${maxBatchSize}) must not exceed ${limitName} (${limit}): the broker stops delivering at ${limit} unacknowledged messages, so a batch would never fill`,
    );
  }
}

/**
 * Gathers deliveries into batches and runs `run` for each, tracked in `inFlight`: a batch is handed on as
 * soon as it holds `maxBatchSize` deliveries, or `maxBatchWaitMs` after its first one. Batches may run
 * concurrently (the broker's prefetch bounds how many deliveries are out at once).
 */
export class Batcher<M> {
  private pending: M[] = [];
  private timer: NodeJS.Timeout | undefined;
  /** Deliveries gathered or running and not yet settled. */
  private open = 0;
  private readonly waiting = new Set<() => void>();

  constructor(
    private readonly batching: Batching,
    private readonly inFlight: InFlight,
    private readonly run: (batch: M[]) => Promise<void>,
  ) {}

  add(message: M): void {
    this.pending.push(message);
    this.open += 1;
    if (this.pending.length >= this.batching.maxBatchSize) this.flush();
    else this.timer ??= setTimeout(() => this.flush(), this.batching.maxBatchWaitMs);
  }

  /** Hands the gathered deliveries on now (nothing when none is gathered). */
  flush(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    const batch = this.pending;
    if (batch.length === 0) return;
    this.pending = [];
    this.inFlight.add(
      this.run(batch).finally(() => {
        this.open -= batch.length;
        for (const wake of this.waiting) wake();
      }),
    );
  }

  /** Resolves once fewer than `limit` deliveries are unsettled. */
  async below(limit: number): Promise<void> {
    while (this.open >= limit) {
      await new Promise<void>((resolve) => {
        const wake = (): void => {
          this.waiting.delete(wake);
          resolve();
        };
        this.waiting.add(wake);
      });
    }
  }
}

/**
 * Asks `processor` for the dispositions of `messages`. A processor that rejects (the inbox's store
 * failing) or answers anything but one disposition per message is reported to `onError`, and every
 * message of the batch is `retry`. Never rejects.
 */
export async function decideBatch(processor: BatchProcessor, messages: readonly BrokerMessage[], onError: (error: unknown) => void): Promise<readonly Disposition[]> {
  try {
    const dispositions = await processor(messages);
    if (!Array.isArray(dispositions) || dispositions.length !== messages.length || !dispositions.every(isDisposition)) {
      throw new TypeError(`retrysafe: the batch processor must answer one disposition per message (${messages.length}), got ${describe(dispositions)}`);
    }
    return dispositions;
  } catch (error) {
    onError(error);
    return messages.map(() => 'retry');
  }
}

/**
 * Decides `batch` with `processor` ({@link decideBatch}) and settles each delivery with its disposition. A
 * settle that throws (the channel or connection closed meanwhile) is reported to `onError`: the broker
 * redelivers what was left unsettled, and the inbox answers those duplicates. Never rejects.
 */
export async function settleBatch<M>(
  batch: readonly M[],
  processor: BatchProcessor,
  toMessage: (delivery: M) => BrokerMessage,
  settle: (delivery: M, disposition: Disposition) => void,
  onError: (error: unknown) => void,
): Promise<void> {
  const dispositions = await decideBatch(processor, batch.map(toMessage), onError);
  try {
    batch.forEach((delivery, index) => settle(delivery, dispositions[index] as Disposition));
  } catch (error) {
    onError(error);
  }
}

const DISPOSITIONS: readonly unknown[] = ['ack', 'retry', 'dead_letter', 'reject'] satisfies readonly Disposition[];

function isDisposition(value: unknown): value is Disposition {
  return DISPOSITIONS.includes(value);
}
