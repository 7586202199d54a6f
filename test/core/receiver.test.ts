import { beforeEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/core/clock.js';
import {
  IdempotencyKeyReusedError,
  LeaseLostError,
  RequestInProgressError,
  StoreUnavailableError,
} from '../../src/core/errors.js';
import type { StoredResponse } from '../../src/core/record.js';
import type { Execution, OperationId, Receiver } from '../../src/core/receiver.js';
import { createReceiver } from '../../src/receiver.js';
import { createMemoryStore } from '../../src/stores/memory.js';
import type { IdempotencyStore, TransactionalStore } from '../../src/core/store.js';

const FP_A = 'a'.repeat(64);
const FP_B = 'b'.repeat(64);
const id: OperationId = { scope: 'tenant-1', key: 'key-1', fingerprint: FP_A };
const BODY = Uint8Array.from([0x00, 0xff, 0x7b, 0x22, 0x0a, 0x80]);

function response(status = 201, body: Uint8Array = BODY): StoredResponse {
  return { status, headers: { 'content-type': 'application/octet-stream' }, body };
}

/** A promise with its resolve function, to hold work open while the test looks around. */
function gate(): { promise: Promise<void>; open: () => void } {
  let open!: () => void;
  const promise = new Promise<void>((resolve) => (open = resolve));
  return { promise, open };
}

/**
 * Starts an execution of `id` whose work counts its runs and then holds until `hold.open()`; resolves once
 * the work is running, so a duplicate sent next meets a live lease.
 */
async function startHeld(
  receiver: Receiver,
  id: OperationId,
): Promise<{ original: Promise<Execution>; hold: { open: () => void }; runs: () => number }> {
  const hold = gate();
  let runs = 0;
  const original = receiver.execute(id, async () => {
    runs++;
    await hold.promise;
    return response();
  });
  await until(() => runs === 1);
  return { original, hold, runs: () => runs };
}

/** Resolves once `predicate` holds, checking on every macrotask; bounded so a bug fails instead of hanging. */
async function until(predicate: () => boolean | Promise<boolean>): Promise<void> {
  for (let i = 0; i < 1_000; i++) {
    if (await predicate()) return;
    await new Promise((resolve) => setImmediate(resolve));
  }
  throw new Error('condition never held');
}

describe('receiver on the memory store', () => {
  let clock: ManualClock;
  let store: IdempotencyStore;

  beforeEach(() => {
    clock = new ManualClock(1_700_000_000_000);
    store = createMemoryStore({ clock });
  });

  it('executeNow answers a replay and a refusal in place, and anything that waits as a promise', async () => {
    const receiver = createReceiver({ store, clock });
    const first = receiver.executeNow(id, () => Promise.resolve(response()));
    expect(first).toBeInstanceOf(Promise);
    expect((await first).saved).toBe(true);
    const replay = receiver.executeNow(id, () => Promise.reject(new Error('must not run')));
    expect(replay).not.toBeInstanceOf(Promise);
    expect(replay).toMatchObject({ replayed: true, saved: true, response: { status: 201, body: BODY } });
    expect(() => receiver.executeNow({ ...id, fingerprint: FP_B }, () => Promise.resolve(response()))).toThrow(IdempotencyKeyReusedError);
    const { original, hold } = await startHeld(receiver, { ...id, key: 'held' });
    expect(() => receiver.executeNow({ ...id, key: 'held' }, () => Promise.resolve(response()))).toThrow(RequestInProgressError);
    hold.open();
    await original;
    // A store whose promises carry no value: the same answers, as promises.
    const wrapped = Object.assign(Object.create(store) as IdempotencyStore, { claim: (input: Parameters<IdempotencyStore['claim']>[0]) => store.claim(input).then((result) => result) });
    const late = createReceiver({ store: wrapped, clock }).executeNow(id, () => Promise.reject(new Error('must not run')));
    expect(late).toBeInstanceOf(Promise);
    expect(await late).toMatchObject({ replayed: true });
  });

  it('runs the work once and replays identical bytes', async () => {
    const receiver = createReceiver({ store, clock });
    let runs = 0;
    const work = () => {
      runs++;
      return Promise.resolve(response());
    };
    const first = await receiver.execute(id, work);
    expect(first).toMatchObject({ replayed: false, saved: true });
    const second = await receiver.execute(id, work);
    expect(second).toMatchObject({ replayed: true, saved: true });
    expect(runs).toBe(1);
    expect(second.response.status).toBe(201);
    expect(second.response.headers).toEqual({ 'content-type': 'application/octet-stream' });
    expect(Array.from(second.response.body)).toEqual(Array.from(BODY));
  });

  it('hands the work its claim and no transaction', async () => {
    const receiver = createReceiver({ store, clock, leaseMs: 5_000 });
    await receiver.execute(id, ({ claim, tx }) => {
      expect(claim).toMatchObject({ scope: 'tenant-1', key: 'key-1', fingerprint: FP_A, takeover: false });
      expect(claim.leaseExpiresAt).toBe(clock.now() + 5_000);
      expect(tx).toBeUndefined();
      return Promise.resolve(response());
    });
  });

  it('refuses a reused key with another fingerprint and leaves the record untouched', async () => {
    const receiver = createReceiver({ store, clock });
    await receiver.execute(id, () => Promise.resolve(response()));
    const before = await store.get(id.scope, id.key);
    let ran = false;
    const error = await receiver
      .execute({ ...id, fingerprint: FP_B }, () => {
        ran = true;
        return Promise.resolve(response(200));
      })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(IdempotencyKeyReusedError);
    expect((error as IdempotencyKeyReusedError).record).toEqual(before);
    expect(ran).toBe(false);
    expect(await store.get(id.scope, id.key)).toEqual(before);
  });

  it('reports a mismatch before in-flight', async () => {
    const receiver = createReceiver({ store, clock, inFlight: 'wait', waitTimeoutMs: 5_000 });
    const hold = gate();
    const original = receiver.execute(id, async () => {
      await hold.promise;
      return response();
    });
    await until(async () => (await store.get(id.scope, id.key)) !== undefined);
    await expect(receiver.execute({ ...id, fingerprint: FP_B }, () => Promise.resolve(response()))).rejects.toBeInstanceOf(
      IdempotencyKeyReusedError,
    );
    hold.open();
    await original;
  });

  it('rejects a duplicate of a running request in reject mode', async () => {
    const receiver = createReceiver({ store, clock });
    const { original, hold, runs } = await startHeld(receiver, id);
    const error = await receiver.execute(id, () => Promise.resolve(response(200))).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(RequestInProgressError);
    expect((error as RequestInProgressError).record.state).toBe('in_progress');
    hold.open();
    expect((await original).replayed).toBe(false);
    expect(runs()).toBe(1);
  });

  it('gives a duplicate the original’s response in wait mode', async () => {
    const receiver = createReceiver({ store, clock, inFlight: 'wait', waitTimeoutMs: 5_000 });
    const hold = gate();
    let runs = 0;
    const work = async () => {
      runs++;
      await hold.promise;
      return response();
    };
    const original = receiver.execute(id, work);
    await until(() => runs === 1);
    const duplicate = receiver.execute(id, work);
    setTimeout(hold.open, 20);
    const [a, b] = await Promise.all([original, duplicate]);
    expect(runs).toBe(1);
    expect(a.replayed).toBe(false);
    expect(b.replayed).toBe(true);
    expect(Array.from(b.response.body)).toEqual(Array.from(a.response.body));
  });

  it('answers in progress when a wait times out', async () => {
    const receiver = createReceiver({ store, clock, inFlight: 'wait', waitTimeoutMs: 50 });
    const { original, hold, runs } = await startHeld(receiver, id);
    const started = performance.now();
    await expect(receiver.execute(id, () => Promise.resolve(response()))).rejects.toBeInstanceOf(RequestInProgressError);
    expect(performance.now() - started).toBeGreaterThanOrEqual(40);
    hold.open();
    await original;
    expect(runs()).toBe(1);
  });

  it('releases the key on a 5xx, so a retry runs again', async () => {
    const receiver = createReceiver({ store, clock });
    let runs = 0;
    const first = await receiver.execute(id, () => {
      runs++;
      return Promise.resolve(response(503));
    });
    expect(first).toMatchObject({ replayed: false, saved: false });
    expect(first.response.status).toBe(503);
    expect(await store.get(id.scope, id.key)).toBeUndefined();
    const retry = await receiver.execute(id, () => {
      runs++;
      return Promise.resolve(response(201));
    });
    expect(retry).toMatchObject({ replayed: false, saved: true });
    expect(runs).toBe(2);
  });

  it('saves a 4xx and replays it', async () => {
    const receiver = createReceiver({ store, clock });
    await receiver.execute(id, () => Promise.resolve(response(404)));
    const replay = await receiver.execute(id, () => Promise.resolve(response(201)));
    expect(replay).toMatchObject({ replayed: true });
    expect(replay.response.status).toBe(404);
  });

  it('follows shouldPersist when given', async () => {
    const receiver = createReceiver({ store, clock, shouldPersist: () => true });
    await receiver.execute(id, () => Promise.resolve(response(500)));
    expect((await receiver.execute(id, () => Promise.resolve(response(201)))).response.status).toBe(500);
  });

  it('releases the key and rethrows when the work throws, so a retry runs', async () => {
    const receiver = createReceiver({ store, clock });
    const failure = new Error('downstream exploded');
    await expect(receiver.execute(id, () => Promise.reject(failure))).rejects.toBe(failure);
    expect(await store.get(id.scope, id.key)).toBeUndefined();
    let ran = false;
    const retry = await receiver.execute(id, () => {
      ran = true;
      return Promise.resolve(response());
    });
    expect(ran).toBe(true);
    expect(retry.replayed).toBe(false);
  });

  it('fails closed with StoreUnavailableError when the claim rejects, without running the work', async () => {
    const cause = new Error('ECONNREFUSED');
    const broken: IdempotencyStore = {
      claim: () => Promise.reject(cause),
      complete: (claim, res, retentionMs) => store.complete(claim, res, retentionMs),
      release: (claim) => store.release(claim),
      renew: (claim, leaseMs) => store.renew(claim, leaseMs),
      get: (scope, key) => store.get(scope, key),
      reap: (limit) => store.reap(limit),
      close: () => store.close(),
    };
    const receiver = createReceiver({ store: broken, clock });
    let ran = false;
    const error = await receiver
      .execute(id, () => {
        ran = true;
        return Promise.resolve(response());
      })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(StoreUnavailableError);
    expect((error as StoreUnavailableError).cause).toBe(cause);
    expect(ran).toBe(false);
  });

  it('lets a retry take over an expired lease and fences off the stale holder', async () => {
    const receiver = createReceiver({ store, clock, leaseMs: 1_000 });
    const hold = gate();
    let staleStarted = false;
    const stale = receiver.execute(id, async () => {
      staleStarted = true;
      await hold.promise;
      return response(201, Uint8Array.from([1]));
    });
    await until(() => staleStarted);
    clock.advance(1_000);
    const winner = await receiver.execute(id, ({ claim }) => {
      expect(claim.takeover).toBe(true);
      return Promise.resolve(response(201, Uint8Array.from([2])));
    });
    expect(winner.replayed).toBe(false);
    hold.open();
    const error = await stale.catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LeaseLostError);
    expect(error).toMatchObject({ scope: id.scope, key: id.key, code: 'idempotency-lease-lost' });
    const record = await store.get(id.scope, id.key);
    expect(Array.from(record?.response?.body ?? [])).toEqual([2]);
    const replay = await receiver.execute(id, () => Promise.resolve(response()));
    expect(Array.from(replay.response.body)).toEqual([2]);
  });

  it('runs the work once for 50 parallel executions of one key and answers all alike', async () => {
    const receiver = createReceiver({ store, clock, inFlight: 'wait', waitTimeoutMs: 5_000 });
    let runs = 0;
    const executions = await Promise.all(
      Array.from({ length: 50 }, () =>
        receiver.execute(id, async () => {
          runs++;
          await new Promise((resolve) => setTimeout(resolve, 10));
          return response(201, new TextEncoder().encode(`run ${runs}`));
        }),
      ),
    );
    expect(runs).toBe(1);
    expect(new Set(executions.map((e) => new TextDecoder().decode(e.response.body)))).toEqual(new Set(['run 1']));
    expect(executions.filter((e) => !e.replayed)).toHaveLength(1);
  });

  describe('run()', () => {
    it('round-trips a JSON result and does not call fn again', async () => {
      const receiver = createReceiver({ store, clock });
      let calls = 0;
      const fn = () => {
        calls++;
        return Promise.resolve({ invoice: 'in_1', amount: 100, lines: [1, null, 'x'], nested: { ok: true } });
      };
      const first = await receiver.run(id, fn);
      const second = await receiver.run(id, fn);
      expect(second).toEqual(first);
      expect(second).toEqual({ invoice: 'in_1', amount: 100, lines: [1, null, 'x'], nested: { ok: true } });
      expect(calls).toBe(1);
      const record = await store.get(id.scope, id.key);
      expect(record?.response?.headers).toEqual({ 'content-type': 'application/json' });
    });

    it('round-trips undefined, null and primitives', async () => {
      const receiver = createReceiver({ store, clock });
      const values: readonly unknown[] = [undefined, null, 0, 'text', false];
      for (const [i, value] of values.entries()) {
        const op = { ...id, key: `k${i}` };
        let calls = 0;
        const fn = () => {
          calls++;
          return Promise.resolve(value);
        };
        expect(await receiver.run(op, fn)).toEqual(value);
        expect(await receiver.run(op, fn)).toEqual(value);
        expect(calls).toBe(1);
      }
    });
  });

  describe('option validation', () => {
    it('names the option and the value in a TypeError', () => {
      const bad: readonly [Record<string, unknown>, RegExp][] = [
        [{ leaseMs: 0 }, /"leaseMs".*0/],
        [{ leaseMs: -5 }, /"leaseMs"/],
        [{ leaseMs: 1.5 }, /"leaseMs".*1\.5/],
        [{ leaseMs: '1000' }, /"leaseMs"/],
        [{ retentionMs: 0 }, /"retentionMs"/],
        [{ retentionMs: Number.POSITIVE_INFINITY }, /"retentionMs"/],
        [{ inFlight: 'queue' }, /"inFlight".*"queue"/],
        [{ waitTimeoutMs: -1 }, /"waitTimeoutMs"/],
        [{ pollIntervalMs: 0 }, /"pollIntervalMs"/],
        [{ shouldPersist: true }, /"shouldPersist"/],
        [{ leaseMs: 60_000, retentionMs: 59_999 }, /"leaseMs".*"retentionMs"/],
      ];
      for (const [options, message] of bad) {
        expect(() => createReceiver({ store, ...options } as never)).toThrow(TypeError);
        expect(() => createReceiver({ store, ...options } as never)).toThrow(message);
      }
    });

    it('requires a store', () => {
      expect(() => createReceiver({} as never)).toThrow(/"store"/);
      expect(() => createReceiver({ store: { get: () => undefined } } as never)).toThrow(/"store"/);
      expect(() => createReceiver(undefined as never)).toThrow(TypeError);
    });

    it('refuses transactional mode on a store without transaction()', () => {
      expect(() => createReceiver({ store: store as TransactionalStore<unknown>, transactional: true })).toThrow(/"transactional"/);
    });

    it('freezes the resolved options and documents the defaults', () => {
      const receiver = createReceiver({ store });
      expect(Object.isFrozen(receiver.options)).toBe(true);
      expect(receiver.options).toMatchObject({
        leaseMs: 30_000,
        retentionMs: 86_400_000,
        inFlight: 'reject',
        waitTimeoutMs: 10_000,
        pollIntervalMs: 25,
      });
    });
  });
});
