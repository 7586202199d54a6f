import { afterEach, describe, expect, it, vi } from 'vitest';
import { ManualClock } from '../../src/core/clock.js';
import {
  createMemorySessionStore,
  createSessionReceiver,
  SessionClient,
  SessionExpiredError,
  SessionRequestInProgressError,
  StaleRequestError,
  type SessionClientOptions,
  type SessionReceiverOptions,
  type SessionRequest,
} from '../../src/sessions/index.js';

/** A request whose answer the test hands over later, to settle requests out of order. */
interface Pending {
  readonly request: SessionRequest;
  resolve(value: string): void;
  reject(error: unknown): void;
}

function manualTransport(): { send: (request: SessionRequest) => Promise<string>; pending: Pending[] } {
  const pending: Pending[] = [];
  return {
    pending,
    send: (request) =>
      new Promise<string>((resolve, reject) => {
        pending.push({ request, resolve, reject });
      }),
  };
}

const tick = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

describe('SessionClient', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it('numbers requests from 1 and raises the low-water mark only over a contiguous run of settled requests', async () => {
    const client = await SessionClient.open({ register: () => Promise.resolve('c1') });
    const { send, pending } = manualTransport();
    const results = [client.request(send), client.request(send), client.request(send), client.request(send)];
    expect(pending.map((p) => p.request)).toEqual([1, 2, 3, 4].map((n) => ({ clientId: 'c1', requestNumber: n, lowWaterMark: 0 })));
    pending[1]?.resolve('two');
    pending[3]?.resolve('four');
    await tick();
    expect(client.lowWaterMark).toBe(0);
    pending[0]?.resolve('one');
    await tick();
    expect(client.lowWaterMark).toBe(2);
    const fifth = client.request(send);
    expect(pending[4]?.request).toEqual({ clientId: 'c1', requestNumber: 5, lowWaterMark: 2 });
    pending[2]?.resolve('three');
    pending[4]?.resolve('five');
    expect(await Promise.all([...results, fifth])).toEqual(['one', 'two', 'three', 'four', 'five']);
    expect(client.lowWaterMark).toBe(5);
  });

  it('retries a request under the same number, re-reading the low-water mark', async () => {
    const waits: number[] = [];
    const client = await SessionClient.open({
      register: () => Promise.resolve('c1'),
      random: () => 0.5,
      sleep: (ms) => {
        waits.push(ms);
        return Promise.resolve();
      },
    });
    const seen: SessionRequest[] = [];
    await client.request(() => Promise.resolve('first'));
    const value = await client.request((request) => {
      seen.push(request);
      return seen.length < 3 ? Promise.reject(new Error('network down')) : Promise.resolve('ok');
    });
    expect(value).toBe('ok');
    expect(seen).toEqual(Array(3).fill({ clientId: 'c1', requestNumber: 2, lowWaterMark: 1 }));
    expect(waits).toEqual([50, 100]);
  });

  it('settles a request it gives up on, so the low-water mark can pass it', async () => {
    const client = await SessionClient.open({ register: () => Promise.resolve('c1'), maxAttempts: 2, sleep: () => Promise.resolve() });
    let sends = 0;
    await expect(
      client.request(() => {
        sends++;
        return Promise.reject(new Error('down'));
      }),
    ).rejects.toThrow('down');
    expect(sends).toBe(2);
    expect(client.lowWaterMark).toBe(1);
  });

  it('does not retry a refusal, except in-progress', async () => {
    const client = await SessionClient.open({ register: () => Promise.resolve('c1'), sleep: () => Promise.resolve() });
    let sends = 0;
    await expect(
      client.request(() => {
        sends++;
        return Promise.reject(new StaleRequestError('c1', 1, 1));
      }),
    ).rejects.toBeInstanceOf(StaleRequestError);
    expect(sends).toBe(1);
    sends = 0;
    const value = await client.request(() =>
      ++sends < 3 ? Promise.reject(new SessionRequestInProgressError('c1', 2)) : Promise.resolve('done'),
    );
    expect(value).toBe('done');
    expect(sends).toBe(3);
  });

  it('treats an expired session as dead: later requests fail at once without being sent', async () => {
    const clock = new ManualClock(0);
    const receiver = createSessionReceiver({ store: createMemorySessionStore(), clock, leaseMs: 1_000 });
    const client = await SessionClient.open({ register: () => receiver.register(), sleep: () => Promise.resolve() });
    let runs = 0;
    const send = (request: SessionRequest): Promise<number> => receiver.apply(request, () => Promise.resolve(++runs)).then((a) => a.value);
    await client.request(send);
    clock.advance(1_000);
    await expect(client.request(send)).rejects.toBeInstanceOf(SessionExpiredError);
    expect(client.ended).toBeInstanceOf(SessionExpiredError);
    let sent = false;
    await expect(client.request(() => Promise.resolve((sent = true)))).rejects.toBeInstanceOf(SessionExpiredError);
    expect(sent).toBe(false);
    expect(runs).toBe(1);
  });

  it('sends keep-alives on its interval with the current low-water mark, keeping an idle session alive', async () => {
    vi.useFakeTimers();
    const clock = new ManualClock(0);
    const receiver = createSessionReceiver({ store: createMemorySessionStore(), clock, leaseMs: 1_000 });
    const keepAlives: [string, number][] = [];
    const client = await SessionClient.open({
      register: () => receiver.register(),
      keepAlive: (id, lwm) => {
        keepAlives.push([id, lwm]);
        return receiver.keepAlive(id, lwm);
      },
      keepAliveIntervalMs: 400,
    });
    await client.request((request) => receiver.apply(request, () => Promise.resolve('x')));
    for (let i = 0; i < 10; i++) {
      clock.advance(200);
      await vi.advanceTimersByTimeAsync(200);
    }
    expect(keepAlives).toHaveLength(5);
    expect(keepAlives.every(([id, lwm]) => id === client.clientId && lwm === 1)).toBe(true);
    expect((await receiver.stats(client.clientId))?.state).toBe('live');
    expect((await receiver.stats(client.clientId))?.storedResponses).toBe(0);
    client.close();
    clock.advance(1_000);
    await vi.advanceTimersByTimeAsync(1_000);
    expect(keepAlives).toHaveLength(5);
    await expect(receiver.keepAlive(client.clientId)).rejects.toBeInstanceOf(SessionExpiredError);
  });

  it('refuses a manual keep-alive when opened without one', async () => {
    const client = await SessionClient.open({ register: () => Promise.resolve('c1') });
    await expect(client.keepAlive()).rejects.toThrow(/"keepAlive"/);
  });

  it.each<[string, Partial<SessionClientOptions>]>([
    ['register', { register: undefined as unknown as () => Promise<string> }],
    ['keepAlive', { keepAlive: 'x' as unknown as () => Promise<void> }],
    ['keepAliveIntervalMs', { keepAliveIntervalMs: 0 }],
    ['maxAttempts', { maxAttempts: 0 }],
    ['baseDelayMs', { baseDelayMs: 10_000, maxDelayMs: 100 }],
    ['random', { random: null as unknown as () => number }],
    ['sleep', { sleep: 1 as unknown as () => Promise<void> }],
    ['isRetryable', { isRetryable: {} as unknown as () => boolean }],
  ])('throws a TypeError naming %s', async (name, options) => {
    const open = SessionClient.open({ register: () => Promise.resolve('c1'), ...options });
    await expect(open).rejects.toBeInstanceOf(TypeError);
    await expect(open).rejects.toThrow(`"${name}"`);
  });

  it('refuses a register that resolves no id', async () => {
    await expect(SessionClient.open({ register: () => Promise.resolve('') })).rejects.toThrow(/"register"/);
  });
});

describe('createSessionReceiver options', () => {
  it.each<[string, Partial<SessionReceiverOptions>]>([
    ['store', { store: {} as SessionReceiverOptions['store'] }],
    ['leaseMs', { leaseMs: 0 }],
    ['executionLeaseMs', { executionLeaseMs: 1.5 }],
    ['clock', { clock: {} as ManualClock }],
    ['generateId', { generateId: 'id' as unknown as () => string }],
  ])('throws a TypeError naming %s', (name, options) => {
    const make = (): unknown => createSessionReceiver({ store: createMemorySessionStore(), ...options });
    expect(make).toThrow(TypeError);
    expect(make).toThrow(`"${name}"`);
  });

  it('freezes the resolved options with their defaults', () => {
    const receiver = createSessionReceiver({ store: createMemorySessionStore() });
    expect(receiver.options).toMatchObject({ leaseMs: 60_000, executionLeaseMs: 30_000 });
    expect(Object.isFrozen(receiver.options)).toBe(true);
  });
});
