import type { Server } from 'node:http';

/** What a benchmark server is built from: retrysafe's receiver, or raw driver round trips, or neither. */
import type { Receiver } from '../../src/index.js';

export interface BenchApp {
  /** Put the handler behind retrysafe with this receiver. */
  readonly receiver?: Receiver<unknown>;
  /** Run these raw driver round trips inside the handler (the baseline of a store's cost). */
  readonly roundTrips?: () => Promise<void>;
  /** Put the handler behind the minimal idempotency layer instead (Fastify only; see minimal-layer.ts). */
  readonly minimalLayer?: boolean;
}

/** Handler executions so far (for the duplicate-burst check) and HTTP requests served (for CPU per request). */
export const stats = { executions: 0, requests: 0 };

/** Counts every request the server receives, whatever answers it (handler, replay or problem). */
export function countRequests(server: Server): void {
  server.on('request', () => {
    stats.requests++;
  });
}

/** The payments handler's answer. */
export function charge(amount: number | undefined): { id: string; amount: number } {
  stats.executions++;
  return { id: `pay_${stats.executions}`, amount: amount ?? 0 };
}

/** The stats endpoint's answer: RSS (bytes), counters, and the process's CPU time so far (user + system, microseconds). */
export function snapshot(): { rss: number; executions: number; requests: number; cpuMicros: number } {
  const cpu = process.cpuUsage();
  return { rss: process.memoryUsage().rss, executions: stats.executions, requests: stats.requests, cpuMicros: cpu.user + cpu.system };
}
