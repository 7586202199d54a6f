/**
 * The gateway's Prometheus metrics, in the text exposition format (version 0.0.4) its admin listener
 * serves at `/metrics`: request outcomes, upstream latency, statuses and timeouts, and the records it
 * held as indeterminate and resolved. The receiver's own OpenTelemetry instruments report through
 * `@opentelemetry/api` as in any other receiver.
 *
 * @module
 */

/** Upper bounds of the upstream latency histogram, in seconds. */
const BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

/** How a request through the gateway ended (the `outcome` label). */
export type GatewayOutcome =
  | 'executed'
  | 'replayed'
  | 'forwarded'
  | 'reconciled'
  | 'outcome_unknown'
  | 'in_flight_rejected'
  | 'mismatch'
  | 'invalid_key'
  | 'store_unavailable'
  | 'too_large'
  | 'not_kept'
  | 'unreachable'
  | 'identity_refused'
  | 'no_route'
  | 'error';

function labels(values: Readonly<Record<string, string>>): string {
  const parts = Object.entries(values).map(([name, value]) => `${name}="${value.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n')}"`);
  return parts.length === 0 ? '' : `{${parts.join(',')}}`;
}

/** One labelled series of a counter: its label text (escaped once, when first seen) and its value. */
interface Series {
  readonly labels: string;
  value: number;
}

// Hot path: docs/hot-path.md#gateway-request
/**
 * The lookup key of a label set: names and values joined with NUL, nothing escaped (the values are route
 * and upstream names from the configuration and fixed words), so a recording builds one short string.
 */
function seriesKey(values: Readonly<Record<string, string>>): string {
  let key = '';
  for (const name in values) key += `${name}\0${values[name] as string}\0`;
  return key;
}

/** A counter with labels, keyed by its label set. */
class Counter {
  private readonly series = new Map<string, Series>();
  constructor(
    readonly name: string,
    readonly help: string,
  ) {}

  add(label: Readonly<Record<string, string>>, by = 1): void {
    const key = seriesKey(label);
    const found = this.series.get(key);
    if (found !== undefined) found.value += by;
    else this.series.set(key, { labels: labels(label), value: by });
  }

  render(): string {
    const lines = [`# HELP ${this.name} ${this.help}`, `# TYPE ${this.name} counter`];
    for (const { labels: text, value } of this.series.values()) lines.push(`${this.name}${text} ${value}`);
    return lines.join('\n');
  }
}

/** The upstream latency histogram, per upstream. */
class Histogram {
  /** Per upstream: the observations that fell in each bucket (not cumulative: summed when rendered). */
  private readonly series = new Map<string, { counts: number[]; sum: number; count: number }>();
  constructor(
    readonly name: string,
    readonly help: string,
  ) {}

  observe(upstream: string, seconds: number): void {
    let entry = this.series.get(upstream);
    if (entry === undefined) {
      entry = { counts: BUCKETS.map(() => 0), sum: 0, count: 0 };
      this.series.set(upstream, entry);
    }
    let bucket = 0;
    while (bucket < BUCKETS.length && seconds > (BUCKETS[bucket] as number)) bucket += 1;
    if (bucket < BUCKETS.length) entry.counts[bucket] = (entry.counts[bucket] as number) + 1;
    entry.sum += seconds;
    entry.count += 1;
  }

  render(): string {
    const lines = [`# HELP ${this.name} ${this.help}`, `# TYPE ${this.name} histogram`];
    for (const [upstream, entry] of this.series) {
      let cumulative = 0;
      BUCKETS.forEach((bound, i) => {
        cumulative += entry.counts[i] ?? 0;
        lines.push(`${this.name}_bucket${labels({ upstream, le: String(bound) })} ${cumulative}`);
      });
      lines.push(`${this.name}_bucket${labels({ upstream, le: '+Inf' })} ${entry.count}`);
      lines.push(`${this.name}_sum${labels({ upstream })} ${entry.sum}`);
      lines.push(`${this.name}_count${labels({ upstream })} ${entry.count}`);
    }
    return lines.join('\n');
  }
}

/** The gateway's instruments. */
export class GatewayMetrics {
  readonly requests = new Counter('retrysafe_gateway_requests_total', 'Requests through the gateway, by route and outcome.');
  readonly upstreamResponses = new Counter('retrysafe_gateway_upstream_responses_total', 'Upstream responses, by upstream and status class.');
  readonly upstreamFailures = new Counter('retrysafe_gateway_upstream_failures_total', 'Upstream exchanges that failed, by upstream and kind (unreachable, timeout, reset).');
  readonly indeterminate = new Counter('retrysafe_gateway_indeterminate_total', 'Records held as indeterminate (outcome unknown), by route.');
  readonly resolved = new Counter('retrysafe_gateway_indeterminate_resolved_total', 'Indeterminate records, and records of a stopped gateway taken over, that the reconcile hook resolved, by route and resolution (completed, released).');
  readonly upstreamLatency = new Histogram('retrysafe_gateway_upstream_duration_seconds', 'Time to the upstream response headers, in seconds.');

  /** The exposition text. */
  render(): string {
    return `${[this.requests, this.upstreamResponses, this.upstreamFailures, this.indeterminate, this.resolved, this.upstreamLatency].map((metric) => metric.render()).join('\n')}\n`;
  }
}
