/**
 * The payments server's in-memory metric reader (`@opentelemetry/sdk-metrics`, loaded only when
 * installed): a meter provider for the receiver, and snapshots of the counts the report shows.
 *
 * @module
 */
import { MeterProvider, MetricReader } from '@opentelemetry/sdk-metrics';
import { RECEIVER_INSTRUMENTS } from '../../index.js';
import type { ReceiverCounts } from './metrics.js';

/** A reader that collects only when asked. */
class OnDemandReader extends MetricReader {
  protected onShutdown(): Promise<void> {
    return Promise.resolve();
  }
  protected onForceFlush(): Promise<void> {
    return Promise.resolve();
  }
}

/** The server side: a meter provider for the receiver and snapshots of its counts. */
export class ServerMetrics {
  private readonly reader = new OnDemandReader();
  readonly meterProvider = new MeterProvider({ readers: [this.reader] });

  /** The receiver's counts so far in this process. */
  async snapshot(): Promise<ReceiverCounts> {
    const { resourceMetrics } = await this.reader.collect();
    const sum = (name: string, outcomes?: readonly string[]): number => {
      let total = 0;
      for (const scope of resourceMetrics.scopeMetrics) {
        for (const metric of scope.metrics) {
          if (metric.descriptor.name !== name) continue;
          for (const point of metric.dataPoints) {
            const outcome = point.attributes['outcome'];
            if (outcomes === undefined || (typeof outcome === 'string' && outcomes.includes(outcome))) total += point.value as number;
          }
        }
      }
      return total;
    };
    return {
      executions: sum(RECEIVER_INSTRUMENTS.requests, ['executed']),
      replays: sum(RECEIVER_INSTRUMENTS.requests, ['replayed', 'waited']),
      conflicts: sum(RECEIVER_INSTRUMENTS.requests, ['in_flight_rejected', 'lease_lost']),
      takeovers: sum(RECEIVER_INSTRUMENTS.takeovers),
    };
  }
}

