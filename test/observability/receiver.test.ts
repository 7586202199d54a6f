/**
 * The function API's observability: spans under the caller's active span, the `waited` outcome, the scope
 * allow-list, and the logger hook writing through a real pino instance with keys hashed.
 */
import { readFileSync } from 'node:fs';
import { context, metrics, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/core/clock.js';
import { IdempotencyKeyReusedError, LeaseLostError, StoreUnavailableError } from '../../src/core/errors.js';
import { createReceiver } from '../../src/receiver.js';
import { INSTRUMENTATION_SCOPE, keyHash, RECEIVER_INSTRUMENTS as I, RECEIVER_SPANS } from '../../src/index.js';
import { INSTRUMENTATION_VERSION } from '../../src/observability/scope.js';
import { createMemoryStore } from '../../src/stores/memory.js';
import { createSqliteStore } from '../../src/stores/sqlite/store.js';
import { gate, instrument } from '../support/http.js';
import { capturingLogger, telemetry, type Telemetry } from '../support/telemetry.js';

beforeAll(() => {
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
});
afterAll(() => {
  context.disable();
});

const id = (key: string, fingerprint = 'f1', scope = 'tenant-a') => ({ scope, key, fingerprint });

describe('receiver observability (function API)', () => {
  let t: Telemetry;
  afterEach(async () => {
    await t.shutdown();
  });

  it('nests its spans under the caller’s active span and reports the outcome on the request span', async () => {
    t = telemetry();
    const receiver = createReceiver({ store: createMemoryStore(), tracerProvider: t.tracerProvider, meterProvider: t.meterProvider });
    const tracer = t.tracerProvider.getTracer('test');
    await tracer.startActiveSpan('POST /jobs', async (parent) => {
      await receiver.run(id('job-1'), () => {
        tracer.startSpan('inside the work').end();
        return Promise.resolve({ ok: true });
      });
      await receiver.run(id('job-1'), () => Promise.resolve({ ok: false }));
      parent.end();
    });
    const spans = t.spans.getFinishedSpans();
    const parent = spans.find((s) => s.name === 'POST /jobs');
    const executes = spans.filter((s) => s.name === RECEIVER_SPANS.execute);
    expect(executes.map((s) => s.attributes['retrysafe.outcome'])).toEqual(['executed', 'replayed']);
    for (const execute of executes) expect(execute.parentSpanContext?.spanId).toBe(parent?.spanContext().spanId);
    const inside = spans.find((s) => s.name === 'inside the work');
    expect(inside?.parentSpanContext?.spanId).toBe(executes[0]?.spanContext().spanId);
    expect(executes.every((s) => s.instrumentationScope.name === INSTRUMENTATION_SCOPE)).toBe(true);
    const version = (JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }).version;
    expect(INSTRUMENTATION_VERSION).toBe(version);
  });

  it('counts a duplicate that waited for the original as waited, and records the scope only when allow-listed', async () => {
    t = telemetry();
    const receiver = createReceiver({
      store: createMemoryStore(),
      inFlight: 'wait',
      meterProvider: t.meterProvider,
      metricScopes: ['tenant-a'],
    });
    const held = gate();
    const started = gate();
    const original = receiver.run(id('w-1'), async () => {
      started.open();
      await held.promise;
      return 1;
    });
    await started.promise;
    const duplicate = receiver.run(id('w-1'), () => Promise.resolve(2));
    held.open();
    expect(await Promise.all([original, duplicate])).toEqual([1, 1]);
    await receiver.run(id('w-2', 'f1', 'tenant-b'), () => Promise.resolve(3));
    expect(await t.sum(I.requests, { outcome: 'waited', 'retrysafe.scope': 'tenant-a' })).toBe(1);
    expect(await t.sum(I.requests, { outcome: 'executed', 'retrysafe.scope': 'tenant-a' })).toBe(1);
    const metric = (await t.metrics()).get(I.requests);
    const tenantB = metric?.dataPoints.filter((p) => p.attributes['outcome'] === 'executed' && p.attributes['retrysafe.scope'] === undefined);
    expect(tenantB?.map((p) => p.value)).toEqual([1]);
    expect(metric?.dataPoints.some((p) => p.attributes['retrysafe.scope'] === 'tenant-b')).toBe(false);
  });

  it('logs mismatch, takeover, lease lost and store unavailable through pino, with the key hashed', async () => {
    t = telemetry();
    const { logger, lines, raw } = capturingLogger();
    const clock = new ManualClock(0);
    const store = instrument(createMemoryStore({ clock }));
    const receiver = createReceiver({ store, clock, leaseMs: 1_000, logger, meterProvider: t.meterProvider });
    const secret = 'customer-4711-card-4242';

    await receiver.run(id(secret), () => Promise.resolve('ok'));
    await expect(receiver.run(id(secret, 'other'), () => Promise.resolve('no'))).rejects.toBeInstanceOf(IdempotencyKeyReusedError);

    const slow = receiver.run(id(`${secret}-slow`), async () => {
      clock.advance(2_000);
      await receiver.run(id(`${secret}-slow`), () => Promise.resolve('retry'));
      return 'late';
    });
    await expect(slow).rejects.toBeInstanceOf(LeaseLostError);

    store.failClaims = true;
    await expect(receiver.run(id('down'), () => Promise.resolve(0))).rejects.toBeInstanceOf(StoreUnavailableError);

    expect(lines.map((l) => [l['event'], l['level']])).toEqual([
      ['mismatch', 40],
      ['takeover', 40],
      ['lease_lost', 40],
      ['store_unavailable', 50],
    ]);
    expect(lines[0]?.['keyHash']).toBe(keyHash('tenant-a', secret));
    expect(lines[0]?.['keyHash']).toMatch(/^[0-9a-f]{16}$/);
    expect(lines[2]?.['keyHash']).toBe(keyHash('tenant-a', `${secret}-slow`));
    expect(lines.every((l) => typeof l['msg'] === 'string' && l['store'] === 'memory')).toBe(true);
    expect(raw.join('').includes(secret)).toBe(false);
    expect(await t.sum(I.takeovers)).toBe(1);
  });

  it('keeps its outcome when the logger throws', async () => {
    t = telemetry();
    const logger = { info: () => undefined, warn: () => { throw new Error('log sink down'); }, error: () => undefined };
    const receiver = createReceiver({ store: createMemoryStore(), logger, meterProvider: t.meterProvider });
    await receiver.run(id('k'), () => Promise.resolve(1));
    await expect(receiver.run(id('k', 'other'), () => Promise.resolve(2))).rejects.toBeInstanceOf(IdempotencyKeyReusedError);
    expect(await t.sum(I.requests, { outcome: 'mismatch' })).toBe(1);
  });

  it('times the calls of a store that does I/O, and not the memory store’s', async () => {
    t = telemetry();
    const sqlite = createSqliteStore();
    try {
      const timed = createReceiver({ store: sqlite, meterProvider: t.meterProvider });
      const untimed = createReceiver({ store: createMemoryStore(), meterProvider: t.meterProvider });
      for (const receiver of [timed, untimed]) {
        expect(await receiver.run(id('k'), () => Promise.resolve(1))).toBe(1);
        expect(await receiver.run(id('k'), () => Promise.resolve(2))).toBe(1);
      }
      expect(await t.count(I.storeDuration, { operation: 'claim', store: 'sqlite' })).toBe(2);
      expect(await t.count(I.storeDuration, { operation: 'complete', store: 'sqlite' })).toBe(1);
      expect(await t.count(I.storeDuration, { store: 'memory' })).toBe(0);
      // Both receivers' requests are counted and their handlers timed.
      expect(await t.sum(I.requests, { outcome: 'executed' })).toBe(2);
      expect(await t.sum(I.requests, { outcome: 'replayed' })).toBe(2);
      expect(await t.count(I.handlerDuration, { outcome: 'executed' })).toBe(2);
    } finally {
      await sqlite.close();
    }
  });

  it('records nothing and still works with no SDK registered (the API’s no-op)', async () => {
    t = telemetry();
    const receiver = createReceiver({ store: createMemoryStore() });
    expect(await receiver.run(id('k'), () => Promise.resolve(5))).toBe(5);
    expect(trace.getActiveSpan()).toBeUndefined();
    expect(await t.sum(I.requests)).toBe(0);
  });

  it('records to a global meter provider registered after it served requests, from the next request on', async () => {
    t = telemetry();
    // Every receiver that follows the global provider shares one tally; a scope of its own keeps this
    // test's counts apart from the other tests' receivers.
    const scope = 'late-provider';
    const options = { store: createMemoryStore(), metricScopes: [scope] };
    const first = createReceiver(options);
    const second = createReceiver({ ...options, store: createMemoryStore() });
    expect(await first.run(id('before', 'f1', scope), () => Promise.resolve(1))).toBe(1);
    metrics.setGlobalMeterProvider(t.meterProvider);
    try {
      expect(await first.run(id('after', 'f1', scope), () => Promise.resolve(2))).toBe(2);
      expect(await first.run(id('after', 'f1', scope), () => Promise.resolve(3))).toBe(2);
      expect(await second.run(id('after', 'f1', scope), () => Promise.resolve(4))).toBe(4);
      // Counts are kept since the receivers were made: the request served before the SDK is counted too,
      // and the two receivers' counts add up rather than one hiding the other's.
      expect(await t.sum(I.requests, { outcome: 'executed', 'retrysafe.scope': scope })).toBe(3);
      expect(await t.sum(I.requests, { outcome: 'replayed', 'retrysafe.scope': scope })).toBe(1);
      // Durations are recorded from the first request that started with the SDK registered.
      expect(await t.count(I.handlerDuration, { outcome: 'executed', 'retrysafe.scope': scope })).toBe(2);
    } finally {
      metrics.disable();
    }
  });
});
