/**
 * What the orders scenario's parent and its worker processes (the relay and the consumer) tell each
 * other: a worker's configuration as one JSON argument, and messages over the Node IPC channel.
 *
 * @module
 */
import type { BrokerEndpoint } from './transport.js';

/** Where a worker crashes itself: the parent SIGKILLs it when told, then starts the next incarnation. */
export type WorkerCrash =
  /** Relay: after the broker confirmed (Kafka: acknowledged) the `at`-th publish, before the relay marks it sent. */
  | 'relay-after-confirm'
  /** Consumer: after the `at`-th delivery's inbox transaction committed, before the ack (Kafka: before its offset is stored). */
  | 'consumer-after-commit'
  /** Consumer: inside the handler of the `at`-th delivery, after the charge INSERT, before COMMIT. */
  | 'consumer-mid-handler';

/** One worker incarnation's configuration, passed as one JSON argument. */
export interface WorkerConfig {
  /** PostgreSQL URL. */
  readonly store: string;
  /** This run's schema (outbox, inbox, orders and charges tables). */
  readonly schema: string;
  /** This run's exchange and queue, or topic and consumer group. */
  readonly broker: BrokerEndpoint;
  /** The crash this incarnation injects, if any, and at which publish or delivery (from 1). */
  readonly crash: { readonly kind: WorkerCrash; readonly at: number } | undefined;
  /** Relay: publish every `duplicateEvery`-th message a second time with the same id (0: never). */
  readonly duplicateEvery: number;
  /** Consumer: run without the inbox (the `--unsafe` comparison). */
  readonly unsafe: boolean;
}

/** The counters workers report, one increment per message. */
export type WorkerCounter =
  /** Relay: a publish handed to the broker (each attempt of each message, and each duplicate copy). */
  | 'publishes'
  /** Relay: an extra copy sent with the same id, as a broker's duplicate delivery. */
  | 'duplicate-copies'
  /** Consumer: a delivery handed to the processor. */
  | 'deliveries'
  /** Consumer: a delivery the inbox recognised as already processed (the handler did not run). */
  | 'duplicates-skipped';

/** Worker → parent. */
type WorkerMessage =
  | { readonly type: 'ready' }
  | { readonly type: 'count'; readonly counter: WorkerCounter }
  /** The crash point was reached: the parent kills the worker now. */
  | { readonly type: 'crash'; readonly kind: WorkerCrash };

/** Parent → worker: stop gracefully (finish what is in flight), then exit. */
export interface ShutdownMessage {
  readonly type: 'shutdown';
}

/** Narrows an IPC payload to a {@link WorkerMessage}. */
export function isWorkerMessage(value: unknown): value is WorkerMessage {
  const type = typeof value === 'object' && value !== null ? (value as { type?: unknown }).type : undefined;
  return type === 'ready' || type === 'count' || type === 'crash';
}

/** Sends `message` to the parent (a no-op when there is none). */
export function tellParent(message: WorkerMessage): void {
  process.send?.(message);
}

/** Never settles: the code path waits here for the parent's SIGKILL. */
export function awaitKill(): Promise<never> {
  return new Promise<never>(() => undefined);
}

/**
 * Runs `stop` when the parent asks for a shutdown, then exits; exits at once when the parent is gone;
 * ignores SIGINT, which is the parent's to handle.
 */
export function onShutdown(stop: () => Promise<void>): void {
  process.on('message', (message: unknown) => {
    if (typeof message !== 'object' || message === null || (message as { type?: unknown }).type !== 'shutdown') return;
    stop().then(
      () => process.exit(0),
      (error: unknown) => {
        process.stderr.write(`retrysafe orders worker: shutdown failed: ${error instanceof Error ? error.message : String(error)}\n`);
        process.exit(1);
      },
    );
  });
  process.on('disconnect', () => process.exit(0));
  // A parent that died while this worker started closed the channel before anyone listened for it.
  if (!process.connected) process.exit(0);
  // The worker runs in a process group of its own, out of a terminal's Ctrl-C; a SIGINT sent to it anyway is
  // the parent's to handle: it stops the workers in order and cleans up after them.
  process.on('SIGINT', () => undefined);
}
