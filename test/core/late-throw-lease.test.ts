/**
 * An observer that throws once the claim is won (breaking its contract: it may call user code) never
 * leaves the lease kept alive: plain mode's keep-alive lets go, the request ends with the throw, and the
 * key is left as a crash would leave it. A record still in progress has its lease run out, and a retry
 * after `leaseMs` takes it over and runs the work; a record already completed is replayed. Each spot where
 * the engine calls the observer between the won claim and the end of the keep-alive, the work answering in
 * the same turn and later, on the memory store.
 */
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { createEngine } from '../../src/core/engine.js';
import type { Observation, ReceiverObserver, StoreCallObservation, StoreOperation } from '../../src/core/observer.js';
import type { StoredResponse } from '../../src/core/record.js';
import { renewalCountingStore, sleep } from '../support/renewal-counting-store.js';

const FP = 'e'.repeat(64);
const LEASE_MS = 300;

/** Where the observer throws. */
type Spot = 'workStarted' | 'workEnded' | 'completeStarted' | 'completeEnded' | 'completeFailed' | 'shouldPersistThrew' | 'completionAbandoned';

class ObserverBug extends Error {}

/** A persistence rule that throws, so the engine reports `shouldPersistThrew`. */
function throwingRule(): boolean {
  throw new RangeError('shouldPersist bug');
}

/** An observer silent but for one throw, at `spot`. */
function throwingAt(spot: Spot): ReceiverObserver {
  const at = (where: Spot): void => {
    if (where === spot) throw new ObserverBug(`observer threw at ${spot}`);
  };
  const request: Observation = {
    within: (fn) => fn(),
    workStarted: () => at('workStarted'),
    workEnded: (threw) => (threw ? undefined : at('workEnded')),
    end: () => undefined,
  };
  const call = (operation: StoreOperation): StoreCallObservation => ({
    end: () => (operation === 'complete' ? at('completeEnded') : undefined),
    fail: () => (operation === 'complete' ? at('completeFailed') : undefined),
  });
  return {
    request: () => request,
    storeCall: (operation) => {
      if (operation === 'complete') at('completeStarted');
      return call(operation);
    },
    takeover: () => undefined,
    completionAbandoned: () => at('completionAbandoned'),
    shouldPersistThrew: () => at('shouldPersistThrew'),
    invalidKey: () => undefined,
  };
}

/** Each spot, with what the first attempt left: the record completed (replayed) or in progress (taken over after its lease). */
const SPOTS: readonly (readonly [Spot, 'completed' | 'in_progress'])[] = [
  ['workStarted', 'in_progress'],
  ['workEnded', 'in_progress'],
  ['completeStarted', 'in_progress'],
  ['completeEnded', 'completed'],
  ['completeFailed', 'in_progress'],
  ['shouldPersistThrew', 'in_progress'],
  ['completionAbandoned', 'in_progress'],
];

describe('an observer that throws after the claim is won (plain mode, memory store)', () => {
  describe.each([
    ['in the same turn', 0],
    ['later', 20],
  ])('the work answering %s', (_when, workMs) => {
    it.each(SPOTS)('at %s: the keep-alive lets go, the request ends with the throw, the key is left as by a crash', async (spot, left) => {
      const failing = { completes: spot === 'completeFailed' ? 1 : spot === 'completionAbandoned' ? Number.POSITIVE_INFINITY : 0 };
      const { store, renewals } = renewalCountingStore(failing);
      const receiver = createEngine({
        store,
        leaseMs: LEASE_MS,
        completionRetryMs: 200,
        ...(spot === 'shouldPersistThrew' && { shouldPersist: throwingRule }),
      }, () => throwingAt(spot));
      const id = { scope: 'late-throw', key: randomUUID(), fingerprint: FP };
      let runs = 0;
      const work = async (byte: number): Promise<StoredResponse> => {
        runs++;
        if (workMs > 0) await sleep(workMs);
        return { status: 201, headers: {}, body: Uint8Array.of(byte) };
      };

      await expect(receiver.execute(id, () => work(1))).rejects.toBeInstanceOf(ObserverBug);
      const ended = renewals();
      const record = await store.get(id.scope, id.key);
      expect(record?.state).toBe(left);

      // Longer than the lease: a keep-alive still holding it would have renewed it twice or more.
      await sleep(LEASE_MS + 100);
      expect(renewals()).toBe(ended);
      failing.completes = 0;
      const retry = createEngine({ store, leaseMs: LEASE_MS });
      const second = await retry.execute(id, () => work(2));
      if (left === 'completed') {
        expect(second.replayed).toBe(true);
        expect(Array.from(second.response.body)).toEqual([1]);
        expect(runs).toBe(1);
      } else {
        // The lease ran out: the retry took over and ran the work (the first run, if any, is not known to have taken effect).
        expect(second).toMatchObject({ replayed: false, saved: true });
        expect(runs).toBe(spot === 'workStarted' ? 1 : 2);
      }
      expect((await store.get(id.scope, id.key))?.state).toBe('completed');
    });
  });
});
