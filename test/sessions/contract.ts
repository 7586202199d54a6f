/**
 * The session receiver and client, run once per {@link SessionStore}: every store must give the same
 * answers. Time is a ManualClock; "lost replies" are sends whose work ran but whose answer is thrown away.
 */
import fc from 'fast-check';
import { afterEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/core/clock.js';
import { StoreUnavailableError } from '../../src/core/errors.js';
import {
  createSessionReceiver,
  SessionClient,
  SessionExpiredError,
  SessionLeaseLostError,
  SessionRequestInProgressError,
  SessionRequestInvalidError,
  SessionUnknownError,
  StaleRequestError,
  type SessionReceiver,
  type SessionReceiverOptions,
  type SessionRequest,
  type SessionStore,
} from '../../src/sessions/index.js';

const LEASE_MS = 10_000;
const EXECUTION_LEASE_MS = 1_000;
/**
 * Requests of the bounded-memory tests: far more than any bound they assert (1 stored response, or twice a
 * window of 8), so a store that keeps anything per request fails them, yet few enough that the round trips
 * to a real server fit the test timeout on a loaded machine (10,000 took 10 to 14 s each on PostgreSQL).
 */
const BOUNDED_REQUESTS = 1_000;

/** The store's methods bound to it, to wrap some of them. */
function bindAll(store: SessionStore): SessionStore {
  return {
    create: store.create.bind(store),
    begin: store.begin.bind(store),
    complete: store.complete.bind(store),
    release: store.release.bind(store),
    keepAlive: store.keepAlive.bind(store),
    end: store.end.bind(store),
    reap: store.reap.bind(store),
    stats: store.stats.bind(store),
    ...(store.listSessions && { listSessions: store.listSessions.bind(store) }),
    close: store.close.bind(store),
  };
}

/** A promise and its resolver, to hold work open. */
function gate(): { promise: Promise<void>; open: () => void } {
  let open = (): void => undefined;
  const promise = new Promise<void>((resolve) => (open = resolve));
  return { promise, open };
}

export function sessionSuite(name: string, makeStore: () => SessionStore): void {
  describe(`sessions on ${name}`, () => {
    const opened: SessionStore[] = [];
    afterEach(async () => {
      await Promise.all(opened.splice(0).map((store) => store.close()));
    });

    function setup(options: Partial<SessionReceiverOptions> = {}): { receiver: SessionReceiver; clock: ManualClock; store: SessionStore } {
      const store = makeStore();
      opened.push(store);
      const clock = new ManualClock(1_000_000);
      const receiver = createSessionReceiver({ store, clock, leaseMs: LEASE_MS, executionLeaseMs: EXECUTION_LEASE_MS, ...options });
      return { receiver, clock, store };
    }

    /** A unit of work that counts its executions per request number. */
    function counter(): { effects: Map<number, number>; work: (n: number) => () => Promise<string> } {
      const effects = new Map<number, number>();
      return {
        effects,
        work: (n) => () => {
          effects.set(n, (effects.get(n) ?? 0) + 1);
          return Promise.resolve(`result-${n}`);
        },
      };
    }

    it('registers distinct client ids and skips an id the store already holds', async () => {
      const ids = ['a', 'a', 'b'];
      const { receiver } = setup({ generateId: () => ids.shift() ?? 'token' });
      expect(await receiver.register()).toBe('a');
      expect(await receiver.register()).toBe('b');
      const stuck = setup({ generateId: () => 'same' }).receiver;
      await stuck.register();
      await expect(stuck.register()).rejects.toBeInstanceOf(StoreUnavailableError);
    });

    it('applies a request once and replays its saved response to retries', async () => {
      const { receiver } = setup();
      const { effects, work } = counter();
      const clientId = await receiver.register();
      const request = { clientId, requestNumber: 1, lowWaterMark: 0 };
      expect(await receiver.apply(request, work(1))).toEqual({ value: 'result-1', replayed: false, saved: true });
      expect(await receiver.apply(request, work(1))).toEqual({ value: 'result-1', replayed: true, saved: true });
      expect(await receiver.apply(request, work(1))).toEqual({ value: 'result-1', replayed: true, saved: true });
      expect(effects.get(1)).toBe(1);
      expect(await receiver.stats(clientId)).toMatchObject({ storedResponses: 1, inProgress: 0, lowWaterMark: 0 });
    });

    it('round-trips structured values through JSON, undefined included', async () => {
      const { receiver } = setup();
      const clientId = await receiver.register();
      const value = { id: 7, tags: ['a'], nested: { ok: true } };
      const first = await receiver.apply({ clientId, requestNumber: 1, lowWaterMark: 0 }, () => Promise.resolve(value));
      const again = await receiver.apply({ clientId, requestNumber: 1, lowWaterMark: 0 }, () => Promise.resolve({}));
      expect(first.value).toEqual(value);
      expect(again.value).toEqual(value);
      const nothing = await receiver.apply({ clientId, requestNumber: 2, lowWaterMark: 0 }, () => Promise.resolve(undefined));
      expect(nothing.value).toBeUndefined();
      expect((await receiver.apply({ clientId, requestNumber: 2, lowWaterMark: 0 }, () => Promise.resolve(1))).value).toBeUndefined();
    });

    it('runs N parallel duplicates of one request exactly once', async () => {
      const { receiver } = setup();
      const clientId = await receiver.register();
      const held = gate();
      let executions = 0;
      const request = { clientId, requestNumber: 1, lowWaterMark: 0 };
      const settled = Promise.allSettled(
        Array.from({ length: 20 }, () =>
          receiver.apply(request, async () => {
            executions++;
            await held.promise;
            return 'once';
          }),
        ),
      );
      await new Promise((resolve) => setImmediate(resolve));
      held.open();
      const outcomes = await settled;
      expect(executions).toBe(1);
      expect(outcomes.filter((o) => o.status === 'fulfilled').map((o) => o.value)).toEqual([{ value: 'once', replayed: false, saved: true }]);
      for (const o of outcomes.filter((o) => o.status === 'rejected')) {
        expect(o.reason).toBeInstanceOf(SessionRequestInProgressError);
      }
      expect(await receiver.apply(request, () => Promise.resolve('again'))).toEqual({ value: 'once', replayed: true, saved: true });
      expect(executions).toBe(1);
    });

    it('applies out-of-order request numbers each once', async () => {
      const { receiver } = setup();
      const { effects, work } = counter();
      const clientId = await receiver.register();
      const order = [5, 3, 1, 4, 2, 3, 5, 1];
      const values = [];
      for (const n of order) values.push((await receiver.apply({ clientId, requestNumber: n, lowWaterMark: 0 }, work(n))).value);
      expect(values).toEqual(order.map((n) => `result-${n}`));
      expect([...effects.entries()].sort(([a], [b]) => a - b)).toEqual([1, 2, 3, 4, 5].map((n) => [n, 1]));
      expect(await receiver.stats(clientId)).toMatchObject({ storedResponses: 5 });
    });

    it('discards responses at or below the low-water mark and refuses their late duplicates as stale', async () => {
      const { receiver } = setup();
      const { effects, work } = counter();
      const clientId = await receiver.register();
      for (const n of [1, 2, 3]) await receiver.apply({ clientId, requestNumber: n, lowWaterMark: n - 1 }, work(n));
      // Request 3 carried low-water mark 2: responses 1 and 2 are gone, 3 is kept.
      expect(await receiver.stats(clientId)).toMatchObject({ storedResponses: 1, lowWaterMark: 2 });
      for (const n of [1, 2]) {
        const refused = receiver.apply({ clientId, requestNumber: n, lowWaterMark: 0 }, work(n));
        await expect(refused).rejects.toBeInstanceOf(StaleRequestError);
        await expect(refused).rejects.toMatchObject({ requestNumber: n, lowWaterMark: 2, code: 'session-request-stale' });
      }
      expect(effects.get(1)).toBe(1);
      expect(effects.get(2)).toBe(1);
      // A lower low-water mark on a late request never lowers the session's.
      await receiver.apply({ clientId, requestNumber: 4, lowWaterMark: 1 }, work(4));
      expect(await receiver.stats(clientId)).toMatchObject({ lowWaterMark: 2, storedResponses: 2 });
      await receiver.keepAlive(clientId, 4);
      expect(await receiver.stats(clientId)).toMatchObject({ lowWaterMark: 4, storedResponses: 0 });
      await expect(receiver.apply({ clientId, requestNumber: 4, lowWaterMark: 3 }, work(4))).rejects.toBeInstanceOf(StaleRequestError);
      expect(effects.get(4)).toBe(1);
    });

    it('refuses an unknown session and never creates it', async () => {
      const { receiver } = setup();
      const { effects, work } = counter();
      const request = { clientId: 'never-registered', requestNumber: 1, lowWaterMark: 0 };
      await expect(receiver.apply(request, work(1))).rejects.toBeInstanceOf(SessionUnknownError);
      await expect(receiver.keepAlive('never-registered')).rejects.toBeInstanceOf(SessionUnknownError);
      await expect(receiver.apply(request, work(1))).rejects.toBeInstanceOf(SessionUnknownError);
      expect(effects.size).toBe(0);
      expect(await receiver.stats('never-registered')).toBeUndefined();
    });

    it('expires a session whose lease ran out, drops its responses and refuses it from then on', async () => {
      const { receiver, clock } = setup();
      const { effects, work } = counter();
      const clientId = await receiver.register();
      await receiver.apply({ clientId, requestNumber: 1, lowWaterMark: 0 }, work(1));
      clock.advance(LEASE_MS);
      await expect(receiver.apply({ clientId, requestNumber: 1, lowWaterMark: 0 }, work(1))).rejects.toBeInstanceOf(
        SessionExpiredError,
      );
      expect(await receiver.stats(clientId)).toMatchObject({ state: 'expired', storedResponses: 0, inProgress: 0 });
      await expect(receiver.apply({ clientId, requestNumber: 2, lowWaterMark: 1 }, work(2))).rejects.toBeInstanceOf(
        SessionExpiredError,
      );
      await expect(receiver.keepAlive(clientId, 1)).rejects.toBeInstanceOf(SessionExpiredError);
      expect(effects.get(1)).toBe(1);
      expect(effects.has(2)).toBe(false);
    });

    it('renews the lease on every request and keep-alive', async () => {
      const { receiver, clock } = setup();
      const { work } = counter();
      const clientId = await receiver.register();
      for (let i = 0; i < 3; i++) {
        clock.advance(LEASE_MS - 1);
        await receiver.keepAlive(clientId);
      }
      clock.advance(LEASE_MS - 1);
      await receiver.apply({ clientId, requestNumber: 1, lowWaterMark: 0 }, work(1));
      clock.advance(LEASE_MS - 1);
      await receiver.apply({ clientId, requestNumber: 1, lowWaterMark: 0 }, work(1));
      expect(await receiver.stats(clientId)).toMatchObject({ state: 'live', leaseExpiresAt: clock.now() + LEASE_MS });
      clock.advance(LEASE_MS);
      await expect(receiver.keepAlive(clientId)).rejects.toBeInstanceOf(SessionExpiredError);
    });

    it('releases a request whose work threw, so a retry applies it again', async () => {
      const { receiver } = setup();
      const clientId = await receiver.register();
      const request = { clientId, requestNumber: 1, lowWaterMark: 0 };
      let runs = 0;
      const failing = (): Promise<string> => {
        runs++;
        return Promise.reject(new Error('downstream failed'));
      };
      await expect(receiver.apply(request, failing)).rejects.toThrow('downstream failed');
      expect(await receiver.stats(clientId)).toMatchObject({ storedResponses: 0, inProgress: 0 });
      expect(await receiver.apply(request, () => Promise.resolve(`run ${++runs}`))).toEqual({ value: 'run 2', replayed: false, saved: true });
    });

    it('answers the value unsaved when the store fails after the work ran, and fails closed before it', async () => {
      const store = makeStore();
      opened.push(store);
      let failComplete = false;
      let failBegin = false;
      const flaky: SessionStore = {
        ...bindAll(store),
        complete: (...args) => (failComplete ? Promise.reject(new Error('disk full')) : store.complete(...args)),
        begin: (input) => (failBegin ? Promise.reject(new Error('connection reset')) : store.begin(input)),
      };
      const receiver = createSessionReceiver({ store: flaky, clock: new ManualClock(0) });
      const clientId = await receiver.register();
      let runs = 0;
      failComplete = true;
      expect(await receiver.apply({ clientId, requestNumber: 1, lowWaterMark: 0 }, () => Promise.resolve(++runs))).toEqual({
        value: 1,
        replayed: false,
        saved: false,
      });
      failBegin = true;
      await expect(
        receiver.apply({ clientId, requestNumber: 2, lowWaterMark: 0 }, () => Promise.resolve(++runs)),
      ).rejects.toBeInstanceOf(StoreUnavailableError);
      expect(runs).toBe(1);
    });

    it('lets a retry take over a request whose execution lease expired, and fences the late holder', async () => {
      const { receiver, clock } = setup();
      const clientId = await receiver.register();
      const request = { clientId, requestNumber: 1, lowWaterMark: 0 };
      const held = gate();
      const first = receiver.apply(request, async () => {
        await held.promise;
        return 'late';
      });
      await new Promise((resolve) => setImmediate(resolve));
      await expect(receiver.apply(request, () => Promise.resolve('x'))).rejects.toBeInstanceOf(SessionRequestInProgressError);
      clock.advance(EXECUTION_LEASE_MS);
      expect(await receiver.apply(request, () => Promise.resolve('winner'))).toEqual({ value: 'winner', replayed: false, saved: true });
      held.open();
      await expect(first).rejects.toBeInstanceOf(SessionLeaseLostError);
      expect(await receiver.apply(request, () => Promise.resolve('x'))).toEqual({ value: 'winner', replayed: true, saved: true });
    });

    it.each<[string, unknown]>([
      ['request number 0', { clientId: 'c', requestNumber: 0, lowWaterMark: 0 }],
      ['fractional request number', { clientId: 'c', requestNumber: 1.5, lowWaterMark: 0 }],
      ['low-water mark at the request number', { clientId: 'c', requestNumber: 3, lowWaterMark: 3 }],
      ['negative low-water mark', { clientId: 'c', requestNumber: 3, lowWaterMark: -1 }],
      ['empty client id', { clientId: '', requestNumber: 1, lowWaterMark: 0 }],
    ])('refuses a malformed request (%s) without running it', async (_label, request) => {
      const { receiver } = setup();
      let runs = 0;
      await expect(
        receiver.apply(request as SessionRequest, () => Promise.resolve(++runs)),
      ).rejects.toBeInstanceOf(SessionRequestInvalidError);
      expect(runs).toBe(0);
    });

    it('reaps expired sessions, after which they are unknown', async () => {
      const { receiver, clock } = setup();
      const idle = await receiver.register();
      const busy = await receiver.register();
      clock.advance(LEASE_MS - 1);
      await receiver.keepAlive(busy);
      clock.advance(1);
      expect(await receiver.reap()).toBe(1);
      await expect(receiver.keepAlive(idle)).rejects.toBeInstanceOf(SessionUnknownError);
      await receiver.keepAlive(busy);
    });

    it('ends a session at the client’s request', async () => {
      const { receiver } = setup();
      const clientId = await receiver.register();
      await receiver.apply({ clientId, requestNumber: 1, lowWaterMark: 0 }, () => Promise.resolve(1));
      expect(await receiver.end(clientId)).toBe(true);
      expect(await receiver.stats(clientId)).toBeUndefined();
      await expect(receiver.keepAlive(clientId)).rejects.toBeInstanceOf(SessionUnknownError);
      expect(await receiver.end(clientId)).toBe(false);
    });

    it('lists sessions and tombstones in client-id order with their counters, by prefix and page', async () => {
      const ids = ['c-9', 'b-2', 'a-1', 'b-1'];
      let tokens = 0;
      const { receiver, clock, store } = setup({ generateId: () => ids.shift() ?? `token-${++tokens}` });
      const list = store.listSessions?.bind(store);
      if (list === undefined) throw new Error('the store has no listSessions');
      // c-9's lease runs out and an access turns it into a tombstone.
      await receiver.register();
      clock.advance(LEASE_MS);
      await expect(receiver.keepAlive('c-9')).rejects.toBeInstanceOf(SessionExpiredError);
      for (let i = 0; i < 3; i++) await receiver.register();
      // a-1: requests 1 to 3 applied, the third carrying low-water mark 1, so 2 and 3 stay saved.
      for (const n of [1, 2, 3]) await receiver.apply({ clientId: 'a-1', requestNumber: n, lowWaterMark: n === 3 ? 1 : 0 }, () => Promise.resolve(n));
      // b-2: request 4 claimed and not yet completed.
      const now = clock.now();
      expect(await store.begin({ clientId: 'b-2', requestNumber: 4, lowWaterMark: 0, now, sessionLeaseMs: LEASE_MS, executionLeaseMs: EXECUTION_LEASE_MS, token: 't' })).toEqual({
        outcome: 'execute',
        takeover: false,
      });
      const lease = now + LEASE_MS;
      const all = await list({ limit: 10 });
      expect(all).toEqual([
        { clientId: 'a-1', state: 'live', lowWaterMark: 1, leaseExpiresAt: lease, storedResponses: 2, inProgress: 0, highestRequestNumber: 3 },
        { clientId: 'b-1', state: 'live', lowWaterMark: 0, leaseExpiresAt: lease, storedResponses: 0, inProgress: 0 },
        { clientId: 'b-2', state: 'live', lowWaterMark: 0, leaseExpiresAt: lease, storedResponses: 0, inProgress: 1, highestRequestNumber: 4 },
        { clientId: 'c-9', state: 'expired', lowWaterMark: 0, leaseExpiresAt: 1_000_000 + LEASE_MS, storedResponses: 0, inProgress: 0 },
      ]);
      expect(all.find((s) => s.clientId === 'b-1')).not.toHaveProperty('highestRequestNumber');
      const idsOf = async (query: Parameters<typeof list>[0]): Promise<string[]> => (await list(query)).map((s) => s.clientId);
      expect(await idsOf({ clientIdPrefix: 'b-', limit: 10 })).toEqual(['b-1', 'b-2']);
      expect(await idsOf({ limit: 2 })).toEqual(['a-1', 'b-1']);
      expect(await idsOf({ after: 'b-1', limit: 2 })).toEqual(['b-2', 'c-9']);
      expect(await idsOf({ after: 'c-9', limit: 2 })).toEqual([]);
      expect(await idsOf({ clientIdPrefix: 'b-', after: 'b-1', limit: 10 })).toEqual(['b-2']);
      expect(await idsOf({ clientIdPrefix: 'z', limit: 10 })).toEqual([]);
      await expect(list({ limit: 0 })).rejects.toThrow(TypeError);
      await expect(list({ limit: 1.5 })).rejects.toThrow(TypeError);
    });

    it('survives a retry storm of lost replies from a pipelining client: every request applied once', async () => {
      const { receiver } = setup();
      const { effects, work } = counter();
      const client = await SessionClient.open({ register: () => receiver.register(), maxAttempts: 10, sleep: () => Promise.resolve() });
      let sends = 0;
      // Replies to the first two sends of each request are lost after the work ran.
      const tries = new Map<number, number>();
      const send = async (request: SessionRequest): Promise<string> => {
        sends++;
        const applied = await receiver.apply(request, work(request.requestNumber));
        const n = (tries.get(request.requestNumber) ?? 0) + 1;
        tries.set(request.requestNumber, n);
        if (n <= 2) throw new Error('reply lost');
        return applied.value;
      };
      const values = await Promise.all(Array.from({ length: 200 }, () => client.request(send)));
      expect(values).toEqual(Array.from({ length: 200 }, (_, i) => `result-${i + 1}`));
      expect(sends).toBe(600);
      expect(effects.size).toBe(200);
      expect([...effects.values()].every((count) => count === 1)).toBe(true);
      expect(client.lowWaterMark).toBe(200);
      await receiver.keepAlive(client.clientId, client.lowWaterMark);
      expect(await receiver.stats(client.clientId)).toMatchObject({ storedResponses: 0, inProgress: 0 });
    });

    it(`keeps memory bounded over ${BOUNDED_REQUESTS} requests from one client (stored responses counted)`, async () => {
      const { receiver } = setup();
      const client = await SessionClient.open({
        register: () => receiver.register(),
        keepAlive: (id, lwm) => receiver.keepAlive(id, lwm),
      });
      let executions = 0;
      let maxStored = 0;
      for (let i = 0; i < BOUNDED_REQUESTS; i++) {
        await client.request((request) => receiver.apply(request, () => Promise.resolve(++executions)));
        const stats = await receiver.stats(client.clientId);
        maxStored = Math.max(maxStored, stats?.storedResponses ?? Infinity);
      }
      client.close();
      expect(executions).toBe(BOUNDED_REQUESTS);
      // Only the newest response waits for the next request to carry its low-water mark.
      expect(maxStored).toBe(1);
      await client.keepAlive();
      expect(await receiver.stats(client.clientId)).toMatchObject({ storedResponses: 0, lowWaterMark: BOUNDED_REQUESTS });
    });

    it(`keeps memory bounded by the window of a pipelining client over ${BOUNDED_REQUESTS} requests`, async () => {
      const { receiver } = setup();
      const client = await SessionClient.open({ register: () => receiver.register() });
      const WINDOW = 8;
      let maxStored = 0;
      let next = 0;
      const lane = async (): Promise<void> => {
        while (next < BOUNDED_REQUESTS) {
          next++;
          await client.request((request) => receiver.apply(request, () => Promise.resolve(request.requestNumber)));
          const stats = await receiver.stats(client.clientId);
          maxStored = Math.max(maxStored, (stats?.storedResponses ?? Infinity) + (stats?.inProgress ?? Infinity));
        }
      };
      await Promise.all(Array.from({ length: WINDOW }, lane));
      expect(client.lastRequestNumber).toBe(BOUNDED_REQUESTS);
      expect(maxStored).toBeLessThanOrEqual(2 * WINDOW);
    });

    it('property: any interleaving of duplicates, reorderings and lost replies applies each request exactly once', async () => {
      await fc.assert(
        fc.asyncProperty(
          fc.scheduler(),
          fc.integer({ min: 1, max: 8 }),
          fc.array(fc.boolean(), { maxLength: 30 }),
          fc.array(fc.boolean(), { maxLength: 30 }),
          async (s, count, losses, duplicates) => {
            const store = makeStore();
            try {
              const receiver = createSessionReceiver({ store, clock: new ManualClock(0) });
              const effects = new Map<number, number>();
              const work = (n: number) => async (): Promise<string> => {
                effects.set(n, (effects.get(n) ?? 0) + 1);
                await s.schedule(Promise.resolve(), `work ${n}`);
                return `result-${n}`;
              };
              const client = await SessionClient.open({
                register: () => receiver.register(),
                maxAttempts: 1_000,
                sleep: () => s.schedule(Promise.resolve(), 'backoff'),
              });
              let loss = 0;
              let duplicate = 0;
              const strays: Promise<unknown>[] = [];
              const deliver = (request: SessionRequest): Promise<string> =>
                s
                  .schedule(Promise.resolve(), `deliver ${request.requestNumber}`)
                  .then(() => receiver.apply(request, work(request.requestNumber)))
                  .then((applied) => applied.value);
              const send = (request: SessionRequest): Promise<string> => {
                // A duplicate copy travels on its own, with the low-water mark of its time.
                if (duplicates[duplicate++] === true) strays.push(deliver({ ...request }).catch(() => undefined));
                return deliver(request).then((value) => {
                  if (losses[loss++] === true) throw new Error('reply lost');
                  return value;
                });
              };
              const values = await s.waitFor(Promise.all(Array.from({ length: count }, () => client.request(send))));
              await s.waitFor(Promise.all(strays));
              await s.waitIdle();
              expect(values).toEqual(Array.from({ length: count }, (_, i) => `result-${i + 1}`));
              for (let n = 1; n <= count; n++) expect(effects.get(n)).toBe(1);
              expect(effects.size).toBe(count);
              expect(client.lowWaterMark).toBe(count);
              await receiver.keepAlive(client.clientId, client.lowWaterMark);
              expect(await receiver.stats(client.clientId)).toMatchObject({ storedResponses: 0, inProgress: 0 });
            } finally {
              await store.close();
            }
          },
        ),
        { numRuns: 100 },
      );
    });
  });
}
