/**
 * The session receiver's metrics for a scripted scenario that reaches every outcome of `apply`, with the
 * OpenTelemetry SDK's in-memory reader: requests by outcome, handler durations, takeovers, registrations
 * and reaped sessions.
 */
import { metrics } from '@opentelemetry/api';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/core/clock.js';
import { StoreUnavailableError } from '../../src/core/errors.js';
import {
  createMemorySessionStore,
  createSessionReceiver,
  SESSION_INSTRUMENTS as I,
  SessionExpiredError,
  SessionLeaseLostError,
  SessionRequestInProgressError,
  SessionRequestInvalidError,
  SessionUnknownError,
  StaleRequestError,
  type SessionStore,
} from '../../src/sessions/index.js';
import { gate } from '../support/http.js';
import { telemetry, type Telemetry } from '../support/telemetry.js';

describe('session receiver metrics', () => {
  let t: Telemetry;
  beforeEach(() => {
    t = telemetry();
  });
  afterEach(async () => {
    await t.shutdown();
  });

  /** A store whose `begin` or `complete` fails while the flag is set. */
  function flakyStore(): { store: SessionStore; fail: { begin: boolean; complete: boolean } } {
    const inner = createMemorySessionStore();
    const fail = { begin: false, complete: false };
    const store: SessionStore = Object.assign(Object.create(inner) as SessionStore, {
      begin: (input: Parameters<SessionStore['begin']>[0]) => (fail.begin ? Promise.reject(new Error('store down')) : inner.begin(input)),
      complete: (...args: Parameters<SessionStore['complete']>) => (fail.complete ? Promise.reject(new Error('store down')) : inner.complete(...args)),
    });
    return { store, fail };
  }

  it('counts every outcome of apply, times the work, and counts takeovers, registrations and reaped sessions', async () => {
    const clock = new ManualClock(1_000_000);
    const { store, fail } = flakyStore();
    const receiver = createSessionReceiver({ store, clock, leaseMs: 60_000, executionLeaseMs: 1_000, meterProvider: t.meterProvider });
    const clientId = await receiver.register();
    const request = (requestNumber: number, lowWaterMark = 0) => ({ clientId, requestNumber, lowWaterMark });

    expect(await receiver.apply(request(1), () => Promise.resolve('a'))).toEqual({ value: 'a', replayed: false, saved: true });
    expect((await receiver.apply(request(1), () => Promise.resolve('again'))).replayed).toBe(true);
    await receiver.apply(request(2, 1), () => Promise.resolve('b'));
    await expect(receiver.apply(request(1), () => Promise.resolve('late'))).rejects.toBeInstanceOf(StaleRequestError);

    const held = gate();
    const started = gate();
    const holder = receiver.apply(request(3, 2), async () => {
      started.open();
      await held.promise;
      return 'c';
    });
    await started.promise;
    await expect(receiver.apply(request(3, 2), () => Promise.resolve('dup'))).rejects.toBeInstanceOf(SessionRequestInProgressError);
    held.open();
    await holder;

    // The work outruns its execution lease; a retry takes the number over and the first hold is fenced off.
    const slow = receiver.apply(request(4, 3), async () => {
      clock.advance(2_000);
      await receiver.apply(request(4, 3), () => Promise.resolve('retry'));
      return 'slow';
    });
    await expect(slow).rejects.toBeInstanceOf(SessionLeaseLostError);

    await expect(receiver.apply(request(5, 4), () => Promise.reject(new Error('boom')))).rejects.toThrow('boom');
    // A work that calls another receiver and fails with its error is still the work's own throw.
    await expect(receiver.apply(request(5, 4), () => Promise.reject(new StoreUnavailableError(new Error('inner'))))).rejects.toBeInstanceOf(StoreUnavailableError);
    await expect(receiver.apply(request(0), () => Promise.resolve(0))).rejects.toBeInstanceOf(SessionRequestInvalidError);
    await expect(receiver.apply({ clientId: 'nobody', requestNumber: 1, lowWaterMark: 0 }, () => Promise.resolve(0))).rejects.toBeInstanceOf(SessionUnknownError);
    await expect(receiver.apply(request(6, 4), () => Promise.resolve(10n))).rejects.toThrow(/BigInt/);

    fail.complete = true;
    expect(await receiver.apply(request(7, 4), () => Promise.resolve('unsaved'))).toEqual({ value: 'unsaved', replayed: false, saved: false });
    fail.complete = false;
    fail.begin = true;
    await expect(receiver.apply(request(8, 4), () => Promise.resolve(0))).rejects.toBeInstanceOf(StoreUnavailableError);
    fail.begin = false;

    clock.advance(120_000);
    await expect(receiver.apply(request(9, 4), () => Promise.resolve(0))).rejects.toBeInstanceOf(SessionExpiredError);
    expect(await receiver.reap()).toBe(1);

    const requests = async (outcome: string) => t.sum(I.requests, { outcome });
    expect({
      executed: await requests('executed'),
      replayed: await requests('replayed'),
      not_saved: await requests('not_saved'),
      stale: await requests('stale'),
      in_flight_rejected: await requests('in_flight_rejected'),
      lease_lost: await requests('lease_lost'),
      released_after_error: await requests('released_after_error'),
      session_unknown: await requests('session_unknown'),
      session_expired: await requests('session_expired'),
      invalid_request: await requests('invalid_request'),
      store_unavailable: await requests('store_unavailable'),
      error: await requests('error'),
    }).toEqual({
      // 1, 2, 3 and the retry that took 4 over.
      executed: 4,
      replayed: 1,
      not_saved: 1,
      stale: 1,
      in_flight_rejected: 1,
      lease_lost: 1,
      released_after_error: 2,
      session_unknown: 1,
      session_expired: 1,
      invalid_request: 1,
      store_unavailable: 1,
      error: 1,
    });
    // Works that returned: 1, 2, 3, 4 (twice), 6 (its value could not be encoded), 7; works that threw: 5 (twice).
    expect(await t.count(I.handlerDuration, { outcome: 'executed' })).toBe(7);
    expect(await t.count(I.handlerDuration, { outcome: 'released_after_error' })).toBe(2);
    expect(await t.sum(I.takeovers)).toBe(1);
    expect(await t.sum(I.registered)).toBe(1);
    expect(await t.sum(I.reaped)).toBe(1);
    const metrics = await t.metrics();
    expect(Object.values(I).map((name) => metrics.get(name)?.descriptor.unit)).toEqual(['{request}', 's', '{takeover}', '{session}', '{session}']);
  });

  it('records to a global meter provider registered after it served requests, from the next call on', async () => {
    const receiver = createSessionReceiver({ store: createMemorySessionStore() });
    const clientId = await receiver.register();
    await receiver.apply({ clientId, requestNumber: 1, lowWaterMark: 0 }, () => Promise.resolve('before'));
    metrics.setGlobalMeterProvider(t.meterProvider);
    try {
      await receiver.apply({ clientId, requestNumber: 2, lowWaterMark: 1 }, () => Promise.resolve('after'));
      await receiver.register();
      expect(await t.sum(I.requests, { outcome: 'executed' })).toBe(1);
      expect(await t.count(I.handlerDuration, { outcome: 'executed' })).toBe(1);
      expect(await t.sum(I.registered)).toBe(1);
    } finally {
      metrics.disable();
    }
  });
});
