/**
 * The console's reading of a receiver's metrics for the trends view: one scrape of a Prometheus text
 * endpoint (the exposition format 0.0.4) — the receiver's instruments through OpenTelemetry's Prometheus
 * exporter (`retrysafe_requests_total`, `retrysafe_store_operation_duration_seconds`), or `retrysafe
 * gateway`'s admin `/metrics` (`retrysafe_gateway_requests_total`,
 * `retrysafe_gateway_upstream_duration_seconds`) — and the rates between two scrapes: requests per second,
 * the replay and 409 ratios, and the latency's p50 and p99 from the histogram's buckets, interpolated
 * within a bucket as Prometheus's `histogram_quantile` does.
 *
 * @module
 */

/** What one scrape read: request counts by outcome, and the latency histogram's cumulative buckets. */
export interface Scrape {
  /** When it was read (milliseconds since the epoch). */
  readonly at: number;
  /** Requests by outcome (`executed`, `replayed`, `in_flight_rejected`, …), summed over the other labels. */
  readonly requests: ReadonlyMap<string, number>;
  /** Cumulative counts by upper bound in seconds (`+Inf` included), summed over the other labels. */
  readonly buckets: ReadonlyMap<number, number>;
  /** Whose latency the buckets are: the store's operations (a receiver) or the upstream's (a gateway). */
  readonly latencyOf: 'store' | 'upstream' | undefined;
}

/** The figures between two scrapes; `null` where the interval had no request (no ratio, no latency). */
export interface MetricRates {
  /** Requests counted in the interval: all, replayed, and refused 409 because the key was in flight. */
  readonly requests: number;
  readonly replayed: number;
  readonly conflicts: number;
  readonly requestsPerSecond: number;
  /** Replays among the interval's requests, 0..1. */
  readonly replayRatio: number | null;
  /** Requests refused 409 because the key was in flight, 0..1. */
  readonly conflictRatio: number | null;
  /** Latency quantiles of the interval, in milliseconds. */
  readonly latencyP50Ms: number | null;
  readonly latencyP99Ms: number | null;
  readonly latencyOf: 'store' | 'upstream' | null;
}

const REQUESTS = ['retrysafe_requests_total', 'retrysafe_gateway_requests_total'];
const LATENCY: readonly [string, 'store' | 'upstream'][] = [
  ['retrysafe_store_operation_duration_seconds_bucket', 'store'],
  ['retrysafe_gateway_upstream_duration_seconds_bucket', 'upstream'],
];
/** One sample line: name, optional labels, value (a timestamp after it is ignored). */
const SAMPLE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)/;
const LABEL = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;

function labelsOf(text: string | undefined): Map<string, string> {
  const labels = new Map<string, string>();
  if (text !== undefined) for (const match of text.matchAll(LABEL)) labels.set(match[1] as string, (match[2] as string).replace(/\\(.)/g, (_all, c: string) => (c === 'n' ? '\n' : c)));
  return labels;
}

function add<K>(map: Map<K, number>, key: K, value: number): void {
  map.set(key, (map.get(key) ?? 0) + value);
}

/** Reads the request counters and the latency buckets out of a Prometheus text exposition. */
export function parseScrape(text: string, at: number): Scrape {
  const requests = new Map<string, number>();
  const byFamily = new Map<'store' | 'upstream', Map<number, number>>();
  for (const line of text.split('\n')) {
    const match = SAMPLE.exec(line);
    if (match === null) continue;
    const [, name, labelText, raw] = match as unknown as [string, string, string | undefined, string];
    const value = Number(raw);
    if (!Number.isFinite(value)) continue;
    if (REQUESTS.includes(name)) {
      add(requests, labelsOf(labelText).get('outcome') ?? 'unknown', value);
      continue;
    }
    const family = LATENCY.find(([bucket]) => bucket === name)?.[1];
    if (family === undefined) continue;
    const le = labelsOf(labelText).get('le');
    const bound = le === '+Inf' ? Infinity : Number(le);
    if (le === undefined || Number.isNaN(bound)) continue;
    let buckets = byFamily.get(family);
    if (buckets === undefined) byFamily.set(family, (buckets = new Map<number, number>()));
    add(buckets, bound, value);
  }
  const latencyOf = byFamily.has('store') ? 'store' : byFamily.has('upstream') ? 'upstream' : undefined;
  return { at, requests, buckets: latencyOf === undefined ? new Map() : (byFamily.get(latencyOf) as Map<number, number>), latencyOf };
}

/** `now - before`, or `now` itself when the counter went down (the process restarted and counts from 0). */
function increase(now: number, before: number | undefined): number {
  return before === undefined || now < before ? now : now - before;
}

/** The `q` quantile (0..1) of cumulative `buckets`, in seconds; `null` when they hold no observation. */
function quantile(q: number, buckets: readonly [number, number][]): number | null {
  const total = buckets[buckets.length - 1]?.[1] ?? 0;
  if (total <= 0) return null;
  const rank = q * total;
  let lower = 0;
  let below = 0;
  for (const [bound, count] of buckets) {
    if (count >= rank) {
      // The +Inf bucket has no upper edge: answer the highest finite bound, as histogram_quantile does.
      if (bound === Infinity) return lower;
      return count === below ? bound : lower + ((bound - lower) * (rank - below)) / (count - below);
    }
    lower = bound;
    below = count;
  }
  return lower;
}

/** The rates between the scrapes `before` and `now`. */
export function ratesBetween(before: Scrape, now: Scrape): MetricRates {
  let total = 0;
  const outcomes = new Map<string, number>();
  for (const [outcome, count] of now.requests) {
    const delta = increase(count, before.requests.get(outcome));
    outcomes.set(outcome, delta);
    total += delta;
  }
  const seconds = Math.max(now.at - before.at, 1) / 1_000;
  const buckets = [...now.buckets]
    .map(([bound, count]): [number, number] => [bound, increase(count, before.latencyOf === now.latencyOf ? before.buckets.get(bound) : undefined)])
    .sort((a, b) => a[0] - b[0]);
  const toMs = (s: number | null): number | null => (s === null ? null : Math.round(s * 100_000) / 100);
  const replayed = outcomes.get('replayed') ?? 0;
  const conflicts = outcomes.get('in_flight_rejected') ?? 0;
  return {
    requests: total,
    replayed,
    conflicts,
    requestsPerSecond: Math.round((total / seconds) * 100) / 100,
    replayRatio: total === 0 ? null : Math.round((replayed / total) * 1_000) / 1_000,
    conflictRatio: total === 0 ? null : Math.round((conflicts / total) * 1_000) / 1_000,
    latencyP50Ms: toMs(quantile(0.5, buckets)),
    latencyP99Ms: toMs(quantile(0.99, buckets)),
    latencyOf: now.latencyOf ?? null,
  };
}

/** Scrapes `url` (a Prometheus text endpoint) within `timeoutMs` milliseconds; rejects on a non-2xx answer. */
export async function scrape(url: string, timeoutMs: number): Promise<Scrape> {
  const response = await fetch(url, { signal: AbortSignal.timeout(timeoutMs), headers: { accept: 'text/plain; version=0.0.4' } });
  if (!response.ok) throw new Error(`metrics endpoint answered ${response.status}`);
  return parseScrape(await response.text(), Date.now());
}
