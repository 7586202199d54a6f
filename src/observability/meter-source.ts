/**
 * Instruments that follow the global meter provider: the API's global meter provider has no proxy (unlike
 * its tracer provider), and a meter obtained from the no-op provider stays no-op, so instruments made once
 * would never record to an SDK registered after them.
 *
 * @module
 */
import type { Meter, MeterProvider } from '@opentelemetry/api';
import { metricsApi } from './api.js';
import { INSTRUMENTATION_SCOPE, INSTRUMENTATION_VERSION } from './scope.js';

/**
 * A set of instruments (whatever `create` makes on a meter) for the meter provider to record to now. Given
 * a `Meter` or `MeterProvider`, that one is fixed: the instruments are made on the first call and kept.
 * Otherwise {@link MeterSource.instruments} reads the global provider (`metrics.getMeterProvider()`) at
 * each call, and makes the instruments again, on the provider's `retrysafe` meter, when it is not the one
 * they were made on. Without `@opentelemetry/api` installed there are none.
 */
export class MeterSource<T> {
  /** The meter or provider the instruments were made on; `undefined` while there are none. */
  private made: Meter | MeterProvider | undefined;
  private current: T | undefined;

  /**
   * @param explicit - the meter or provider given in the options; `undefined` to follow the global provider
   * @param create - makes the instruments on a meter
   * @param detach - takes the observable callbacks of instruments no longer recorded to off their meter
   */
  constructor(
    private readonly explicit: Meter | MeterProvider | undefined,
    private readonly create: (meter: Meter) => T,
    private readonly detach?: (instruments: T) => void,
  ) {}

  /**
   * The instruments to record on now, `undefined` without `@opentelemetry/api`. Costs one read of the
   * global provider and a comparison; making instruments (and detaching the old ones) only when the
   * provider changed.
   */
  instruments(): T | undefined {
    const source = this.explicit ?? metricsApi?.getMeterProvider();
    if (source === this.made) return this.current;
    if (this.current !== undefined) this.detach?.(this.current);
    this.made = source;
    this.current = source && this.create('getMeter' in source ? source.getMeter(INSTRUMENTATION_SCOPE, INSTRUMENTATION_VERSION) : source);
    return this.current;
  }
}
