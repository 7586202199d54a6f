/**
 * What the messaging benchmarks share: the database pool on a per-run schema, broker URLs, the run id
 * that names every queue, stream and subject, and the sizes read from the environment.
 */
import type pg from 'pg';

export interface BenchContext {
  readonly pool: pg.Pool;
  /** Per-run schema, migrated (inbox and outbox tables) plus `bench_effects`. */
  readonly schema: string;
  readonly amqpUrl: string;
  readonly natsUrl: string;
  /** Lower-case hex; names queues (`bench.<run>.…`), the stream (`BENCH_<run>`) and subjects (`bench_<run>.…`). */
  readonly runId: string;
}

/** A positive integer from the environment, or `fallback`. */
export function envCount(name: string, fallback: number): number {
  const text = process.env[name];
  if (text === undefined || text === '') return fallback;
  const value = Number(text);
  if (!Number.isSafeInteger(value) || value <= 0) throw new TypeError(`${name} must be a positive integer, got ${JSON.stringify(text)}`);
  return value;
}

/** The business write both consumers do: one row per message. $1 message id, $2 body. */
export function effectInsert(schema: string): string {
  return `INSERT INTO "${schema}".bench_effects (message_id, body) VALUES ($1, $2)`;
}

/** Runs `task` for every index below `count` with at most `concurrency` running at once. */
export async function forEachConcurrently(count: number, concurrency: number, task: (i: number) => Promise<void>): Promise<void> {
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < count) await task(next++);
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, count) }, worker));
}

/** The `q`-quantile (0..1) of `sorted`, nearest rank. */
export function quantile(sorted: readonly number[], q: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))] ?? Number.NaN;
}
