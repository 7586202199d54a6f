/**
 * What the broker adapters share: handing a delivery to the processor and settling it, bounded in-flight
 * tracking for a clean stop, the poll that runs the dead letters an operator asked to redrive, and option checks.
 *
 * @module
 */
import { describe, requireDurationMs, requireFunction } from '../../core/validate.js';
import type { BrokerMessage, Disposition, MessageProcessor } from '../inbox/processor.js';

/** Tracks running deliveries so `stop()` can wait until each one is settled with the broker. */
export class InFlight {
  private readonly running = new Set<Promise<void>>();

  get size(): number {
    return this.running.size;
  }

  /** Starts tracking `task`; a rejection is only observed here, so report errors inside `task`. */
  add(task: Promise<void>): void {
    const settled = task.then(
      () => undefined,
      () => undefined,
    );
    this.running.add(settled);
    void settled.then(() => this.running.delete(settled));
  }

  /** Resolves when one running task settles (at once when none runs). */
  async one(): Promise<void> {
    if (this.running.size > 0) await Promise.race(this.running);
  }

  /** Resolves when every task running now has settled. */
  async all(): Promise<void> {
    await Promise.all([...this.running]);
  }
}

/**
 * Polls the processor's {@link MessageProcessor.redrivePending} every `intervalMs` milliseconds, never two
 * polls at once, until `stop()`. Does nothing when the processor has none (a consumer without the inbox)
 * or polling is off. The timer is unref'd: it does not keep the process alive.
 */
export class RedrivePoller {
  private timer: NodeJS.Timeout | undefined;
  private current: Promise<void> | undefined;

  constructor(processor: Pick<MessageProcessor, 'redrivePending'>, intervalMs: number | false, onError: (error: unknown) => void) {
    const redrive = processor.redrivePending;
    if (redrive === undefined || intervalMs === false) return;
    this.timer = setInterval(() => {
      if (this.current !== undefined) return;
      this.current = redrive()
        .then(
          () => undefined,
          (error: unknown) => onError(error),
        )
        .finally(() => {
          this.current = undefined;
        });
    }, intervalMs);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.current;
  }
}

/** The options every consumer adapter shares, as given. */
interface CommonOptions {
  readonly process?: unknown;
  readonly redriveIntervalMs?: unknown;
  readonly onError?: unknown;
}

/**
 * Validates the options every adapter shares.
 *
 * @throws TypeError naming the option when one is invalid
 */
export function resolveCommonOptions(
  adapter: string,
  options: CommonOptions,
): { readonly redriveIntervalMs: number | false; readonly onError: (error: unknown) => void } {
  if (typeof options.process !== 'function') {
    throw new TypeError(`retrysafe: ${adapter} option "process" must be a function (e.g. inboxProcessor(...)), got ${describe(options.process)}`);
  }
  const interval = options.redriveIntervalMs ?? 5_000;
  const redriveIntervalMs = interval === false ? false : requireDurationMs('redriveIntervalMs', interval, adapter);
  const onError = requireFunction<(error: unknown) => void>('onError', options.onError ?? ((error: unknown) => console.error('retrysafe:', error)), adapter);
  return { redriveIntervalMs, onError };
}

/** How an adapter reads and settles the deliveries of its broker, for {@link deliverer}. */
interface DeliveryHandling<M> {
  readonly processor: MessageProcessor;
  /** The validated `messageId` option (see {@link requireMessageId}). */
  readonly messageId: (message: M) => string | undefined;
  /** Turns a delivery into what the processor sees, given its extracted id. */
  readonly toBrokerMessage: (message: M, id: string | undefined) => BrokerMessage;
  /** Acks, requeues or drops the delivery with the broker; may throw when the connection is gone. */
  readonly settle: (message: M, disposition: Disposition) => void;
  readonly onError: (error: unknown) => void;
}

/**
 * Returns the function that handles one delivery: the processor decides its disposition, then it is settled
 * with the broker. A processor that throws (the inbox's store failing) is reported to `onError` and counts
 * as `retry`. A settle that throws is reported too and otherwise ignored: the connection closed meanwhile,
 * so the broker redelivers the message and the inbox dedups it. The returned promise never rejects.
 */
export function deliverer<M>(handling: DeliveryHandling<M>): (message: M) => Promise<void> {
  const { processor, messageId, toBrokerMessage, settle, onError } = handling;
  return async (message) => {
    let disposition: Disposition;
    try {
      disposition = await processor(toBrokerMessage(message, extractId(messageId, message)));
    } catch (error) {
      onError(error);
      disposition = 'retry';
    }
    try {
      settle(message, disposition);
    } catch (error) {
      onError(error);
    }
  };
}

/**
 * Validates the `messageId` option, or falls back to the adapter's own extractor.
 * @throws TypeError naming the option when it is given and not a function
 */
export function requireMessageId<M>(adapter: string, value: unknown, fallback: (message: M) => string | undefined): (message: M) => string | undefined {
  return requireFunction<(message: M) => string | undefined>('messageId', value ?? fallback, adapter);
}

/** Runs an id extractor; a throw counts as "no id", so the message is rejected rather than crash the consumer. */
export function extractId<M>(extractor: (message: M) => string | undefined, message: M): string | undefined {
  try {
    return extractor(message);
  } catch {
    return undefined;
  }
}
