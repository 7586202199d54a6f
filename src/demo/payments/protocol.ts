/**
 * What the demo's parent (the driver) and its child (the payments server) tell each other: the child's
 * configuration on its command line, and messages over the Node IPC channel.
 *
 * @module
 */
import type { Charge } from './ledger.js';
import type { ReceiverCounts } from './metrics.js';
import type { ServerFault } from '../harness/plan.js';

/** The server's configuration, passed as one JSON argument. */
export interface ServerConfig {
  /** The `--store` value, narrowed to the run's schema or key prefix (`harness/run-store.ts`). */
  readonly store: string;
  /** Port to listen on at 127.0.0.1; 0 picks a free one (the first start), a restart reuses the port. */
  readonly port: number;
  /** Serve without the idempotency middleware (the `--unsafe` comparison). */
  readonly unsafe: boolean;
  /** How long a `slow` handler takes, in milliseconds. */
  readonly slowMs: number;
  /**
   * The idempotency lease, in milliseconds: how long a crashed holder's claim blocks retries (on a store
   * that commits the claim apart from the business transaction, as PostgreSQL does).
   */
  readonly leaseMs: number;
  /** This run's id (lower-case hex): names the per-run PostgreSQL schema of the charges (the run's store schema). */
  readonly runId: string;
  /** A directory of this run's own, for the SQLite charges file next to a store that is not SQLite. */
  readonly directory: string;
}

/** Child → parent. */
export type ServerMessage =
  | { readonly type: 'ready'; readonly port: number }
  | { readonly type: 'listen-failed'; readonly code: string; readonly message: string }
  /**
   * A fault took effect on a request with this key; for the crash faults the parent kills the server now.
   * `inFlight` (crash faults): the other requests the server had let in and not yet answered at that point.
   */
  | { readonly type: 'fault'; readonly key: string; readonly fault: ServerFault; readonly inFlight?: number }
  | { readonly type: 'charges'; readonly charges: readonly Charge[] }
  /** The receiver's metric counts so far in this process (cumulative; sent before each answer leaves and before a fault). */
  | { readonly type: 'metrics'; readonly counts: ReceiverCounts };

/** Parent → child. */
export type ParentMessage =
  | { readonly type: 'charges'; readonly keyPrefix: string }
  | { readonly type: 'shutdown' };

/** Narrows an IPC payload to a {@link ServerMessage}. */
export function isServerMessage(value: unknown): value is ServerMessage {
  return hasType(value, ['ready', 'listen-failed', 'fault', 'charges', 'metrics']);
}

/** Narrows an IPC payload to a {@link ParentMessage}. */
export function isParentMessage(value: unknown): value is ParentMessage {
  return hasType(value, ['charges', 'shutdown']);
}

function hasType(value: unknown, types: readonly string[]): boolean {
  const type = typeof value === 'object' && value !== null ? (value as { type?: unknown }).type : undefined;
  return typeof type === 'string' && types.includes(type);
}
