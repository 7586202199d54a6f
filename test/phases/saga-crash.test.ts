/**
 * Sagas across SIGKILL on SQLite, PostgreSQL (both transactional) and Redis (plain): a child process runs
 * the booking saga and kills itself at every phase boundary, right after every foreign call, and in every
 * compensation; the completer (then a client retry) resumes it. Against a foreign API that counts calls
 * per derived key: each reservation, charge, ticket, refund and release happens at most once, and every
 * saga ends `completed` or `compensated`.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/core/clock.js';
import type { IdempotencyStore } from '../../src/core/store.js';
import { completeAbandoned } from '../../src/phases/completer.js';
import { createPhaseRunner, type PhaseRunner } from '../../src/phases/runner.js';
import { sagaStatusOf } from '../../src/phases/saga.js';
import { createPostgresStore } from '../../src/stores/postgres/index.js';
import { createRedisStore } from '../../src/stores/redis/index.js';
import { createSqliteStore } from '../../src/stores/sqlite/index.js';
import { createTestSchema, postgresAvailable, type TestSchema } from '../support/postgres-schema.js';
import { deleteUnder } from '../support/redis.js';
import { redisAvailable, REDIS_URL, uniqueName } from '../support/services.js';
import { BOOKING_POINTS, bookingPlan, FakeBookingApi, type BookingInput } from './fixtures/booking.js';
import { FP } from './fixtures/ride-fakes.js';

const CHILD = fileURLToPath(new URL('./fixtures/saga-child.ts', import.meta.url));
const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const INPUT: BookingInput = { seat: '12A', cents: 4_200 };

/** Every crash point with the operation the API refuses and the saga's end. */
const CASES = [
  ...BOOKING_POINTS.map((point) => ({ point, refuse: 'ticket', end: 'compensated' as const })),
  { point: 'ticket-sent:called', refuse: '-', end: 'completed' as const },
  { point: 'compensate:seat-reserved:called', refuse: 'charge', end: 'compensated' as const },
];

interface Backend {
  readonly kind: 'sqlite' | 'postgres' | 'redis';
  readonly where: () => string;
  /** The store on `clock`, a minute ahead of the child's, so the dead child's 30 s lease is over. */
  open(clock: ManualClock): Promise<{ store: IdempotencyStore; runner: PhaseRunner<unknown>; close: () => Promise<void> }>;
}

let api: FakeBookingApi;
let server: Server;
let apiUrl: string;

beforeAll(async () => {
  server = createServer((request, response) => {
    let text = '';
    request.on('data', (chunk: Buffer) => (text += chunk.toString()));
    request.on('end', () => {
      const { op, key, target } = JSON.parse(text) as { op: 'reserve'; key: string; target: string };
      void api.call(op, key, target).then((answer) => response.setHeader('content-type', 'application/json').end(JSON.stringify(answer)));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  apiUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}/call`;
});
afterAll(async () => {
  await new Promise((resolve) => server.close(resolve));
});

function crashChild(kind: string, where: string, key: string, point: string): Promise<string | null> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', CHILD, kind, where, key, point, apiUrl], { cwd: ROOT });
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    child.on('error', reject);
    child.on('exit', (_code, signal) => (signal === 'SIGKILL' ? resolve(signal) : reject(new Error(`child exited without crashing: ${stderr}`))));
  });
}

function sagaCrashSuite(backend: Backend): void {
  describe(`sagas across SIGKILL on ${backend.kind}`, () => {
    it.each(CASES.map((c, index) => ({ ...c, index })))('crash at $point (refused: $refuse) ends $end, every effect once', async ({ point, refuse, end, index }) => {
      api = new FakeBookingApi();
      if (refuse !== '-') api.refuse(refuse);
      const key = `booking-${index}`;
      expect(await crashChild(backend.kind, backend.where(), key, point)).toBe('SIGKILL');

      const { store, runner, close } = await backend.open(new ManualClock(Date.now() + 60_000));
      try {
        const plan = bookingPlan<unknown>(api);
        const report = await completeAbandoned({ runner, plans: [plan] });
        expect(report.failed).toEqual([]);
        // A crash before the first recovery point leaves nothing the completer can resume: the client's retry runs it.
        const retry = await runner.execute(plan, { scope: 'travellers', key, fingerprint: FP }, INPUT);
        expect(retry.outcome).toBe(end);
        expect(retry.response.status).toBe(end === 'completed' ? 201 : 402);
        const record = await store.get('travellers', key);
        expect(record?.state).toBe('completed');
        expect(sagaStatusOf(record ?? {})).toBe(end === 'completed' ? undefined : 'compensated');

        const charged = refuse === 'charge' ? 0 : 1;
        expect(api.applied('reserve')).toBe(1);
        expect(api.applied('charge')).toBe(charged);
        expect(api.applied('ticket')).toBe(end === 'completed' ? 1 : 0);
        expect(api.applied('refund')).toBe(end === 'compensated' ? charged : 0);
        expect(api.applied('release')).toBe(end === 'compensated' ? 1 : 0);
        // A crash repeats at most the one call it interrupted, under the same key.
        for (const [derived, calls] of api.calls) expect(calls, derived).toBeLessThanOrEqual(2);
      } finally {
        await close();
      }
    });
  });
}

{
  const dir = mkdtempSync(join(tmpdir(), 'retrysafe-saga-'));
  const path = join(dir, 'bookings.db');
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  sagaCrashSuite({
    kind: 'sqlite',
    where: () => path,
    open: (clock) => {
      const store = createSqliteStore({ path, clock });
      return Promise.resolve({ store, runner: createPhaseRunner({ store, transactional: true }), close: () => store.close() });
    },
  });
}

if (await postgresAvailable()) {
  let db: TestSchema;
  beforeAll(async () => {
    db = await createTestSchema('rs_saga_crash');
  });
  afterAll(() => db.drop());
  sagaCrashSuite({
    kind: 'postgres',
    where: () => db.schema,
    open: (clock) => {
      const store = createPostgresStore({ pool: db.pool, schema: db.schema, listen: false, clock });
      return Promise.resolve({ store, runner: createPhaseRunner({ store, transactional: true }), close: () => store.close() });
    },
  });
}

if (await redisAvailable()) {
  const prefix = uniqueName('rs_saga_crash');
  const client = new Redis(REDIS_URL);
  afterAll(async () => {
    await deleteUnder(client, prefix);
    await client.quit();
  });
  sagaCrashSuite({
    kind: 'redis',
    where: () => prefix,
    open: (clock) => {
      const store = createRedisStore({ client, prefix, clock });
      // Closed with the case: an open store keeps a `ready` listener on the shared client.
      return Promise.resolve({ store, runner: createPhaseRunner({ store }), close: () => store.close() });
    },
  });
}
