import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import BetterSqlite3 from 'better-sqlite3';
import request from 'supertest';
import { afterEach, describe, expect, it } from 'vitest';
import { createPaymentsApp } from '../../../src/demo/payments/app.js';
import type { InjectedFault } from '../../../src/demo/harness/chaos.js';
import { SqliteChargeLedger } from '../../../src/demo/payments/sqlite-ledger.js';
import { FAULT_HEADER } from '../../../src/demo/harness/chaos.js';
import { createReceiver } from '../../../src/receiver.js';
import { idempotency } from '../../../src/http/express.js';
import { createMemoryStore } from '../../../src/stores/memory.js';
import { createSqliteStore } from '../../../src/stores/sqlite/index.js';

const closers: (() => unknown)[] = [];
afterEach(async () => {
  for (const close of closers.splice(0).reverse()) await close();
});

function memoryApp(options: { unsafe?: boolean; slowMs?: number } = {}) {
  const database = new BetterSqlite3(':memory:');
  closers.push(() => database.close());
  const ledger = new SqliteChargeLedger(database);
  const faults: InjectedFault[] = [];
  let next = 0;
  const app = createPaymentsApp({
    ledger,
    idempotency: options.unsafe ? undefined : idempotency({ receiver: createReceiver({ store: createMemoryStore() }) }),
    transactional: false,
    slowMs: options.slowMs ?? 50,
    onFault: (fault) => faults.push(fault),
    generateId: () => `pay_${++next}`,
    clock: { now: () => Date.UTC(2026, 0, 2, 3, 4, 5) },
  });
  return { app, ledger, faults };
}

async function listen(server: Server): Promise<string> {
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  closers.push(() => new Promise((resolve) => server.close(resolve)));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

describe('payments API', () => {
  it('creates a charge with 201 + Location, replays it for the same key, and serves it on GET', async () => {
    const { app, ledger } = memoryApp();
    const post = () => request(app).post('/payments').set('Idempotency-Key', 'k-1').send({ amount: 1250, currency: 'EUR' });
    const first = await post();
    expect(first.status).toBe(201);
    expect(first.headers['location']).toBe('/payments/pay_1');
    expect(first.body).toEqual({
      id: 'pay_1',
      amount: 1250,
      currency: 'EUR',
      status: 'succeeded',
      idempotencyKey: 'k-1',
      created: '2026-01-02T03:04:05.000Z',
    });
    expect(first.headers['idempotent-replayed']).toBeUndefined();
    const again = await post();
    expect(again.status).toBe(201);
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(again.text).toBe(first.text);
    expect(await ledger.list('k-')).toHaveLength(1);
    const got = await request(app).get('/payments/pay_1');
    expect(got.status).toBe(200);
    expect(got.body).toEqual(first.body);
  });

  it.each([
    [{ amount: 0, currency: 'EUR' }, 422, 'invalid-amount'],
    [{ amount: 12.5, currency: 'EUR' }, 422, 'invalid-amount'],
    [{ amount: '100', currency: 'EUR' }, 422, 'invalid-amount'],
    [{ amount: 100, currency: 'eur' }, 422, 'invalid-currency'],
    [{ amount: 100 }, 422, 'invalid-currency'],
    [[100, 'EUR'], 400, 'invalid-body'],
  ])('answers %j with %i problem+json %s and writes nothing', async (body, status, slug) => {
    const { app, ledger } = memoryApp();
    const res = await request(app).post('/payments').set('Idempotency-Key', 'bad-1').send(body);
    expect(res.status).toBe(status);
    expect(res.headers['content-type']).toMatch(/^application\/problem\+json/);
    expect(JSON.parse(res.text)).toMatchObject({ type: `https://retrysafe.dev/problems/demo/${slug}`, status });
    expect(await ledger.list('')).toHaveLength(0);
  });

  it('answers malformed JSON with 400 problem+json', async () => {
    const { app } = memoryApp();
    const res = await request(app).post('/payments').set('Idempotency-Key', 'bad-2').set('content-type', 'application/json').send('{"amount":');
    expect(res.status).toBe(400);
    expect(res.headers['content-type']).toMatch(/^application\/problem\+json/);
    expect(JSON.parse(res.text)).toMatchObject({ type: 'https://retrysafe.dev/problems/demo/malformed-json', status: 400 });
  });

  it('answers an unknown payment with 404 problem+json', async () => {
    const { app } = memoryApp();
    const res = await request(app).get('/payments/pay_nope');
    expect(res.status).toBe(404);
    expect(res.headers['content-type']).toMatch(/^application\/problem\+json/);
    expect(JSON.parse(res.text)).toMatchObject({ type: 'https://retrysafe.dev/problems/demo/payment-not-found', status: 404 });
  });

  it('refuses a POST without an Idempotency-Key (the middleware requires one)', async () => {
    const { app, ledger } = memoryApp();
    const res = await request(app).post('/payments').send({ amount: 100, currency: 'EUR' });
    expect(res.status).toBe(400);
    expect(await ledger.list('')).toHaveLength(0);
  });

  it('lost-reply: commits the charge, then drops the connection; the retry gets the saved answer', async () => {
    const { app, ledger, faults } = memoryApp();
    const origin = await listen(createServer(app));
    const init = (fault?: string): RequestInit => ({
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': 'lost-1', ...(fault && { [FAULT_HEADER]: fault }) },
      body: JSON.stringify({ amount: 700, currency: 'USD' }),
    });
    await expect(fetch(`${origin}/payments`, init('lost-reply'))).rejects.toThrow(TypeError);
    expect(faults).toEqual([{ key: 'lost-1', fault: 'lost-reply' }]);
    expect(await ledger.list('lost-')).toHaveLength(1);
    // The fault applies once per key: a retry that still carries the header is answered.
    const retry = await fetch(`${origin}/payments`, init('lost-reply'));
    expect(retry.status).toBe(201);
    expect(retry.headers.get('idempotent-replayed')).toBe('true');
    expect(((await retry.json()) as { id: string }).id).toBe((await ledger.list('lost-'))[0]?.id);
  });

  it('plain store: the crash after the record waits for the handlers in flight, and lets no new request in', async () => {
    const { app, ledger, faults } = memoryApp({ slowMs: 300 });
    const origin = await listen(createServer(app));
    const aborts = new AbortController();
    closers.push(() => aborts.abort());
    const send = (key: string, fault?: string): Promise<Response> =>
      fetch(`${origin}/payments`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': key, ...(fault && { [FAULT_HEADER]: fault }) },
        body: JSON.stringify({ amount: 500, currency: 'CHF' }),
        signal: aborts.signal,
      });
    const slow = send('slow-1', 'slow');
    while (!faults.some((f) => f.fault === 'slow')) await new Promise((resolve) => setTimeout(resolve, 5));
    // The crash point is reached while the slow handler (its charge written, its record not) still runs.
    void send('crash-1', 'crash-after-commit').catch(() => undefined);
    while ((await ledger.list('crash-')).length === 0) await new Promise((resolve) => setTimeout(resolve, 5));
    const parked = send('late-1').catch(() => 'never answered');
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(faults.map((f) => f.fault)).toEqual(['slow']);
    expect((await slow).status).toBe(201);
    expect(faults.map((f) => f.fault)).toEqual(['slow', 'crash-after-commit']);
    // Draining: the request that came in meanwhile never reached the handler.
    const late = await Promise.race([parked, new Promise((resolve) => setTimeout(() => resolve('parked'), 100))]);
    expect(late).toBe('parked');
    expect(await ledger.list('late-')).toHaveLength(0);
  });

  it('--unsafe: the same lost reply and retry charge twice (what the demo must be able to detect)', async () => {
    const { app, ledger } = memoryApp({ unsafe: true });
    const origin = await listen(createServer(app));
    const send = (fault?: string) =>
      fetch(`${origin}/payments`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': '"u-1"', ...(fault && { [FAULT_HEADER]: fault }) },
        body: JSON.stringify({ amount: 700, currency: 'USD' }),
      });
    await expect(send('lost-reply')).rejects.toThrow(TypeError);
    expect((await send()).status).toBe(201);
    expect((await ledger.list('u-')).map((charge) => charge.idempotencyKey)).toEqual(['u-1', 'u-1']);
  });

  it('transactional SQLite: parallel duplicates write one row and all get the same payment', async () => {
    const store = createSqliteStore({ path: ':memory:' });
    closers.push(() => store.close());
    const ledger = new SqliteChargeLedger(store.database);
    const app = createPaymentsApp({
      ledger,
      idempotency: idempotency({ receiver: createReceiver({ store, transactional: true }) }),
      transactional: true,
      slowMs: 50,
      onFault: () => undefined,
    });
    const origin = await listen(createServer(app));
    const responses = await Promise.all(
      Array.from({ length: 8 }, () =>
        fetch(`${origin}/payments`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'idempotency-key': 'dup-1', [FAULT_HEADER]: 'slow' },
          body: JSON.stringify({ amount: 99, currency: 'GBP' }),
        }),
      ),
    );
    const bodies = await Promise.all(responses.map((res) => res.text()));
    expect(responses.map((res) => res.status)).toEqual(Array(8).fill(201));
    expect(new Set(bodies).size).toBe(1);
    const rows = await ledger.list('dup-');
    expect(rows).toHaveLength(1);
    expect((JSON.parse(bodies[0] ?? '') as { id: string }).id).toBe(rows[0]?.id);
  });
});
