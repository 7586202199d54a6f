import { getEventListeners } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createRetryingFetch } from '../../src/client/fetch.js';

let server: Server;
let origin: string;
let served = 0;

beforeAll(async () => {
  // The first attempt of each key gets a 503, so each call takes two attempts.
  const seen = new Set<string>();
  server = createServer((req, res) => {
    req.resume().on('end', () => {
      served++;
      const key = `${req.url ?? ''} ${String(req.headers['idempotency-key'])}`;
      const first = !seen.has(key);
      seen.add(key);
      res.writeHead(first ? 503 : 201, { 'content-type': 'text/plain' }).end('ok');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  await new Promise((resolve) => server.close(resolve));
});

describe('createRetryingFetch and the caller\'s long-lived AbortSignal', () => {
  it('leaves no abort listener on the signal after many calls with retries', async () => {
    const run = new AbortController();
    const fetch = createRetryingFetch({ baseDelayMs: 1, maxDelayMs: 1, attemptTimeoutMs: 5_000 });
    const calls = 40;
    for (let i = 0; i < calls; i++) {
      const response = await fetch(`${origin}/pay`, { method: 'POST', body: `{"n":${i}}`, idempotencyKey: `k-${i}`, signal: run.signal });
      expect(response.status).toBe(201);
      await response.text();
    }
    expect(served).toBe(2 * calls);
    // Each call sent two attempts; a listener left per call (or per attempt) would show here.
    expect(getEventListeners(run.signal, 'abort')).toHaveLength(0);
  });

  it('many calls in flight on one signal share one listener, and no MaxListenersExceededWarning is emitted', async () => {
    const run = new AbortController();
    const warnings: Error[] = [];
    const onWarning = (warning: Error): void => {
      warnings.push(warning);
    };
    process.on('warning', onWarning);
    try {
      const fetch = createRetryingFetch({ baseDelayMs: 20, maxDelayMs: 20, attemptTimeoutMs: 5_000 });
      const calls = Array.from({ length: 30 }, (_, i) =>
        fetch(`${origin}/many`, { method: 'POST', body: '{}', idempotencyKey: `m-${i}`, signal: run.signal }).then((response) => response.text()),
      );
      // While they are in flight (and while they wait out their backoff), the signal carries one listener.
      await new Promise((resolve) => setTimeout(resolve, 10));
      expect(getEventListeners(run.signal, 'abort').length).toBeLessThanOrEqual(1);
      await Promise.all(calls);
      await new Promise((resolve) => setImmediate(resolve));
    } finally {
      process.off('warning', onWarning);
    }
    expect(warnings.filter((warning) => warning.name === 'MaxListenersExceededWarning')).toEqual([]);
    expect(getEventListeners(run.signal, 'abort')).toHaveLength(0);
  });

  it('still aborts an attempt in flight when the caller\'s signal aborts', async () => {
    const hang = createServer(() => undefined);
    await new Promise<void>((resolve) => hang.listen(0, '127.0.0.1', resolve));
    try {
      const run = new AbortController();
      const fetch = createRetryingFetch({ attemptTimeoutMs: 10_000 });
      const reason = new Error('stop');
      const pending = fetch(`http://127.0.0.1:${(hang.address() as AddressInfo).port}/`, { method: 'POST', idempotencyKey: 'k', signal: run.signal });
      setTimeout(() => run.abort(reason), 50);
      await expect(pending).rejects.toBe(reason);
      expect(getEventListeners(run.signal, 'abort')).toHaveLength(0);
    } finally {
      hang.closeAllConnections();
      await new Promise((resolve) => hang.close(resolve));
    }
  });
});
