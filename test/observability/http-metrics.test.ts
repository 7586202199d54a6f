/**
 * One scripted scenario through every HTTP adapter (Express, Fastify, Hono, NestJS on both platforms), read back through the OpenTelemetry SDK's in-memory
 * metric reader and span exporter: each outcome counted once where it happened, the store operations and
 * handler runs timed, the in-flight gauge up while a handler runs and back to zero, the takeover counted,
 * and no idempotency key in any attribute.
 */
import { context } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import express from 'express';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/core/clock.js';
import { MAX_KEY_LENGTH } from '../../src/core/key.js';
import { createReceiver } from '../../src/receiver.js';
import { RECEIVER_INSTRUMENTS as I, RECEIVER_SPANS } from '../../src/index.js';
import { createSqliteStore } from '../../src/stores/sqlite/store.js';
import { expressDriver } from '../http/express-driver.js';
import { fastifyDriver } from '../http/fastify-driver.js';
import { honoDriver } from '../http/hono-driver.js';
import { nestDriver } from '../http/nestjs-driver.js';
import { gate, instrument, type Driver, type HandlerReply, type TestClient } from '../support/http.js';
import { telemetry, type Telemetry } from '../support/telemetry.js';

const contextManager = new AsyncLocalStorageContextManager();
beforeAll(() => {
  context.setGlobalContextManager(contextManager.enable());
});
afterAll(() => {
  context.disable();
});

const KEYS = ['k-first', 'k-fail', 'k-held', 'k-down', 'k-slow'];

for (const driver of [expressDriver('express', express), fastifyDriver, honoDriver, nestDriver('express'), nestDriver('fastify')] satisfies Driver[]) {
  describe(`${driver.name}: receiver metrics and spans`, () => {
    let t: Telemetry;
    let client: TestClient | undefined;
    let release = (): void => undefined;
    let closeStore = (): Promise<void> => Promise.resolve();
    afterEach(async () => {
      release();
      await client?.close();
      await closeStore();
      await t.shutdown();
    });

    it('counts each outcome of a scripted scenario once, times store and handler, and traces each request', async () => {
      t = telemetry();
      const clock = new ManualClock(1_000_000);
      // A store that does I/O, so its calls are timed (the memory store's are not).
      const store = instrument(createSqliteStore({ clock }));
      closeStore = () => store.close();
      const receiver = createReceiver({
        store,
        clock,
        leaseMs: 1_000,
        meterProvider: t.meterProvider,
        tracerProvider: t.tracerProvider,
      });
      const held = gate();
      const heldStarted = gate();
      const slowTakenOver = gate();
      const slowStarted = gate();
      release = () => {
        held.open();
        slowTakenOver.open();
      };
      let slowRuns = 0;
      // One route for every framework driver; the behaviour is picked by the key.
      client = await driver.start({ receiver }, async ({ idempotency }): Promise<HandlerReply> => {
        const key = idempotency?.key;
        if (key === 'k-fail') throw new Error('handler failed');
        if (key === 'k-held') {
          heldStarted.open();
          await held.promise;
        }
        if (key === 'k-slow' && ++slowRuns === 1) {
          // Outrun the lease, then let a retry take the key over before finishing.
          clock.advance(2_000);
          slowStarted.open();
          await slowTakenOver.promise;
        }
        return { status: 201, headers: { 'content-type': 'text/plain' }, body: `done ${String(key)}` };
      });
      const post = (key: string | undefined, body = 'a') =>
        client!.request({ method: 'POST', path: '/payments', headers: { 'content-type': 'text/plain', ...(key !== undefined && { 'idempotency-key': key }) }, body });

      expect((await post('k-first')).status).toBe(201);
      expect((await post('k-first')).header('idempotent-replayed')).toBe('true');
      expect((await post('k-first', 'b')).status).toBe(422);
      expect((await post('x'.repeat(MAX_KEY_LENGTH + 1))).status).toBe(400);
      expect((await post(undefined)).status).toBe(400);
      expect((await post('k-fail')).status).toBe(500);

      const first = post('k-held');
      await heldStarted.promise;
      expect(await t.sum(I.inFlight)).toBe(1);
      expect((await post('k-held')).status).toBe(409);
      held.open();
      expect((await first).status).toBe(201);
      expect(await t.sum(I.inFlight)).toBe(0);

      store.failClaims = true;
      expect((await post('k-down')).status).toBe(503);
      store.failClaims = false;

      const slow = post('k-slow');
      await slowStarted.promise;
      const retry = await post('k-slow');
      expect(retry.status).toBe(201);
      slowTakenOver.open();
      expect((await slow).status).toBe(409);

      // Express cannot tell a thrown handler from its error handler's 500: the receiver sees a response.
      const failedAs = driver.detectsThrows ? 'released_after_error' : 'executed';
      const expected: Record<string, number> = {
        executed: 3,
        replayed: 1,
        mismatch: 1,
        invalid_key: 2,
        in_flight_rejected: 1,
        store_unavailable: 1,
        lease_lost: 1,
        released_after_error: 0,
        waited: 0,
      };
      expected[failedAs] = (expected[failedAs] ?? 0) + 1;
      for (const [outcome, count] of Object.entries(expected)) {
        expect(await t.sum(I.requests, { outcome }), outcome).toBe(count);
      }
      expect(await t.sum(I.takeovers)).toBe(1);
      expect(await t.sum(I.inFlight)).toBe(0);
      // Handler runs: k-first, k-fail, k-held, k-slow twice.
      expect(await t.count(I.handlerDuration)).toBe(5);
      // k-down's claim is tried twice: a claim whose reply was lost may have committed, so the receiver
      // claims once more with the same owner token before answering 503.
      expect(await t.count(I.storeDuration, { operation: 'claim', store: 'sqlite' })).toBe(10);
      expect(await t.count(I.storeDuration, { operation: 'claim', error: true })).toBe(2);
      // Saved: k-first, k-held, the retry of k-slow, and the fenced-off attempt of the original.
      expect(await t.count(I.storeDuration, { operation: 'complete' })).toBe(4);
      expect(await t.count(I.storeDuration, { operation: 'release' })).toBe(1);

      const metrics = await t.metrics();
      expect(metrics.get(I.requests)?.descriptor.unit).toBe('{request}');
      expect(metrics.get(I.handlerDuration)?.descriptor.unit).toBe('s');
      expect(metrics.get(I.storeDuration)?.descriptor.unit).toBe('s');
      const attributeValues = [...metrics.values()].flatMap((m) => m.dataPoints.flatMap((p) => Object.values(p.attributes)));

      const spans = t.spans.getFinishedSpans();
      const executes = spans.filter((s) => s.name === RECEIVER_SPANS.execute);
      const outcomes = executes.map((s) => String(s.attributes['retrysafe.outcome'])).sort();
      const fromCounter = Object.entries(expected)
        .filter(([outcome]) => outcome !== 'invalid_key')
        .flatMap(([outcome, count]) => Array<string>(count).fill(outcome))
        .sort();
      expect(outcomes).toEqual(fromCounter);
      const executeIds = new Set(executes.map((s) => s.spanContext().spanId));
      const claims = spans.filter((s) => s.name === RECEIVER_SPANS.claim);
      expect(claims).toHaveLength(10); // the nine requests that reach the store, and k-down's second try
      for (const claim of claims) expect(executeIds.has(claim.parentSpanContext?.spanId ?? '')).toBe(true);
      expect(claims.map((s) => s.attributes['retrysafe.claim.result']).filter((r) => r === 'replay')).toHaveLength(1);
      expect(claims.filter((s) => s.attributes['retrysafe.takeover'] === true)).toHaveLength(1);
      const completes = spans.filter((s) => s.name === RECEIVER_SPANS.complete);
      expect(completes.filter((s) => s.attributes['retrysafe.saved'] === false)).toHaveLength(1);

      const everyValue = [...attributeValues, ...spans.flatMap((s) => Object.values(s.attributes))].map(String);
      for (const key of KEYS) expect(everyValue.some((value) => value.includes(key))).toBe(false);
    });
  });
}
