/**
 * A closed-loop HTTP load generator on undici: `connections` clients, each sending its next request as
 * soon as the previous answer arrives, for `durationMs` milliseconds after a warm-up.
 */
import { Pool } from 'undici';

export interface LoadOptions {
  readonly origin: string;
  readonly path: string;
  readonly connections: number;
  readonly warmupMs: number;
  readonly durationMs: number;
  /** Idempotency-Key of request number `n`, or undefined to send none. */
  readonly keyFor: (n: number) => string | undefined;
  readonly body: string;
}

export interface LoadResult {
  readonly requests: number;
  readonly perSecond: number;
  /** Count of answers by status code. */
  readonly statuses: Readonly<Record<number, number>>;
}

export async function runLoad(options: LoadOptions): Promise<LoadResult> {
  const pool = new Pool(options.origin, { connections: options.connections, pipelining: 1 });
  let n = 0;
  let counting = false;
  let counted = 0;
  const statuses: Record<number, number> = {};
  let stop = false;
  const worker = async (): Promise<void> => {
    while (!stop) {
      const key = options.keyFor(n++);
      const headers: Record<string, string> = { 'content-type': 'application/json' };
      if (key !== undefined) headers['idempotency-key'] = key;
      const res = await pool.request({ method: 'POST', path: options.path, headers, body: options.body });
      await res.body.dump();
      if (counting) {
        counted++;
        statuses[res.statusCode] = (statuses[res.statusCode] ?? 0) + 1;
      }
    }
  };
  const workers = Array.from({ length: options.connections }, () => worker());
  await new Promise((resolve) => setTimeout(resolve, options.warmupMs));
  counting = true;
  const started = performance.now();
  await new Promise((resolve) => setTimeout(resolve, options.durationMs));
  counting = false;
  const elapsed = performance.now() - started;
  stop = true;
  await Promise.all(workers);
  await pool.close();
  return { requests: counted, perSecond: (counted / elapsed) * 1000, statuses };
}

export interface BurstOptions {
  readonly origin: string;
  readonly path: string;
  /** Bursts in flight at once. */
  readonly parallel: number;
  /** Concurrent duplicates per key. */
  readonly burst: number;
  readonly durationMs: number;
  readonly keyFor: (n: number) => string;
  readonly body: string;
}

export interface BurstResult {
  readonly keys: number;
  readonly requests: number;
  readonly perSecond: number;
  readonly statuses: Readonly<Record<number, number>>;
}

/** Fires `burst` concurrent requests with one key, `parallel` keys at a time, for `durationMs`. */
export async function runBursts(options: BurstOptions): Promise<BurstResult> {
  const pool = new Pool(options.origin, { connections: options.parallel * options.burst, pipelining: 1 });
  let n = 0;
  let keys = 0;
  let requests = 0;
  const statuses: Record<number, number> = {};
  const until = performance.now() + options.durationMs;
  const started = performance.now();
  const worker = async (): Promise<void> => {
    while (performance.now() < until) {
      const key = options.keyFor(n++);
      await Promise.all(
        Array.from({ length: options.burst }, async () => {
          const res = await pool.request({
            method: 'POST',
            path: options.path,
            headers: { 'content-type': 'application/json', 'idempotency-key': key },
            body: options.body,
          });
          await res.body.dump();
          requests++;
          statuses[res.statusCode] = (statuses[res.statusCode] ?? 0) + 1;
        }),
      );
      keys++;
    }
  };
  await Promise.all(Array.from({ length: options.parallel }, () => worker()));
  const elapsed = performance.now() - started;
  await pool.close();
  return { keys, requests, perSecond: (requests / elapsed) * 1000, statuses };
}

/** Raw driver round trips per second: `concurrency` loops calling `trip` for `durationMs`. */
export async function runFloor(trip: () => Promise<unknown>, concurrency: number, durationMs: number): Promise<number> {
  let count = 0;
  const until = performance.now() + durationMs;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (performance.now() < until) {
        await trip();
        count++;
      }
    }),
  );
  return (count / (performance.now() - started)) * 1000;
}
