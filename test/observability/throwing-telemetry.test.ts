/**
 * Telemetry that throws never changes a request's outcome: a `tracerProvider` whose span processor throws
 * as a receiver span starts or ends, a `meterProvider` whose instruments throw, a `logger` that throws. The
 * request is answered as without them (saved, sent, replayed to a retry, the work run once) and plain mode's
 * keep-alive lets go of the lease (no renewal after the request ended). Memory store, short lease.
 */
import { randomUUID } from 'node:crypto';
import { diag, type DiagLogger, type MeterProvider } from '@opentelemetry/api';
import { BasicTracerProvider, type ReadableSpan, type Span, type SpanProcessor } from '@opentelemetry/sdk-trace-base';
import { describe, expect, it } from 'vitest';
import type { StoredResponse } from '../../src/core/record.js';
import type { ObservabilityOptions } from '../../src/observability/observer.js';
import { createReceiver } from '../../src/receiver.js';
import { createMemoryStore } from '../../src/stores/memory.js';
import { renewalCountingStore, sleep } from '../support/renewal-counting-store.js';

const FP = 'a'.repeat(64);
const LEASE_MS = 300;

class TelemetryBug extends Error {}

/** A persistence rule that throws, so the receiver logs `should_persist_threw`. */
function throwingRule(): boolean {
  throw new RangeError('shouldPersist bug');
}

/** A span processor that throws as a span named `name` starts (`onStart`) or ends (`onEnd`). */
function throwingProcessor(when: 'onStart' | 'onEnd', name: string): SpanProcessor {
  const at = (span: Span | ReadableSpan, hook: 'onStart' | 'onEnd'): void => {
    if (hook === when && span.name === name) throw new TelemetryBug(`${hook} of ${name}`);
  };
  return {
    onStart: (span) => at(span, 'onStart'),
    onEnd: (span) => at(span, 'onEnd'),
    forceFlush: () => Promise.resolve(),
    shutdown: () => Promise.resolve(),
  };
}

/** A meter provider whose synchronous instruments throw on every recording (its observable ones do nothing). */
function throwingMeters(): MeterProvider {
  const fail = (): never => {
    throw new TelemetryBug('instrument');
  };
  const observable = { addCallback: () => undefined, removeCallback: () => undefined };
  const meter = {
    createHistogram: () => ({ record: fail }),
    createCounter: () => ({ add: fail }),
    createObservableCounter: () => observable,
    createObservableUpDownCounter: () => observable,
  };
  return { getMeter: () => meter } as unknown as MeterProvider;
}

/** A pino-shaped logger that throws on every line. */
const throwingLogger = {
  info: (): never => {
    throw new TelemetryBug('logger');
  },
  warn: (): never => {
    throw new TelemetryBug('logger');
  },
  error: (): never => {
    throw new TelemetryBug('logger');
  },
};

const CASES: readonly (readonly [string, () => ObservabilityOptions])[] = [
  ['a span processor throwing as retrysafe.complete starts', () => ({ tracerProvider: new BasicTracerProvider({ spanProcessors: [throwingProcessor('onStart', 'retrysafe.complete')] }) })],
  ['a span processor throwing as retrysafe.complete ends', () => ({ tracerProvider: new BasicTracerProvider({ spanProcessors: [throwingProcessor('onEnd', 'retrysafe.complete')] }) })],
  ['a span processor throwing as retrysafe.execute ends', () => ({ tracerProvider: new BasicTracerProvider({ spanProcessors: [throwingProcessor('onEnd', 'retrysafe.execute')] }) })],
  ['a span processor throwing as retrysafe.execute and retrysafe.claim start', () => ({ tracerProvider: new BasicTracerProvider({ spanProcessors: [throwingProcessor('onStart', 'retrysafe.execute'), throwingProcessor('onStart', 'retrysafe.claim')] }) })],
  ['a meter provider whose instruments throw', () => ({ meterProvider: throwingMeters() })],
  ['a logger that throws (with a shouldPersist that throws, so a line is written)', () => ({ logger: throwingLogger })],
];

describe('telemetry that throws (plain mode, memory store)', () => {
  // 'later' outlasts two keep-alive ticks (a third of the lease each), so its lease is renewed while it runs.
  describe.each([
    ['in the same turn', 0],
    ['later', LEASE_MS],
  ])('the work answering %s', (_when, workMs) => {
    it.each(CASES)('%s: answered as without it; the keep-alive lets go', async (name, observability) => {
      const { store, renewals } = renewalCountingStore();
      const receiver = createReceiver({ store, leaseMs: LEASE_MS, ...(name.startsWith('a logger') && { shouldPersist: throwingRule }), ...observability() });
      const id = { scope: 'throwing-telemetry', key: randomUUID(), fingerprint: FP };
      let runs = 0;
      const work = async (byte: number): Promise<StoredResponse> => {
        runs++;
        if (workMs > 0) await sleep(workMs);
        return { status: 201, headers: {}, body: Uint8Array.of(byte) };
      };

      const first = await receiver.execute(id, () => work(1));
      expect(first).toMatchObject({ replayed: false, saved: true, response: { status: 201 } });
      expect((await store.get(id.scope, id.key))?.state).toBe('completed');
      const ended = renewals();

      const retry = await receiver.execute(id, () => work(2));
      expect(retry.replayed).toBe(true);
      expect(Array.from(retry.response.body)).toEqual([1]);
      expect(runs).toBe(1);

      // Longer than the lease: a keep-alive still holding it would have renewed it twice or more.
      await sleep(LEASE_MS + 100);
      expect(renewals()).toBe(ended);
    });
  });

  it("a span processor's throw goes to the API's diag.error", async () => {
    const errors: unknown[][] = [];
    const quiet = (): void => undefined;
    const logger: DiagLogger = { error: (...args: unknown[]) => void errors.push(args), warn: quiet, info: quiet, debug: quiet, verbose: quiet };
    diag.setLogger(logger);
    try {
      const tracerProvider = new BasicTracerProvider({ spanProcessors: [throwingProcessor('onStart', 'retrysafe.complete')] });
      const receiver = createReceiver({ store: createMemoryStore(), tracerProvider });
      await receiver.execute({ scope: 'throwing-telemetry', key: randomUUID(), fingerprint: FP }, () => Promise.resolve({ status: 200, headers: {}, body: new Uint8Array() }));
      expect(errors).toEqual([['retrysafe: telemetry threw; ignored', expect.any(TelemetryBug)]]);
    } finally {
      diag.disable();
    }
  });
});
