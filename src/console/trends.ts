/**
 * The console's trends: every `intervalMs` the console asks the store what it already answers for its
 * views — the round trip of one `get` (store latency), the outbox's backlog, oldest unsent age and dead
 * letters, the inbox's dead letters and pending redrives — and, given a metrics endpoint, scrapes the
 * receiver's (or the gateway's) request counters and latency histogram (`./scrape.ts`), and keeps the
 * answers for `windowMs` in its own memory, so `GET /api/trends` can draw how they moved. Nothing is
 * written to the store; a console that restarts starts with an empty window. A sample whose query fails is
 * kept without that figure (`null`).
 *
 * @module
 */
import type { IdempotencyStore } from '../core/store.js';
import type { Inbox } from '../messaging/inbox/inbox.js';
import type { Outbox, Queryable } from '../messaging/outbox/outbox.js';
import { type MetricRates, ratesBetween, type Scrape, scrape } from './scrape.js';

/** One sample. Times in milliseconds; `null` where the store has no such view or its query failed. */
interface TrendSample {
  /** When it was taken (milliseconds since the epoch). */
  readonly at: number;
  /** The round trip of one `get` of an absent key, in milliseconds. */
  readonly storeMs: number | null;
  readonly outboxPending: number | null;
  /** The oldest unsent row's age, in milliseconds. */
  readonly outboxOldestMs: number | null;
  readonly outboxDeadLetters: number | null;
  /** Inbox dead letters and pending redrives, counted up to {@link INBOX_COUNT_LIMIT}. */
  readonly inboxDeadLetters: number | null;
  /** From the metrics endpoint, since the previous sample: `null` without one, or for the first scrape. */
  readonly metrics: MetricRates | null;
}

/** The most inbox dead letters one sample counts. */
const INBOX_COUNT_LIMIT = 1_000;

/** What the sampler reads. */
interface TrendSources {
  readonly store: IdempotencyStore;
  readonly inbox?: Inbox<unknown> | undefined;
  readonly outbox?: { readonly outbox: Outbox; readonly db: Queryable } | undefined;
  /** A Prometheus text endpoint of the receiver or the gateway (`./scrape.ts`). */
  readonly metricsUrl?: string | undefined;
}

/** The samples of the window, oldest first, and the interval they were taken at (milliseconds). */
export interface Trends {
  readonly intervalMs: number;
  samples(): readonly TrendSample[];
  /** Stops sampling (idempotent). */
  stop(): void;
}

/** Resolves to `read()`'s answer, or `null` when it failed. */
function orNull<T>(read: () => Promise<T>): Promise<T | null> {
  return read().then(
    (value) => value,
    () => null,
  );
}

async function sample(sources: TrendSources, intervalMs: number, last: { scrape: Scrape | undefined }): Promise<TrendSample> {
  const at = Date.now();
  const { outbox, inbox, metricsUrl } = sources;
  const [storeMs, status, letters, scraped] = await Promise.all([
    orNull(async () => {
      const started = performance.now();
      await sources.store.get('', 'retrysafe-console-probe');
      return Math.round((performance.now() - started) * 100) / 100;
    }),
    outbox === undefined ? null : orNull(() => outbox.outbox.status(outbox.db)),
    inbox === undefined ? null : orNull(() => inbox.deadLetters({ limit: INBOX_COUNT_LIMIT })),
    metricsUrl === undefined ? null : orNull(() => scrape(metricsUrl, intervalMs)),
  ]);
  // Rates need two scrapes in a row: after a failed one the next starts again.
  const metrics = scraped !== null && last.scrape !== undefined ? ratesBetween(last.scrape, scraped) : null;
  last.scrape = scraped ?? undefined;
  return {
    at,
    storeMs,
    outboxPending: status?.pending ?? null,
    outboxOldestMs: status?.oldestPendingAgeMs ?? null,
    outboxDeadLetters: status?.deadLetters ?? null,
    inboxDeadLetters: letters?.length ?? null,
    metrics,
  };
}

/**
 * Starts sampling `sources` every `intervalMs` milliseconds (the first sample at once), keeping the
 * samples of the last `windowMs` milliseconds. The timer does not keep the process alive; a sample is not
 * started while the previous one is still running.
 *
 * @throws RangeError when `intervalMs` or `windowMs` is not a positive integer
 */
export function startTrends(sources: TrendSources, intervalMs: number, windowMs: number): Trends {
  for (const [name, value] of [['intervalMs', intervalMs], ['windowMs', windowMs]] as const) {
    if (!Number.isInteger(value) || value <= 0) throw new RangeError(`retrysafe: trends ${name} must be a positive integer of milliseconds, got ${String(value)}`);
  }
  const kept: TrendSample[] = [];
  const last = { scrape: undefined as Scrape | undefined };
  let running = false;
  const take = (): void => {
    if (running) return;
    running = true;
    void sample(sources, intervalMs, last)
      .then((taken) => {
        kept.push(taken);
        while (kept.length > 0 && (kept[0]?.at ?? 0) < taken.at - windowMs) kept.shift();
      })
      .finally(() => (running = false));
  };
  take();
  const timer = setInterval(take, intervalMs);
  timer.unref();
  return { intervalMs, samples: () => kept, stop: () => clearInterval(timer) };
}
