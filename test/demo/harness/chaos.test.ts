/**
 * The chaos middleware's crash points: the crash is reported with the number of requests still in flight
 * (the ones that may commit before the SIGKILL lands), and from then on no request is let in.
 */
import { once } from 'node:events';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import express from 'express';
import { afterEach, describe, expect, it } from 'vitest';
import { chaos, faultOf, FAULT_HEADER, reachCrashPoint, type InjectedFault } from '../../../src/demo/harness/chaos.js';

const closers: (() => unknown)[] = [];
afterEach(async () => {
  for (const close of closers.splice(0).reverse()) await close();
});

/**
 * An app whose requests keyed `held-*` wait for `release()`, whose first request keyed `refused-*` is
 * answered 409 before the handler's work (as a lost lease or a duplicate in flight is), and whose handler
 * reaches the mid-handler crash point.
 */
async function start(): Promise<{ send: (key: string, fault?: string) => Promise<number | 'never answered'>; faults: InjectedFault[]; seen: string[]; release: () => void }> {
  const faults: InjectedFault[] = [];
  const seen: string[] = [];
  let release: () => void = () => undefined;
  const held = new Promise<void>((resolve) => {
    release = resolve;
  });
  const app = express();
  app.post('/x', chaos({ onFault: (fault) => faults.push(fault) }), async (req, res) => {
    const key = req.get('idempotency-key') ?? '';
    seen.push(key);
    if (key.startsWith('refused-') && seen.filter((k) => k === key).length === 1) {
      res.status(409).end();
      return;
    }
    if (key.startsWith('held-')) await held;
    if (faultOf(res)?.fault === 'crash-mid-handler') {
      reachCrashPoint(res);
      return;
    }
    res.status(201).end();
  });
  const server = createServer(app);
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const aborts = new AbortController();
  closers.push(
    () =>
      new Promise((resolve) => {
        server.close(resolve);
        server.closeAllConnections();
      }),
  );
  closers.push(() => aborts.abort());
  closers.push(release);
  const origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const send = (key: string, fault?: string): Promise<number | 'never answered'> =>
    fetch(`${origin}/x`, { method: 'POST', headers: { 'idempotency-key': key, ...(fault && { [FAULT_HEADER]: fault }) }, signal: aborts.signal }).then(
      (response) => response.status,
      () => 'never answered' as const,
    );
  return { send, faults, seen, release: () => release() };
}

async function until(condition: () => boolean): Promise<void> {
  while (!condition()) await new Promise((resolve) => setTimeout(resolve, 5));
}

describe('chaos crash points', () => {
  it.each(['crash-mid-handler', 'crash-after-commit'])('%s: reports the requests in flight, then lets no request in', async (fault) => {
    const { send, faults, seen, release } = await start();
    const held = [send('held-1'), send('held-2')];
    await until(() => seen.length === 2);
    void send('crash-1', fault);
    await until(() => faults.length === 1);
    expect(faults).toEqual([{ key: 'crash-1', fault, inFlight: 2 }]);
    const late = send('late-1');
    const parked = await Promise.race([late, new Promise((resolve) => setTimeout(() => resolve('parked'), 100))]);
    expect(parked).toBe('parked');
    expect(seen).toEqual(['held-1', 'held-2', 'crash-1']);
    // The requests in flight still finish, as they may in the instant before the SIGKILL lands.
    release();
    expect(await Promise.all(held)).toEqual([201, 201]);
  });

  it.each(['crash-mid-handler', 'crash-after-commit', 'lost-reply'])('%s: an attempt answered without a success leaves the fault to the next one', async (fault) => {
    const { send, faults } = await start();
    expect(await send('refused-1', fault)).toBe(409);
    expect(faults).toEqual([]);
    void send('refused-1', fault);
    await until(() => faults.length === 1);
    expect(faults[0]).toMatchObject({ key: 'refused-1', fault });
  });
});
