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
import { migrate } from '../../src/postgres.js';
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

  describe('the console\'s sessions page, over 10 000 sessions', () => {
    /** A plan node of `EXPLAIN (FORMAT JSON)`, with the fields read here. */
    interface PlanNode {
      readonly 'Node Type': string;
      readonly 'Relation Name'?: string;
      readonly 'Index Name'?: string;
      readonly 'Index Cond'?: string;
      readonly Plans?: PlanNode[];
    }
    const nodes = (node: PlanNode): PlanNode[] => [node, ...(node.Plans ?? []).flatMap(nodes)];

    /** The store on a pool of one connection that keeps every statement the store sends, as it sends it. */
    function recordingStore(): { store: ReturnType<typeof createPostgresSessionStore>; sent: { text: string; values: unknown[] }[]; single: pg.Pool } {
      const single = new pg.Pool({ connectionString: POSTGRES_URL, max: 1 });
      const sent: { text: string; values: unknown[] }[] = [];
      const query = (config: string | pg.QueryConfig, values?: unknown[]): Promise<pg.QueryResult> => {
        sent.push(typeof config === 'string' ? { text: config, values: values ?? [] } : { text: config.text, values: config.values ?? [] });
        return single.query(config as string, values);
      };
      return { store: createPostgresSessionStore({ pool: { query } as unknown as pg.Pool, schema }), sent, single };
    }

    beforeEach(async () => {
      await pool.query(`INSERT INTO "${schema}".sessions (client_id, state, lease_expires_at, low_water_mark)
        SELECT md5(i::text), 'live', 0, 0 FROM generate_series(1, 10000) AS i`);
      await pool.query(`ANALYZE "${schema}".sessions`);
    });

    it('reads each page in byte order through the index of migration 0010, bounded by the prefix or the previous page, not a scan and sort of the table', async () => {
      const { store, sent, single } = recordingStore();
      try {
        const pages = [{ limit: 50 }, { after: '8', limit: 50 }, { clientIdPrefix: 'ab', limit: 50 }];
        for (const page of pages) {
          const listed = await store.listSessions(page);
          expect(listed.length).toBeGreaterThan(0);
          const { text, values } = sent.at(-1) ?? { text: '', values: [] };
          const [explained] = (await single.query<{ 'QUERY PLAN': { Plan: PlanNode }[] }>(`EXPLAIN (FORMAT JSON) ${text}`, values)).rows;
          const plan = nodes(explained?.['QUERY PLAN'][0]?.Plan ?? { 'Node Type': 'none' });
          expect(plan.filter((node) => node['Node Type'] === 'Seq Scan' && node['Relation Name'] === 'sessions')).toEqual([]);
          const index = plan.find((node) => node['Index Name'] === 'sessions_client_id_c_idx');
          expect(index?.['Node Type']).toMatch(/Index Scan/);
          // A page after another, or of a prefix, starts (and a prefix also ends) where its rows are.
          if (page.after !== undefined || page.clientIdPrefix !== undefined) expect(index?.['Index Cond']).toBeDefined();
          // Read in order and stopped at the limit; only a prefix's few rows may be sorted instead.
          if (page.clientIdPrefix === undefined) expect(plan.map((node) => node['Node Type'])).not.toContain('Sort');
        }
      } finally {
        await single.end();
      }
    });

    it('plans every page with its own values, never with a plan cached for any values (which could only filter the index)', async () => {
      const { store, single } = recordingStore();
      try {
        let after: string | undefined;
        for (let page = 0; page < 12; page++) after = (await store.listSessions({ limit: 50, ...(after !== undefined && { after }) })).at(-1)?.clientId;
        const cached = await single.query<{ generic_plans: string }>(
          "SELECT generic_plans FROM pg_prepared_statements WHERE statement LIKE '%ORDER BY x.client_id COLLATE \"C\"%'",
        );
        expect(cached.rows.filter((row) => Number(row.generic_plans) > 0)).toEqual([]);
      } finally {
        await single.end();
      }
    });
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
