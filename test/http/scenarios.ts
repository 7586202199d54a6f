/**
 * The HTTP behaviour table, written once and run against every framework driver, on
 * the memory store by default or on any store a {@link ScenarioStore} opens (PostgreSQL and Redis run it
 * through one framework each, in test/stores/postgres-http.test.ts and redis-http.test.ts).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import BetterSqlite3, { type Database } from 'better-sqlite3';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/core/clock.js';
import { type ReceiverOptions } from '../../src/core/receiver.js';
import { createReceiver } from '../../src/receiver.js';
import { createSqliteStore, type SqliteStore } from '../../src/stores/sqlite/index.js';
import type { IdempotencyStore } from '../../src/core/store.js';
import { gateCommits } from '../support/commit-gate.js';
import { memoryScenarioStore, type ScenarioStore } from './scenario-stores.js';
import {
  gate,
  instrument,
  type Driver,
  type HandlerInput,
  type HandlerReply,
  type InstrumentedStore,
  type ScenarioOptions,
  type TestClient,
  type TestHandler,
  type TestRequest,
  type TestResponse,
} from '../support/http.js';

const BASE = 'https://retrysafe.dev/problems/';

/** Every byte value, twice, so any text decoding on the way would show. */
export const BINARY = Uint8Array.from({ length: 512 }, (_, i) => (i * 7 + 3) % 256);

interface Harness {
  readonly client: TestClient;
  readonly store: InstrumentedStore;
  /** Handler executions so far. */
  readonly calls: HandlerInput[];
}

export function httpScenarios(driver: Driver, stores: ScenarioStore = memoryScenarioStore): void {
  describe(`${driver.name}: HTTP behaviour table (${stores.name})`, () => {
    const open: TestClient[] = [];
    const opened: IdempotencyStore[] = [];
    beforeAll(async () => {
      await stores.setup?.();
    });
    afterAll(async () => {
      await stores.teardown?.();
    });
    afterEach(async () => {
      await Promise.all(open.splice(0).map((client) => client.close()));
      await Promise.all(opened.splice(0).map((store) => store.close()));
    });

    async function start(
      reply: (input: HandlerInput) => Promise<HandlerReply> | HandlerReply,
      receiverOptions: Omit<ReceiverOptions, 'clock'> & { clock?: ManualClock } = {},
      options: Omit<ScenarioOptions, 'receiver'> = {},
    ): Promise<Harness> {
      const clock = receiverOptions.clock;
      const backing = await stores.open(clock);
      opened.push(backing);
      const store = instrument(backing);
      const receiver = createReceiver({ store, ...receiverOptions });
      const calls: HandlerInput[] = [];
      const handler: TestHandler = async (input) => {
        calls.push(input);
        return reply(input);
      };
      const client = await driver.start({ receiver, ...options }, handler);
      open.push(client);
      return { client, store, calls };
    }

    const created = (input: HandlerInput): HandlerReply => ({
      status: 201,
      headers: {
        'content-type': 'application/json; charset=utf-8',
        location: '/payments/1',
        'set-cookie': ['session=abc; Path=/', 'other=1'],
        'x-request-id': `run-${input.idempotency?.claim.leaseToken ?? 'none'}`,
      },
      body: JSON.stringify({ id: 'pay_1', key: input.idempotency?.key ?? null, scope: input.idempotency?.scope ?? null }),
    });

    const post = (key: string | undefined, extra: Partial<TestRequest> = {}): TestRequest => ({
      method: 'POST',
      path: '/payments',
      headers: { 'content-type': 'application/json', ...(key !== undefined && { 'idempotency-key': key }), ...extra.headers },
      body: '{"amount":100}',
      ...(extra.method !== undefined && { method: extra.method }),
      ...(extra.path !== undefined && { path: extra.path }),
      ...('body' in extra && { body: extra.body }),
    });

    /** A problem answered to a retry: the replay header says it stands for the first request's outcome. */
    function expectProblemReplay(res: TestResponse, status: number, code: string): void {
      expect(res.status).toBe(status);
      expect(res.header('content-type')).toMatch(/^application\/problem\+json/);
      expect(JSON.parse(res.body.toString('utf8'))).toMatchObject({ type: `${BASE}${code}`, status, code });
      expect(res.header('idempotent-replayed')).toBe('true');
    }

    function expectProblem(res: TestResponse, status: number, code: string): void {
      expect(res.status).toBe(status);
      expect(res.header('content-type')).toMatch(/^application\/problem\+json/);
      const body = JSON.parse(res.body.toString('utf8')) as Record<string, unknown>;
      expect(body).toMatchObject({ type: `${BASE}${code}`, status, code });
      expect(typeof body['title']).toBe('string');
      expect(typeof body['detail']).toBe('string');
      expect(res.header('idempotent-replayed')).toBeUndefined();
    }

    it('refuses a required route without a key: 400 idempotency-key-missing, nothing stored, handler not run', async () => {
      const { client, store, calls } = await start(created);
      expectProblem(await client.request(post(undefined)), 400, 'idempotency-key-missing');
      expect(calls).toHaveLength(0);
      expect(store.claims).toBe(0);
    });

    it('runs an optional route without a key every time and stores nothing', async () => {
      const { client, store, calls } = await start(created, {}, { required: false });
      const first = await client.request(post(undefined));
      const second = await client.request(post(undefined));
      expect([first.status, second.status]).toEqual([201, 201]);
      expect(second.header('idempotent-replayed')).toBeUndefined();
      expect(calls).toHaveLength(2);
      expect(store.claims).toBe(0);
    });

    it.each([
      ['empty', ''],
      ['256 characters', 'k'.repeat(256)],
      ['non-ASCII', 'caf\u00e9'],
      ['an unterminated sf-string', '"abc'],
      ['a bare key with a parameter', 'abc;v=1'],
      ['a bare list of keys', 'a,b'],
      ['a list of sf-strings', '"a", "b"'],
      ['an sf-string with a malformed parameter', '"abc";V=1'],
      ['a 10 kB header', 'x'.repeat(10_240)],
    ])('refuses a malformed key (%s): 400 idempotency-key-invalid', async (_label, key) => {
      const { client, store, calls } = await start(created);
      expectProblem(await client.request(post(key)), 400, 'idempotency-key-invalid');
      expect(calls).toHaveLength(0);
      expect(store.claims).toBe(0);
    });

    it('accepts a 255-character key and an sf-string key', async () => {
      const { client, calls } = await start(created);
      expect((await client.request(post('k'.repeat(255)))).status).toBe(201);
      const quoted = await client.request(post('"a b"'));
      expect(quoted.status).toBe(201);
      expect(JSON.parse(quoted.body.toString('utf8'))).toMatchObject({ key: 'a b' });
      expect(calls).toHaveLength(2);
    });

    it('reads "abc";v=1, "abc" and bare abc as one key (parameters ignored) and refuses bare abc;v=1, naming the rule', async () => {
      const { client, calls } = await start(created);
      const first = await client.request(post('"abc";v=1'));
      expect(first.status).toBe(201);
      expect(JSON.parse(first.body.toString('utf8'))).toMatchObject({ key: 'abc' });
      for (const spelling of ['"abc"', 'abc', '"abc"; v=2;x']) {
        const again = await client.request(post(spelling));
        expect(again.header('idempotent-replayed')).toBe('true');
        expect(again.body.equals(first.body)).toBe(true);
      }
      const bare = await client.request(post('abc;v=1'));
      expectProblem(bare, 400, 'idempotency-key-invalid');
      expect((JSON.parse(bare.body.toString('utf8')) as { detail: string }).detail).toMatch(/a bare key may not contain "," or ";"/);
      const quoted = await client.request(post('"abc;v=1"'));
      expect(quoted.status).toBe(201);
      expect(JSON.parse(quoted.body.toString('utf8'))).toMatchObject({ key: 'abc;v=1' });
      expect(calls).toHaveLength(2);
    });

    it.each(['GET', 'HEAD', 'OPTIONS', 'PUT', 'DELETE'])('passes %s through untouched, key or not', async (method) => {
      const { client, store, calls } = await start(() => ({ status: 200, headers: { 'content-type': 'text/plain' }, body: 'ok' }));
      const withKey = await client.request({ method, path: '/payments', headers: { 'idempotency-key': 'k1' } });
      const again = await client.request({ method, path: '/payments', headers: { 'idempotency-key': 'k1' } });
      const without = await client.request({ method, path: '/payments' });
      expect([withKey.status, again.status, without.status]).toEqual([200, 200, 200]);
      expect(again.header('idempotent-replayed')).toBeUndefined();
      expect(calls).toHaveLength(3);
      expect(store.claims).toBe(0);
    });

    it('runs the first request once and replays it: same status, allow-listed headers, same bytes, no cookies', async () => {
      const { client, calls } = await start(created);
      const first = await client.request(post('key-1'));
      expect(first.status).toBe(201);
      expect(first.header('idempotent-replayed')).toBeUndefined();
      expect(first.cookies).toEqual(['session=abc; Path=/', 'other=1']);
      expect(first.header('x-request-id')).toMatch(/^run-/);

      const retry = await client.request(post('key-1'));
      expect(calls).toHaveLength(1);
      expect(retry.status).toBe(201);
      expect(retry.header('idempotent-replayed')).toBe('true');
      expect(retry.header('location')).toBe('/payments/1');
      expect(retry.header('content-type')).toBe(first.header('content-type'));
      expect(retry.header('x-request-id')).toBeUndefined();
      expect(retry.cookies).toEqual([]);
      expect(retry.body.equals(first.body)).toBe(true);
      expect(JSON.parse(retry.body.toString('utf8'))).toEqual({ id: 'pay_1', key: 'key-1', scope: '' });
    });

    it('replays binary request and response bodies byte for byte', async () => {
      const { client, calls } = await start(() => ({ status: 200, headers: { 'content-type': 'application/octet-stream' }, body: BINARY }));
      const request = post('bin', { headers: { 'content-type': 'application/octet-stream' }, body: BINARY.slice().reverse() });
      const first = await client.request(request);
      const retry = await client.request(request);
      expect(first.body.equals(Buffer.from(BINARY))).toBe(true);
      expect(retry.body.equals(Buffer.from(BINARY))).toBe(true);
      expect(retry.header('idempotent-replayed')).toBe('true');
      expect(calls).toHaveLength(1);
      const otherBytes = Uint8Array.from(BINARY.slice().reverse());
      otherBytes[100] = (otherBytes[100] ?? 0) ^ 1;
      expectProblem(await client.request({ ...request, body: otherBytes }), 422, 'idempotency-key-reused');
    });

    it('handles empty and non-JSON bodies', async () => {
      const { client, calls } = await start(() => ({ status: 204 }));
      const empty: TestRequest = { method: 'POST', path: '/ping', headers: { 'idempotency-key': 'e' } };
      expect((await client.request(empty)).status).toBe(204);
      const retry = await client.request(empty);
      expect(retry.status).toBe(204);
      expect(retry.header('idempotent-replayed')).toBe('true');
      expect(retry.body.byteLength).toBe(0);

      const text: TestRequest = { method: 'POST', path: '/ping', headers: { 'idempotency-key': 't', 'content-type': 'text/plain' }, body: 'hello' };
      expect((await client.request(text)).status).toBe(204);
      expect((await client.request(text)).header('idempotent-replayed')).toBe('true');
      expectProblem(await client.request({ ...text, body: 'hellO' }), 422, 'idempotency-key-reused');
      expect(calls).toHaveLength(2);
    });

    it.each([
      ['body', post('k', { body: '{"amount":101}' })],
      ['query', post('k', { path: '/payments?currency=eur' })],
      ['method', post('k', { method: 'PATCH' })],
      ['route', post('k', { path: '/refunds' })],
    ])('refuses the same key with another %s (422) and leaves the record untouched', async (_label, other) => {
      const { client, calls } = await start(created);
      const first = await client.request(post('k'));
      expectProblem(await client.request(other), 422, 'idempotency-key-reused');
      const after = await client.request(post('k'));
      expect(after.status).toBe(201);
      expect(after.header('idempotent-replayed')).toBe('true');
      expect(after.body.equals(first.body)).toBe(true);
      expect(calls).toHaveLength(1);
    });

    it('treats reordered query parameters as the same request', async () => {
      const { client, calls } = await start(created);
      await client.request(post('q', { path: '/payments?a=1&b=2' }));
      const retry = await client.request(post('q', { path: '/payments?b=2&a=1' }));
      expect(retry.header('idempotent-replayed')).toBe('true');
      expect(calls).toHaveLength(1);
    });

    it('answers a duplicate in flight with 409 idempotency-request-in-progress and Retry-After: 1', async () => {
      const held = gate();
      const { client, calls } = await start(async (input) => {
        await held.promise;
        return created(input);
      });
      const original = client.request(post('busy'));
      await waitUntil(() => calls.length === 1);
      const duplicate = await client.request(post('busy'));
      expectProblem(duplicate, 409, 'idempotency-request-in-progress');
      expect(duplicate.header('retry-after')).toBe('1');
      held.open();
      expect((await original).status).toBe(201);
      expect(calls).toHaveLength(1);
    });

    it('in wait mode hands the duplicate the original response', async () => {
      const held = gate();
      const { client, store, calls } = await start(
        async (input) => {
          await held.promise;
          return created(input);
        },
        { inFlight: 'wait' },
      );
      const original = client.request(post('w'));
      await waitUntil(() => calls.length === 1);
      const duplicate = client.request(post('w'));
      await store.claimed(2);
      held.open();
      const [a, b] = await Promise.all([original, duplicate]);
      expect([a.status, b.status]).toEqual([201, 201]);
      expect(b.header('idempotent-replayed')).toBe('true');
      expect(b.body.equals(a.body)).toBe(true);
      expect(calls).toHaveLength(1);
    });

    it.each(['reject', 'wait'] as const)('runs 20 parallel duplicates once (%s mode)', async (inFlight) => {
      const held = gate();
      const { client, store, calls } = await start(
        async (input) => {
          await held.promise;
          return created(input);
        },
        { inFlight },
      );
      // In reject mode the 19 duplicates are answered before the original may finish: on a networked store a
      // claim still on the wire when it completes would rightly be a replay instead of a 409.
      const duplicatesAnswered = gate();
      let answered = 0;
      const responses = Array.from({ length: 20 }, () =>
        client.request(post('storm')).then((response) => {
          if (++answered === 19) duplicatesAnswered.open();
          return response;
        }),
      );
      if (inFlight === 'reject') await duplicatesAnswered.promise;
      else await store.claimed(20);
      held.open();
      const settled = await Promise.all(responses);
      expect(calls).toHaveLength(1);
      const ok = settled.filter((r) => r.status === 201);
      const busy = settled.filter((r) => r.status === 409);
      expect(ok.length + busy.length).toBe(20);
      expect(ok.length).toBe(inFlight === 'wait' ? 20 : 1);
      for (const r of ok) expect(r.body.equals(ok[0]?.body ?? Buffer.alloc(0))).toBe(true);
      for (const r of busy) expectProblem(r, 409, 'idempotency-request-in-progress');
    });

    it('sends the error of a throwing handler (5xx), releases the key, and runs a retry again', async () => {
      let fail = true;
      const { client, calls } = await start((input) => {
        if (fail) throw new Error('boom');
        return created(input);
      });
      const first = await client.request(post('t'));
      expect(first.status).toBe(500);
      expect(first.header('idempotent-replayed')).toBeUndefined();
      fail = false;
      const retry = await client.request(post('t'));
      expect(retry.status).toBe(201);
      expect(retry.header('idempotent-replayed')).toBeUndefined();
      expect(calls).toHaveLength(2);
    });

    it('releases a returned 500, so the retry runs again', async () => {
      const { client, calls } = await start(() => ({ status: 500, headers: { 'content-type': 'text/plain' }, body: 'down' }));
      expect((await client.request(post('f'))).status).toBe(500);
      const retry = await client.request(post('f'));
      expect(retry.status).toBe(500);
      expect(retry.header('idempotent-replayed')).toBeUndefined();
      expect(calls).toHaveLength(2);
    });

    it('saves and replays a returned 500 when shouldPersist keeps it (Stripe v1)', async () => {
      const { client, calls } = await start(() => ({ status: 500, headers: { 'content-type': 'text/plain' }, body: 'down' }), {
        shouldPersist: () => true,
      });
      await client.request(post('f'));
      const retry = await client.request(post('f'));
      expect(retry.status).toBe(500);
      expect(retry.header('idempotent-replayed')).toBe('true');
      expect(retry.body.toString('utf8')).toBe('down');
      expect(calls).toHaveLength(1);
    });

    it("sends and saves the handler's response when shouldPersist throws; a retry replays it", async () => {
      const { client, store, calls } = await start(created, {
        shouldPersist: () => {
          throw new Error('shouldPersist bug');
        },
      });
      const first = await client.request(post('p'));
      expect(first.status).toBe(201);
      expect(first.header('set-cookie')).toBeDefined();
      expect((await store.get('', 'p'))?.state).toBe('completed');
      const retry = await client.request(post('p'));
      expect(retry.status).toBe(201);
      expect(retry.header('idempotent-replayed')).toBe('true');
      expect(retry.body.equals(first.body)).toBe(true);
      expect(calls).toHaveLength(1);
    });

    if (driver.detectsThrows) {
      it('releases the key of a throwing handler even when shouldPersist keeps 5xx', async () => {
        const { client, calls } = await start(
          () => {
            throw new Error('boom');
          },
          { shouldPersist: () => true },
        );
        expect((await client.request(post('t'))).status).toBe(500);
        const retry = await client.request(post('t'));
        expect(retry.header('idempotent-replayed')).toBeUndefined();
        expect(calls).toHaveLength(2);
      });
    }

    it('saves and replays a 4xx', async () => {
      const { client, calls } = await start(() => ({ status: 404, headers: { 'content-type': 'application/json' }, body: '{"error":"no such account"}' }));
      const first = await client.request(post('n'));
      const retry = await client.request(post('n'));
      expect([first.status, retry.status]).toEqual([404, 404]);
      expect(retry.header('idempotent-replayed')).toBe('true');
      expect(retry.body.equals(first.body)).toBe(true);
      expect(calls).toHaveLength(1);
    });

    it('fails closed with 503 idempotency-store-unavailable when the store is down; the handler does not run', async () => {
      const { client, store, calls } = await start(created);
      store.failClaims = true;
      const res = await client.request(post('s'));
      expectProblem(res, 503, 'idempotency-store-unavailable');
      expect(calls).toHaveLength(0);
      store.failClaims = false;
      expect((await client.request(post('s'))).status).toBe(201);
    });

    it('isolates tenants through scope: the same key runs once per tenant and never replays across', async () => {
      const { client, calls } = await start(created);
      const acme = await client.request(post('same', { headers: { 'x-tenant': 'acme' } }));
      const globex = await client.request(post('same', { headers: { 'x-tenant': 'globex' } }));
      expect([acme.status, globex.status]).toEqual([201, 201]);
      expect(globex.header('idempotent-replayed')).toBeUndefined();
      expect(JSON.parse(globex.body.toString('utf8'))).toMatchObject({ scope: 'globex' });
      const acmeRetry = await client.request(post('same', { headers: { 'x-tenant': 'acme' } }));
      expect(JSON.parse(acmeRetry.body.toString('utf8'))).toMatchObject({ scope: 'acme' });
      expect(acmeRetry.header('idempotent-replayed')).toBe('true');
      expect(calls).toHaveLength(2);
    });

    it('uses the configured problem type base and Retry-After', async () => {
      const held = gate();
      const { client, calls } = await start(
        async (input) => {
          await held.promise;
          return created(input);
        },
        {},
        { problemTypeBase: 'https://api.example.com/errors/', retryAfterSeconds: 7 },
      );
      const original = client.request(post('p'));
      await waitUntil(() => calls.length === 1);
      const duplicate = await client.request(post('p'));
      expect(duplicate.header('retry-after')).toBe('7');
      expect(JSON.parse(duplicate.body.toString('utf8'))).toMatchObject({ type: 'https://api.example.com/errors/idempotency-request-in-progress' });
      held.open();
      await original;
    });

    it('refuses a body over maxBodyBytes with 413 before claiming', async () => {
      const { client, store, calls } = await start(created, {}, { maxBodyBytes: 14 });
      const tooLarge = await client.request(post('big', { body: '{"amount":1000}' }));
      expectProblem(tooLarge, 413, 'idempotency-request-too-large');
      expect(await store.get('', 'big')).toBeUndefined();
      expect(calls).toHaveLength(0);
      expect(store.claims).toBe(0);
      expect((await client.request(post('big', { body: '{"amount":100}' }))).status).toBe(201);
    });

    for (const streamed of [false, true]) {
      const how = streamed ? 'a streamed response' : 'a response';
      it(`sends ${how} over maxResponseBytes whole, keeps it without its body, and answers retries 410 idempotency-response-not-kept`, async () => {
        const bytes = Uint8Array.from({ length: 4_000 }, (_, i) => i % 251);
        const { client, store, calls } = await start(
          () => ({
            status: 201,
            headers: { 'content-type': 'application/octet-stream', location: '/exports/1' },
            ...(streamed ? { chunks: [bytes.subarray(0, 1_000), bytes.subarray(1_000, 2_500), bytes.subarray(2_500)] } : { body: bytes }),
          }),
          {},
          { maxResponseBytes: 3_999 },
        );
        const first = await client.request(post('export'));
        expect(first.status).toBe(201);
        expect(first.body.equals(Buffer.from(bytes))).toBe(true);

        const retries = await Promise.all([client.request(post('export')), client.request(post('export'))]);
        for (const retry of retries) {
          expectProblemReplay(retry, 410, 'idempotency-response-not-kept');
          expect(JSON.parse(retry.body.toString('utf8'))).toMatchObject({ originalStatus: 201 });
          expect(retry.header('location')).toBe('/exports/1');
        }
        // The handler ran once; the record is completed, holding the status but not the body.
        expect(calls).toHaveLength(1);
        const record = await store.get('', 'export');
        expect(record).toMatchObject({ state: 'completed', response: { status: 201 } });
        expect(record?.response?.body.byteLength).toBe(0);
      });

      it(`replays ${how} of exactly maxResponseBytes byte for byte`, async () => {
        const bytes = Uint8Array.from({ length: 4_000 }, (_, i) => (i * 13) % 256);
        const { client, calls } = await start(
          () => ({ status: 200, headers: { 'content-type': 'application/octet-stream' }, ...(streamed ? { chunks: [bytes.subarray(0, 1_500), bytes.subarray(1_500)] } : { body: bytes }) }),
          {},
          { maxResponseBytes: 4_000 },
        );
        await client.request(post('fits'));
        const retry = await client.request(post('fits'));
        expect(retry.status).toBe(200);
        expect(retry.header('idempotent-replayed')).toBe('true');
        expect(retry.body.equals(Buffer.from(bytes))).toBe(true);
        expect(calls).toHaveLength(1);
      });
    }

    it('replays only the configured replayHeaders', async () => {
      const { client } = await start(created, {}, { replayHeaders: ['x-request-id'] });
      const first = await client.request(post('h'));
      const retry = await client.request(post('h'));
      expect(retry.header('x-request-id')).toBe(first.header('x-request-id'));
      expect(retry.header('location')).toBeUndefined();
    });

    it('lets the next retry take over a crashed holder once its lease expires, and fences the holder off', async () => {
      const clock = new ManualClock(1_000_000);
      const stuck = gate();
      const { client, calls } = await start(
        async (input) => {
          if (calls.length === 1) await stuck.promise;
          return created(input);
        },
        { clock, leaseMs: 5_000 },
      );
      const crashed = client.request(post('lease'));
      await waitUntil(() => calls.length === 1);
      expectProblem(await client.request(post('lease')), 409, 'idempotency-request-in-progress');
      clock.advance(5_001);
      const takeover = await client.request(post('lease'));
      expect(takeover.status).toBe(201);
      expect(calls).toHaveLength(2);
      expect(calls[1]?.idempotency?.claim.takeover).toBe(true);
      stuck.open();
      // The old holder's late result is fenced off: it may not overwrite the winner's.
      expectProblem(await crashed, 409, 'idempotency-lease-lost');
      const retry = await client.request(post('lease'));
      expect(retry.header('idempotent-replayed')).toBe('true');
      expect(retry.body.equals(takeover.body)).toBe(true);
      expect(calls).toHaveLength(2);
    });
  });
}

/**
 * Waits until `condition` holds, checking every millisecond. The condition waits on I/O (a claim's round
 * trip to the store, a disk flush), so its bound is a generous deadline (10 s), not a count of event-loop
 * turns: under load a PostgreSQL claim outlasted 10,000 turns and the test failed while nothing was wrong.
 */
export async function waitUntil(condition: () => boolean): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error('condition never held within 10 s');
    await new Promise((resolve) => setTimeout(resolve, 1));
  }
}

/**
 * Transactional mode on the SQLite store: the claim, the handler's row and the saved response commit
 * together, and the response leaves only after COMMIT.
 */
export function transactionalScenarios(driver: Driver): void {
  describe(`${driver.name}: transactional mode (SQLite)`, () => {
    let dir: string;
    let store: SqliteStore;
    let reader: Database;
    let client: TestClient;
    let calls: number;
    const events: string[] = [];

    beforeEach(() => {
      dir = mkdtempSync(join(tmpdir(), 'retrysafe-http-'));
      store = createSqliteStore({ path: join(dir, 'db.sqlite') });
      store.database.exec('CREATE TABLE payments (idempotency_key TEXT NOT NULL, amount INTEGER NOT NULL)');
      reader = new BetterSqlite3(join(dir, 'db.sqlite'), { readonly: true });
      calls = 0;
      events.length = 0;
    });
    afterEach(async () => {
      await client.close();
      reader.close();
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    });

    const rows = (): number => reader.prepare('SELECT count(*) FROM payments').pluck().get() as number;

    async function start(commit: Promise<void>, fail = false): Promise<void> {
      // Holds COMMIT until the test lets it happen, and records when it did.
      const held = gateCommits(store, events, commit);
      const receiver = createReceiver({ store: held, transactional: true });
      client = await driver.start({ receiver }, (input) => {
        calls++;
        const tx = input.idempotency?.tx as Database;
        tx.prepare('INSERT INTO payments (idempotency_key, amount) VALUES (?, ?)').run(input.idempotency?.key, 100);
        if (fail) return Promise.reject(new Error('card declined after the insert'));
        return Promise.resolve({ status: 201, headers: { 'content-type': 'application/json' }, body: JSON.stringify({ paid: input.idempotency?.key }) });
      });
    }

    const pay = (key: string): TestRequest => ({
      method: 'POST',
      path: '/payments',
      headers: { 'idempotency-key': key, 'content-type': 'application/json' },
      body: '{"amount":100}',
    });

    it('writes the row through the tx handle and sends the response only after COMMIT', async () => {
      const commit = gate();
      await start(commit.promise);
      const response = client.request(pay('tx-1')).then((res) => {
        events.push('response');
        return res;
      });
      await waitUntil(() => events.includes('before-commit'));
      // A window in which an early response would show up; the row is not visible to other connections yet.
      await new Promise((resolve) => setTimeout(resolve, 50));
      expect(events).toEqual(['before-commit']);
      expect(rows()).toBe(0);
      commit.open();
      const res = await response;
      expect(res.status).toBe(201);
      expect(events).toEqual(['before-commit', 'committed', 'response']);
      expect(rows()).toBe(1);
      const retry = await client.request(pay('tx-1'));
      expect(retry.header('idempotent-replayed')).toBe('true');
      expect(retry.body.equals(res.body)).toBe(true);
      expect(rows()).toBe(1);
      expect(calls).toBe(1);
    });

    it('leaves no row and no record when the handler throws after writing', async () => {
      await start(Promise.resolve(), true);
      const res = await client.request(pay('tx-2'));
      expect(res.status).toBe(500);
      expect(rows()).toBe(0);
      expect(await store.get('', 'tx-2')).toBeUndefined();
      expect(calls).toBe(1);
    });

    it('writes one row for 10 parallel duplicates', async () => {
      await start(Promise.resolve());
      const settled = await Promise.all(Array.from({ length: 10 }, () => client.request(pay('tx-3'))));
      expect(calls).toBe(1);
      expect(rows()).toBe(1);
      const ok = settled.filter((r) => r.status === 201);
      expect(ok.length + settled.filter((r) => r.status === 409).length).toBe(10);
      expect(ok.length).toBeGreaterThanOrEqual(1);
      for (const r of ok) expect(r.body.equals(ok[0]?.body ?? Buffer.alloc(0))).toBe(true);
    });
  });
}
