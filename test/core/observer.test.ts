/**
 * What the engine reports to its observer (src/core/observer.ts), with no OpenTelemetry involved: the
 * core's own engine over a recording observer, one scripted request per outcome.
 */
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/core/clock.js';
import { IdempotencyKeyReusedError, LeaseLostError, StoreUnavailableError } from '../../src/core/errors.js';
import type { ReceiverObserver } from '../../src/core/observer.js';
import { createEngine } from '../../src/core/engine.js';
import { createMemoryStore } from '../../src/stores/memory.js';
import { instrument } from '../support/http.js';

/** An observer writing each report as one line. */
function recorder(): { observer: ReceiverObserver; lines: string[] } {
  const lines: string[] = [];
  const describe = (error: unknown): string => (error instanceof Error ? error.constructor.name : String(error));
  const observer: ReceiverObserver = {
    request(scope, key) {
      lines.push(`request ${scope}/${key}`);
      return {
        within: (fn) => fn(),
        workStarted: () => lines.push('work started'),
        workEnded: (threw) => lines.push(`work ended${threw ? ' (threw)' : ''}`),
        end: (outcome, error) => lines.push(`end ${outcome}${error === undefined ? '' : ` ${describe(error)}`}`),
      };
    },
    storeCall(operation) {
      return {
        end: (result) => lines.push(`${operation} → ${String(result)}`),
        fail: (error) => lines.push(`${operation} failed ${describe(error)}`),
      };
    },
    takeover: (scope, key) => lines.push(`takeover ${scope}/${key}`),
    completionAbandoned: (scope, key) => lines.push(`completion abandoned ${scope}/${key}`),
    shouldPersistThrew: (scope, key, error) => lines.push(`shouldPersist threw ${scope}/${key} ${describe(error)}`),
    invalidKey: () => lines.push('invalid key'),
  };
  return { observer, lines };
}

const id = (key: string, fingerprint = 'f1') => ({ scope: 's', key, fingerprint });

describe('the engine reports to its observer', () => {
  it('an execution, its replay and a reused key', async () => {
    const { observer, lines } = recorder();
    const engine = createEngine({ store: createMemoryStore() }, () => observer);
    await engine.run(id('k'), () => Promise.resolve(1));
    await engine.run(id('k'), () => Promise.resolve(2));
    await expect(engine.run(id('k', 'f2'), () => Promise.resolve(3))).rejects.toBeInstanceOf(IdempotencyKeyReusedError);
    expect(lines).toEqual([
      'request s/k',
      'claim → acquired',
      'work started',
      'work ended',
      'complete → true',
      'end executed',
      'request s/k',
      'claim → replay',
      'end replayed',
      'request s/k',
      'claim → mismatch',
      'end mismatch IdempotencyKeyReusedError',
    ]);
  });

  it('a work that throws, a takeover, a lost lease and a store that fails', async () => {
    const { observer, lines } = recorder();
    const clock = new ManualClock(0);
    const store = instrument(createMemoryStore({ clock }));
    const engine = createEngine({ store, clock, leaseMs: 1_000 }, () => observer);
    await expect(engine.run(id('boom'), () => Promise.reject(new RangeError('boom')))).rejects.toBeInstanceOf(RangeError);
    const late = engine.run(id('slow'), async () => {
      clock.advance(2_000);
      await engine.run(id('slow'), () => Promise.resolve('retry'));
      return 'late';
    });
    await expect(late).rejects.toBeInstanceOf(LeaseLostError);
    store.failClaims = true;
    await expect(engine.run(id('down'), () => Promise.resolve(0))).rejects.toBeInstanceOf(StoreUnavailableError);
    expect(lines).toEqual([
      'request s/boom',
      'claim → acquired',
      'work started',
      'work ended (threw)',
      'release → true',
      'end released_after_error RangeError',
      'request s/slow',
      'claim → acquired',
      'work started',
      'request s/slow',
      'claim → takeover',
      'takeover s/slow',
      'work started',
      'work ended',
      'complete → true',
      'end executed',
      'work ended',
      'complete → false',
      'end lease_lost LeaseLostError',
      'request s/down',
      'claim failed Error',
      'claim failed Error',
      'end store_unavailable StoreUnavailableError',
    ]);
  });

  it('a shouldPersist that throws: reported, then the response saved and the request ended executed', async () => {
    const { observer, lines } = recorder();
    const shouldPersist = (): boolean => {
      throw new SyntaxError('bug');
    };
    const engine = createEngine({ store: createMemoryStore(), shouldPersist }, () => observer);
    await engine.run(id('p'), () => Promise.resolve(1));
    expect(lines).toEqual(['request s/p', 'claim → acquired', 'work started', 'work ended', 'shouldPersist threw s/p SyntaxError', 'complete → true', 'end executed']);
  });

  it('reports nothing, and runs as usual, without an observer', async () => {
    const engine = createEngine({ store: createMemoryStore() });
    expect(await engine.run(id('k'), () => Promise.resolve(5))).toBe(5);
    expect(await engine.run(id('k'), () => Promise.resolve(6))).toBe(5);
    expect(() => engine.observer.invalidKey()).not.toThrow();
  });
});
