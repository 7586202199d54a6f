/**
 * The PostgreSQL session store against the real server: the shared session suite on a schema of its own,
 * and two pools (two "processes") racing on one request number.
 */
import pg from 'pg';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/core/clock.js';
import {
  createPostgresSessionStore,
  createSessionReceiver,
  SessionRequestInProgressError,
} from '../../src/sessions/index.js';
import { migrate } from '../../src/stores/postgres/index.js';
import { POSTGRES_URL, uniqueName } from '../support/services.js';
import { postgresAvailable } from '../support/postgres-schema.js';
import { inCallOrder } from './in-call-order.js';
import { sessionSuite } from './contract.js';

const available = await postgresAvailable();
const POOL_SIZE = 8;

const schema = uniqueName('rs_sess');

describe.runIf(available)('PostgreSQL session store', () => {
  // A test needs no durability: without a flush per commit the bounded-memory suites run in seconds.
  const pool = new pg.Pool({ connectionString: POSTGRES_URL, max: POOL_SIZE, options: '-c synchronous_commit=off' });
  const other = new pg.Pool({ connectionString: POSTGRES_URL, max: POOL_SIZE });
  pool.on('error', () => undefined);
  other.on('error', () => undefined);

  beforeAll(async () => {
    await migrate({ pool, schema });
  });
  // The suite expects every test to start from an empty store (reap counts every expired session).
  beforeEach(async () => {
    await pool.query(`TRUNCATE "${schema}".sessions, "${schema}".session_requests`);
  });
  afterAll(async () => {
    await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await Promise.all([pool.end(), other.end()]);
  });

  sessionSuite('the PostgreSQL store', () => inCallOrder(createPostgresSessionStore({ pool, schema })));

  it('applies a request once when two pools race on its number, and both then see one session state', async () => {
    const clock = new ManualClock(0);
    const a = createSessionReceiver({ store: createPostgresSessionStore({ pool, schema }), clock });
    const b = createSessionReceiver({ store: createPostgresSessionStore({ pool: other, schema }), clock });
    const clientId = await a.register();
    let executions = 0;
    const request = { clientId, requestNumber: 1, lowWaterMark: 0 };
    const outcomes = await Promise.allSettled(
      Array.from({ length: 16 }, (_, i) =>
        (i % 2 === 0 ? a : b).apply(request, () => {
          executions++;
          return Promise.resolve(`from ${i % 2 === 0 ? 'a' : 'b'}`);
        }),
      ),
    );
    expect(executions).toBe(1);
    const applied = outcomes.flatMap((o) => (o.status === 'fulfilled' && !o.value.replayed ? [o.value] : []));
    expect(applied).toHaveLength(1);
    for (const o of outcomes) {
      if (o.status === 'rejected') expect(o.reason).toBeInstanceOf(SessionRequestInProgressError);
      else expect(o.value.value).toBe(applied[0]?.value);
    }
    expect(await b.apply(request, () => Promise.resolve('again'))).toEqual({ value: applied[0]?.value, replayed: true, saved: true });
    await a.keepAlive(clientId, 1);
    expect(await b.stats(clientId)).toMatchObject({ state: 'live', storedResponses: 0, inProgress: 0, lowWaterMark: 1 });
    expect(executions).toBe(1);
  });

  it('reaps at most the limit, leaving the rest for the next call', async () => {
    const store = createPostgresSessionStore({ pool, schema });
    for (let i = 0; i < 5; i++) expect(await store.create(`c${i}`, 0, 10)).toBe(true);
    expect(await store.create('c0', 0, 10)).toBe(false);
    expect(await store.reap(10, 3)).toBe(3);
    expect(await store.reap(10, 3)).toBe(2);
    expect(await store.reap(10, 3)).toBe(0);
  });

  it.each<[string, unknown]>([
    ['pool', { pool: {} }],
    ['pool', { pool: null }],
    ['schema', { pool: new pg.Pool(), schema: 'bad-name' }],
  ])('throws a TypeError naming %s', (name, options) => {
    const create = (): unknown => createPostgresSessionStore(options as Parameters<typeof createPostgresSessionStore>[0]);
    expect(create).toThrow(TypeError);
    expect(create).toThrow(`"${name}"`);
  });
});
