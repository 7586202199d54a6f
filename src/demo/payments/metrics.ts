/**
 * The demo's own look at the receiver's metrics: the payments server records them through the
 * OpenTelemetry SDK on an in-memory reader (`server-metrics.ts`) and sends cumulative snapshots to the
 * parent, which adds up the last snapshot of every server process (a crash restarts the counts). The
 * report prints them next to what the clients saw, so the metrics can be checked against an independent
 * count.
 *
 * @module
 */

/** What the report shows of the receiver's metrics. */
export interface ReceiverCounts {
  /** `retrysafe.requests{outcome="executed"}`: handler runs whose response the receiver returned. */
  readonly executions: number;
  /** `retrysafe.requests{outcome="replayed"|"waited"}`: saved responses replayed. */
  readonly replays: number;
  /** `retrysafe.requests{outcome="in_flight_rejected"|"lease_lost"}`: 409 answers. */
  readonly conflicts: number;
  /** `retrysafe.lease.takeovers`: claims that took over a crashed holder's expired lease. */
  readonly takeovers: number;
}

export const NO_COUNTS: ReceiverCounts = Object.freeze({ executions: 0, replays: 0, conflicts: 0, takeovers: 0 });

/**
 * The later of two snapshots of one process, counter by counter: the counts only grow, and two snapshots
 * taken close together may arrive in either order.
 */
export function laterCounts(a: ReceiverCounts, b: ReceiverCounts): ReceiverCounts {
  return {
    executions: Math.max(a.executions, b.executions),
    replays: Math.max(a.replays, b.replays),
    conflicts: Math.max(a.conflicts, b.conflicts),
    takeovers: Math.max(a.takeovers, b.takeovers),
  };
}

/** Adds counts up. */
export function addCounts(a: ReceiverCounts, b: ReceiverCounts): ReceiverCounts {
  return {
    executions: a.executions + b.executions,
    replays: a.replays + b.replays,
    conflicts: a.conflicts + b.conflicts,
    takeovers: a.takeovers + b.takeovers,
  };
}
