/**
 * The OpenTelemetry SDK's in-memory side for tests: a meter provider whose reader collects on demand, and
 * a tracer provider exporting finished spans to memory. Readers sum a counter's points (optionally those
 * matching some attributes) and count a histogram's recordings. And a pino logger whose lines a test reads.
 */
import { Writable } from 'node:stream';
import type { Attributes } from '@opentelemetry/api';
import {
  DataPointType,
  MeterProvider,
  MetricReader,
  type MetricData,
} from '@opentelemetry/sdk-metrics';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { pino } from 'pino';

/** A reader that exports nothing on its own: the test calls `collect()`. */
class OnDemandReader extends MetricReader {
  protected onShutdown(): Promise<void> {
    return Promise.resolve();
  }
  protected onForceFlush(): Promise<void> {
    return Promise.resolve();
  }
}

export interface Telemetry {
  readonly meterProvider: MeterProvider;
  readonly tracerProvider: BasicTracerProvider;
  readonly spans: InMemorySpanExporter;
  /** Every metric collected now, by name. */
  metrics(): Promise<Map<string, MetricData>>;
  /** The sum of a counter's (or up-down counter's) points whose attributes include `match`; 0 when absent. */
  sum(name: string, match?: Attributes): Promise<number>;
  /** How many values a histogram recorded on points whose attributes include `match`. */
  count(name: string, match?: Attributes): Promise<number>;
  shutdown(): Promise<void>;
}

function matches(attributes: Attributes, match: Attributes | undefined): boolean {
  return Object.entries(match ?? {}).every(([name, value]) => attributes[name] === value);
}

export function telemetry(): Telemetry {
  const reader = new OnDemandReader();
  const meterProvider = new MeterProvider({ readers: [reader] });
  const spans = new InMemorySpanExporter();
  const tracerProvider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(spans)] });
  const metrics = async (): Promise<Map<string, MetricData>> => {
    const { resourceMetrics, errors } = await reader.collect();
    if (errors.length > 0) throw new Error(`metric collection failed: ${String(errors[0])}`);
    const byName = new Map<string, MetricData>();
    for (const scope of resourceMetrics.scopeMetrics) for (const metric of scope.metrics) byName.set(metric.descriptor.name, metric);
    return byName;
  };
  return {
    meterProvider,
    tracerProvider,
    spans,
    metrics,
    async sum(name, match) {
      const metric = (await metrics()).get(name);
      if (metric === undefined) return 0;
      if (metric.dataPointType !== DataPointType.SUM && metric.dataPointType !== DataPointType.GAUGE) throw new Error(`${name} is not a sum`);
      return metric.dataPoints.filter((p) => matches(p.attributes, match)).reduce((total, p) => total + p.value, 0);
    },
    async count(name, match) {
      const metric = (await metrics()).get(name);
      if (metric === undefined) return 0;
      if (metric.dataPointType !== DataPointType.HISTOGRAM) throw new Error(`${name} is not a histogram`);
      return metric.dataPoints.filter((p) => matches(p.attributes, match)).reduce((total, p) => total + p.value.count, 0);
    },
    async shutdown() {
      await meterProvider.shutdown();
      await tracerProvider.shutdown();
    },
  };
}

/** A pino logger writing JSON lines into an array. */
export function capturingLogger(): { logger: pino.Logger; lines: Record<string, unknown>[]; raw: string[] } {
  const lines: Record<string, unknown>[] = [];
  const raw: string[] = [];
  const stream = new Writable({
    write(chunk: Buffer, _encoding, done) {
      const text = chunk.toString('utf8');
      raw.push(text);
      for (const line of text.split('\n').filter(Boolean)) lines.push(JSON.parse(line) as Record<string, unknown>);
      done();
    },
  });
  return { logger: pino({ level: 'info' }, stream), lines, raw };
}
