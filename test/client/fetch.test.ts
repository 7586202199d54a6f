import { once } from 'node:events';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { fetch as undiciFetch, Request as UndiciRequest } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/core/clock.js';
import { IdempotencyKeyInvalidError } from '../../src/core/errors.js';
import {
  attemptsOf,
  createRetryingFetch,
  fullJitterDelay,
  parseRetryAfter,
  RetryExhaustedError,
  type AttemptRecord,
  type RetryingFetchOptions,
} from '../../src/client/fetch.js';

/** What the server saw of one request. */
interface Seen {
  readonly method: string;
  readonly key: string | undefined;
  readonly body: string;
}

/** Answers attempt `n` (1-based) of a path; `'drop'` destroys the socket without an answer. */
type Script = (n: number, res: ServerResponse) => 'drop' | undefined | Promise<undefined>;

let server: Server;
let base: string;
const scripts = new Map<string, Script>();
const seen = new Map<string, Seen[]>();
let nextPath = 0;

beforeAll(async () => {
  server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const path = req.url ?? '';
      const log = seen.get(path) ?? [];
      seen.set(path, log);
      const key = req.headers['idempotency-key'];
      log.push({ method: req.method ?? '', key: typeof key === 'string' ? key : undefined, body: Buffer.concat(chunks).toString() });
      const script = scripts.get(path);
      if (!script) {
        res.writeHead(404).end();
        return;
      }
      const answer = script(log.length, res);
      if (answer === 'drop') req.socket.destroy();
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  server.closeAllConnections();
  server.close();
  await once(server, 'close');
});

/** A fresh path on the test server that follows `script`. */
function route(script: Script): { url: string; seen: () => Seen[] } {
  const path = `/r${nextPath++}`;
  scripts.set(path, script);
  return { url: `${base}${path}`, seen: () => seen.get(path) ?? [] };
}

function reply(res: ServerResponse, status: number, headers: Record<string, string> = {}, body = ''): undefined {
  res.writeHead(status, headers).end(body);
  return undefined;
}

/** A sleep that does not wait, and records what it was asked to wait. */
function recordingSleep(clock?: ManualClock): { sleep: NonNullable<RetryingFetchOptions['sleep']>; waits: number[] } {
  const waits: number[] = [];
  return {
    waits,
    sleep: (ms, signal) => {
      signal?.throwIfAborted();
      waits.push(ms);
      clock?.advance(ms);
      return Promise.resolve();
    },
  };
}

const UUID_V4 = /^"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"$/;

describe('createRetryingFetch against a real HTTP server', () => {
  it('retries dropped sockets with the same generated key and the same body on every attempt', async () => {
    const r = route((n, res) => (n <= 2 ? 'drop' : reply(res, 201, { 'content-type': 'application/json' }, '{"id":7}')));
    const { sleep, waits } = recordingSleep();
    const seenAttempts: AttemptRecord[] = [];
    const fetchWithRetry = createRetryingFetch({ sleep, baseDelayMs: 100, random: () => 0.5, onAttempt: (a) => seenAttempts.push(a) });

    const res = await fetchWithRetry(r.url, { method: 'POST', body: JSON.stringify({ amount: 1000 }) });

    expect(res.status).toBe(201);
    expect(await res.json()).toEqual({ id: 7 });
    const requests = r.seen();
    expect(requests).toHaveLength(3);
    const key = requests[0]?.key;
    expect(key).toMatch(UUID_V4);
    expect(requests.map((q) => q.key)).toEqual([key, key, key]);
    expect(requests.map((q) => q.body)).toEqual(Array(3).fill('{"amount":1000}'));
    const history = attemptsOf(res);
    expect(history?.map((a) => [a.attempt, a.status, a.delayMs])).toEqual([
      [1, undefined, 50],
      [2, undefined, 100],
      [3, 201, 0],
    ]);
    expect(history?.[0]?.error).toBeInstanceOf(Error);
    expect(new Set(history?.map((a) => a.key))).toEqual(new Set([JSON.parse(key ?? '""') as string]));
    expect(seenAttempts).toEqual(history);
    expect(waits).toEqual([50, 100]);
  });

  it("works over undici's own fetch and Request", async () => {
    const r = route((n, res) => (n === 1 ? 'drop' : reply(res, 200, {}, 'ok')));
    const { sleep } = recordingSleep();
    const fetchWithRetry = createRetryingFetch({ sleep, fetch: undiciFetch as unknown as typeof fetch });
    const request = new UndiciRequest(r.url, { method: 'POST', body: 'payload', headers: { 'x-trace': '1' } });
    const res = await fetchWithRetry(request);
    expect(await res.text()).toBe('ok');
    expect(r.seen().map((q) => [q.method, q.body])).toEqual([
      ['POST', 'payload'],
      ['POST', 'payload'],
    ]);
    expect(r.seen()[0]?.key).toMatch(UUID_V4);
    expect(r.seen()[0]?.key).toBe(r.seen()[1]?.key);
  });

  it('uses a fresh key for each logical call', async () => {
    const r = route((_n, res) => reply(res, 200));
    const fetchWithRetry = createRetryingFetch();
    await fetchWithRetry(r.url, { method: 'POST' });
    await fetchWithRetry(r.url, { method: 'POST' });
    const [first, second] = r.seen();
    expect(first?.key).toMatch(UUID_V4);
    expect(second?.key).toMatch(UUID_V4);
    expect(first?.key).not.toBe(second?.key);
  });

  it('buffers a streamed Request body once and replays it on every attempt', async () => {
    const r = route((n, res) => (n === 1 ? reply(res, 503) : reply(res, 200)));
    const { sleep } = recordingSleep();
    const stream = new ReadableStream<Uint8Array>({
      start(controller) {
        controller.enqueue(new TextEncoder().encode('chunk-1;'));
        controller.enqueue(new TextEncoder().encode('chunk-2'));
        controller.close();
      },
    });
    const request = new Request(r.url, { method: 'PUT', body: stream, duplex: 'half' });
    const res = await createRetryingFetch({ sleep })(request);
    expect(res.status).toBe(200);
    expect(r.seen().map((q) => q.body)).toEqual(['chunk-1;chunk-2', 'chunk-1;chunk-2']);
    expect(r.seen().map((q) => q.method)).toEqual(['PUT', 'PUT']);
    expect(r.seen()[0]?.key).toBe(r.seen()[1]?.key);
  });

  it('keeps the implied content type of a form body on every attempt', async () => {
    const types: (string | undefined)[] = [];
    const r = route((n, res) => {
      types.push(res.req.headers['content-type']);
      return n === 1 ? reply(res, 500) : reply(res, 200);
    });
    const { sleep } = recordingSleep();
    await createRetryingFetch({ sleep })(r.url, { method: 'POST', body: new URLSearchParams({ a: '1', b: 'x y' }) });
    expect(types).toEqual(Array(2).fill('application/x-www-form-urlencoded;charset=UTF-8'));
    expect(r.seen().map((q) => q.body)).toEqual(['a=1&b=x+y', 'a=1&b=x+y']);
  });

  it('aborts an attempt that outlives attemptTimeoutMs and retries it', async () => {
    const r = route((n, res) => {
      if (n === 1) {
        const timer = setTimeout(() => reply(res, 200, {}, 'late'), 20_000);
        res.on('close', () => clearTimeout(timer));
        return undefined;
      }
      return reply(res, 200, {}, 'on time');
    });
    const { sleep } = recordingSleep();
    // The second attempt must answer within the same timeout: 150 ms was too short on a starved machine.
    const res = await createRetryingFetch({ sleep, attemptTimeoutMs: 1_500 })(r.url, { method: 'POST' });
    expect(await res.text()).toBe('on time');
    const history = attemptsOf(res) ?? [];
    expect(history).toHaveLength(2);
    expect((history[0]?.error as DOMException).name).toBe('TimeoutError');
    expect(r.seen()[0]?.key).toBe(r.seen()[1]?.key);
  });

  it('honours Retry-After in seconds on 409 and reports the replayed answer', async () => {
    const r = route((n, res) =>
      n === 1
        ? reply(res, 409, { 'retry-after': '1', 'content-type': 'application/problem+json' }, '{}')
        : reply(res, 201, { 'idempotent-replayed': 'true' }, 'saved'),
    );
    const { sleep, waits } = recordingSleep();
    const res = await createRetryingFetch({ sleep, random: () => 0 })(r.url, { method: 'POST', body: 'x' });
    expect(res.status).toBe(201);
    expect(waits).toEqual([1_000]);
    expect(attemptsOf(res)?.map((a) => [a.status, a.replayed, a.delayMs])).toEqual([
      [409, false, 1_000],
      [201, true, 0],
    ]);
  });

  it('returns a 409 without Retry-After as is: it is a conflict, not an in-progress answer', async () => {
    const r = route((_n, res) => reply(res, 409, {}, 'conflict'));
    const res = await createRetryingFetch()(r.url, { method: 'POST' });
    expect(res.status).toBe(409);
    expect(await res.text()).toBe('conflict');
    expect(r.seen()).toHaveLength(1);
  });

  it('honours Retry-After as an HTTP-date on 429, measured on the injected clock', async () => {
    const clock = new ManualClock(Date.UTC(2026, 0, 1, 12, 0, 0));
    const at = new Date(clock.now() + 3_000).toUTCString();
    const r = route((n, res) => (n === 1 ? reply(res, 429, { 'retry-after': at }) : reply(res, 200)));
    const { sleep, waits } = recordingSleep(clock);
    const res = await createRetryingFetch({ sleep, clock })(r.url, { method: 'POST' });
    expect(res.status).toBe(200);
    expect(waits).toEqual([3_000]);
  });

  it('caps a Retry-After wait at maxDelayMs', async () => {
    const r = route((n, res) => (n === 1 ? reply(res, 503, { 'retry-after': '120' }) : reply(res, 200)));
    const { sleep, waits } = recordingSleep();
    await createRetryingFetch({ sleep, maxDelayMs: 2_000 })(r.url, { method: 'POST' });
    expect(waits).toEqual([2_000]);
  });

  it.each([400, 422, 404])('returns %i at once, without retrying', async (status) => {
    const r = route((_n, res) => reply(res, status, { 'content-type': 'application/problem+json' }, `{"status":${status}}`));
    const res = await createRetryingFetch()(r.url, { method: 'POST', body: '{}' });
    expect(res.status).toBe(status);
    expect(await res.json()).toEqual({ status });
    expect(r.seen()).toHaveLength(1);
    expect(attemptsOf(res)).toHaveLength(1);
  });

  it('throws RetryExhaustedError after maxAttempts, with the history and the last response', async () => {
    const r = route((_n, res) => reply(res, 503, {}, 'down'));
    const { sleep, waits } = recordingSleep();
    const error = await createRetryingFetch({ sleep, maxAttempts: 3, baseDelayMs: 100, random: () => 0.999 })(r.url, { method: 'DELETE' }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(RetryExhaustedError);
    const exhausted = error as RetryExhaustedError;
    expect(exhausted.code).toBe('retry-attempts-exhausted');
    expect(exhausted.attempts.map((a) => [a.attempt, a.status, a.delayMs])).toEqual([
      [1, 503, 99],
      [2, 503, 199],
      [3, 503, 0],
    ]);
    expect(await exhausted.response?.text()).toBe('down');
    expect(r.seen()).toHaveLength(3);
    expect(new Set(r.seen().map((q) => q.key)).size).toBe(1);
    expect(waits).toEqual([99, 199]);
  });

  it('keeps every full-jitter wait below min(maxDelayMs, baseDelayMs × 2^(n−1))', async () => {
    const r = route((_n, res) => reply(res, 500));
    for (const value of [0, 0.25, 0.999_999]) {
      const { sleep, waits } = recordingSleep();
      await expect(
        createRetryingFetch({ sleep, maxAttempts: 7, baseDelayMs: 100, maxDelayMs: 1_000, random: () => value })(r.url, {
          method: 'POST',
        }),
      ).rejects.toBeInstanceOf(RetryExhaustedError);
      expect(waits).toHaveLength(6);
      waits.forEach((wait, i) => {
        const ceiling = Math.min(1_000, 100 * 2 ** i);
        expect(wait).toBeGreaterThanOrEqual(0);
        expect(wait).toBeLessThan(ceiling);
        expect(wait).toBe(Math.floor(value * ceiling));
      });
    }
  });

  it('sends no key on safe methods but still retries their 5xx', async () => {
    const r = route((n, res) => (n < 3 ? reply(res, 502) : reply(res, 200, {}, 'ok')));
    const { sleep } = recordingSleep();
    const res = await createRetryingFetch({ sleep })(r.url);
    expect(await res.text()).toBe('ok');
    expect(r.seen().map((q) => [q.method, q.key])).toEqual([
      ['GET', undefined],
      ['GET', undefined],
      ['GET', undefined],
    ]);
    expect(attemptsOf(res)?.every((a) => a.key === undefined)).toBe(true);
  });

  it("sends the caller's key as an sf-string and keeps it on every attempt", async () => {
    const r = route((n, res) => (n === 1 ? 'drop' : reply(res, 200)));
    const { sleep } = recordingSleep();
    const res = await createRetryingFetch({ sleep })(r.url, { method: 'PATCH', idempotencyKey: 'order-42 "a"' });
    expect(r.seen().map((q) => q.key)).toEqual(['"order-42 \\"a\\""', '"order-42 \\"a\\""']);
    expect(attemptsOf(res)?.map((a) => a.key)).toEqual(['order-42 "a"', 'order-42 "a"']);
  });

  it('keeps an Idempotency-Key header the caller set', async () => {
    const r = route((_n, res) => reply(res, 200));
    await createRetryingFetch()(r.url, { method: 'POST', headers: { 'Idempotency-Key': 'job-9' } });
    expect(r.seen()[0]?.key).toBe('"job-9"');
  });

  it('refuses an invalid key before sending anything', async () => {
    const r = route((_n, res) => reply(res, 200));
    await expect(createRetryingFetch()(r.url, { method: 'POST', idempotencyKey: '' })).rejects.toBeInstanceOf(
      IdempotencyKeyInvalidError,
    );
    await expect(createRetryingFetch({ generateKey: () => 'x'.repeat(256) })(r.url, { method: 'POST' })).rejects.toBeInstanceOf(
      IdempotencyKeyInvalidError,
    );
    expect(r.seen()).toHaveLength(0);
  });

  it('stops at once when the AbortSignal aborts during an attempt', async () => {
    const r = route((_n, res) => {
      const timer = setTimeout(() => reply(res, 200), 5_000);
      res.on('close', () => clearTimeout(timer));
      return undefined;
    });
    const controller = new AbortController();
    const attempts: AttemptRecord[] = [];
    const started = Date.now();
    const pending = createRetryingFetch({ onAttempt: (a) => attempts.push(a) })(r.url, {
      method: 'POST',
      signal: controller.signal,
    });
    setTimeout(() => controller.abort(), 100);
    await expect(pending).rejects.toMatchObject({ name: 'AbortError' });
    expect(Date.now() - started).toBeLessThan(2_000);
    expect(attempts).toHaveLength(0);
    expect(r.seen()).toHaveLength(1);
  });

  it('stops at once when the AbortSignal aborts during a backoff wait', async () => {
    const r = route((_n, res) => reply(res, 503, { 'retry-after': '3' }));
    const controller = new AbortController();
    const reason = new Error('user cancelled');
    const started = Date.now();
    const pending = createRetryingFetch()(r.url, { method: 'POST', signal: controller.signal });
    setTimeout(() => controller.abort(reason), 150);
    await expect(pending).rejects.toBe(reason);
    expect(Date.now() - started).toBeLessThan(2_000);
    expect(r.seen()).toHaveLength(1);
  });

  it('rejects at once with an already aborted signal', async () => {
    const r = route((_n, res) => reply(res, 200));
    await expect(createRetryingFetch()(r.url, { method: 'POST', signal: AbortSignal.abort() })).rejects.toMatchObject({
      name: 'AbortError',
    });
    expect(r.seen()).toHaveLength(0);
  });

  it('gives up when the next wait would pass the deadline', async () => {
    const clock = new ManualClock(0);
    const r = route((_n, res) => reply(res, 503));
    const { sleep, waits } = recordingSleep(clock);
    const error = await createRetryingFetch({
      sleep,
      clock,
      maxAttempts: 50,
      baseDelayMs: 200,
      maxDelayMs: 10_000,
      deadlineMs: 1_000,
      random: () => 0.999,
    })(r.url, { method: 'POST' }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect((error as RetryExhaustedError).code).toBe('retry-deadline-exceeded');
    // Waits 199 + 399 = 598 ms; the next (799) would end past 1,000.
    expect(waits).toEqual([199, 399]);
    expect(r.seen()).toHaveLength(3);
  });

  it('cuts an attempt short at the deadline', async () => {
    const r = route((_n, res) => {
      const timer = setTimeout(() => reply(res, 200), 5_000);
      res.on('close', () => clearTimeout(timer));
      return undefined;
    });
    const started = Date.now();
    const error = await createRetryingFetch({ deadlineMs: 200 })(r.url, { method: 'POST' }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(Date.now() - started).toBeLessThan(2_000);
    expect(error).toBeInstanceOf(RetryExhaustedError);
    const exhausted = error as RetryExhaustedError;
    expect(exhausted.code).toBe('retry-deadline-exceeded');
    expect(exhausted.attempts).toHaveLength(1);
    expect((exhausted.cause as DOMException).name).toBe('TimeoutError');
  });
});

describe('createRetryingFetch options', () => {
  it.each<[string, RetryingFetchOptions]>([
    ['maxAttempts', { maxAttempts: 0 }],
    ['maxAttempts', { maxAttempts: 1.5 }],
    ['baseDelayMs', { baseDelayMs: -1 }],
    ['maxDelayMs', { maxDelayMs: Number.NaN }],
    ['attemptTimeoutMs', { attemptTimeoutMs: 0 }],
    ['deadlineMs', { deadlineMs: Infinity }],
    ['baseDelayMs', { baseDelayMs: 2_000, maxDelayMs: 1_000 }],
    ['fetch', { fetch: 'nope' as unknown as typeof fetch }],
    ['generateKey', { generateKey: 1 as unknown as () => string }],
    ['random', { random: null as unknown as () => number }],
    ['sleep', { sleep: {} as unknown as RetryingFetchOptions['sleep'] & object }],
    ['onAttempt', { onAttempt: 'log' as unknown as () => void }],
    ['clock', { clock: {} as unknown as ManualClock }],
    ['methods', { methods: ['POST', 'NOT A METHOD'] }],
  ])('throws a TypeError naming %s', (name, options) => {
    expect(() => createRetryingFetch(options)).toThrow(TypeError);
    expect(() => createRetryingFetch(options)).toThrow(`"${name}"`);
  });
});

describe('parseRetryAfter', () => {
  it('reads delta-seconds and HTTP-dates, and ignores anything else', () => {
    const now = Date.UTC(2026, 0, 1);
    expect(parseRetryAfter('0', now)).toBe(0);
    expect(parseRetryAfter(' 7 ', now)).toBe(7_000);
    expect(parseRetryAfter(new Date(now + 2_000).toUTCString(), now)).toBe(2_000);
    expect(parseRetryAfter(new Date(now - 60_000).toUTCString(), now)).toBe(0);
    expect(parseRetryAfter(null, now)).toBeUndefined();
    expect(parseRetryAfter('-1', now)).toBeUndefined();
    expect(parseRetryAfter('1.5', now)).toBeUndefined();
    expect(parseRetryAfter('2027-01-01', now)).toBeUndefined();
    expect(parseRetryAfter('soon', now)).toBeUndefined();
  });
});

describe('fullJitterDelay', () => {
  it('draws from [0, min(max, base × 2^(attempt−1)))', () => {
    expect(fullJitterDelay(1, 100, 5_000, () => 0)).toBe(0);
    expect(fullJitterDelay(1, 100, 5_000, () => 0.5)).toBe(50);
    expect(fullJitterDelay(4, 100, 5_000, () => 0.5)).toBe(400);
    expect(fullJitterDelay(20, 100, 5_000, () => 0.5)).toBe(2_500);
    expect(fullJitterDelay(3, 100, 5_000, () => 1)).toBe(399);
  });
});
