/**
 * Everything that runs on PostgreSQL, through PgBouncer in transaction mode (each transaction may get a
 * different server connection): the store contract, the HTTP behaviour table, transactional mode, atomic
 * phases, the inbox, the outbox relay and client sessions, with `preparedStatements: false` (and with
 * prepared statements too when the installed PgBouncer keeps them, 1.21+). Migrations run on a direct
 * connection. LISTEN cannot work through the pooler: `waitFor` and the relay take a `listen` connection
 * straight to PostgreSQL, or poll with `listen: false`, and without either say so.
 */
import { randomUUID } from 'node:crypto';
import { Hono } from 'hono';
import pg from 'pg';
import { afterAll, beforeEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../../../src/core/clock.js';
import { createReceiver } from '../../../src/receiver.js';
import { idempotency } from '../../../src/http/hono.js';
import { createInbox, createPostgresInboxStore } from '../../../src/messaging/inbox/index.js';
import { createOutbox, createRelay, type OutboxEvent, type OutboxMessage } from '../../../src/messaging/outbox/index.js';
import { definePhases } from '../../../src/phases/plan.js';
import { createPhaseRunner } from '../../../src/phases/runner.js';
import { createPostgresSessionStore } from '../../../src/sessions/index.js';
import { createPostgresStore } from '../../../src/stores/postgres/index.js';
import { honoDriver } from '../../http/hono-driver.js';
import type { ScenarioStore } from '../../http/scenario-stores.js';
import { httpScenarios } from '../../http/scenarios.js';
import { inboxContract } from '../../messaging/inbox/contract.js';
import { sessionSuite } from '../../sessions/contract.js';
import { inCallOrder } from '../../sessions/in-call-order.js';
import { createEffectsSchema, type EffectsSchema } from '../../support/messaging.js';
import { startPgBouncer } from '../../support/pgbouncer.js';
import { postgresAvailable } from '../../support/postgres-schema.js';
import { POSTGRES_URL } from '../../support/services.js';
import { storeContract } from '../contract.js';

const FP = 'f'.repeat(64);
const bouncer = (await postgresAvailable()) ? await startPgBouncer() : undefined;

if (bouncer) {
  // Created on a direct connection (migrations take a session-level advisory lock), used through the pooler.
  const db: EffectsSchema = await createEffectsSchema('rs_pgbouncer');
  const pool = new pg.Pool({ connectionString: bouncer.url, max: 10 });
  pool.on('error', () => undefined);
  const { schema } = db;
  afterAll(async () => {
    await pool.end();
    await db.drop();
    await bouncer.close();
  });

  const modes = bouncer.preparedStatements ? [false, true] : [false];

  it(`goes through the pooler: a session's backend differs from the one it announced (PgBouncer ${bouncer.version.join('.')})`, async () => {
    const client = new pg.Client({ connectionString: bouncer.url });
    await client.connect();
    const { rows } = await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
    expect(rows[0]?.pid).not.toBe((client as pg.Client & { processID: number }).processID);
    await client.end();
  });

  for (const preparedStatements of modes) {
    storeContract(`postgres through PgBouncer (preparedStatements: ${preparedStatements})`, async () => {
      await db.truncate();
      const clock = new ManualClock(1_700_000_000_000);
      const store = createPostgresStore({ pool, schema, clock, preparedStatements, listen: { connectionString: POSTGRES_URL } });
      return { store, clock, close: () => store.close() };
    });
  }

  const scenarioStore: ScenarioStore = {
    name: 'PostgreSQL through PgBouncer',
    async open(clock) {
      await db.truncate();
      return createPostgresStore({ pool, schema, preparedStatements: false, listen: { connectionString: POSTGRES_URL }, ...(clock && { clock }) });
    },
  };
  httpScenarios(honoDriver, scenarioStore);

  describe('sessions', () => {
    // The suite expects every test to start from an empty store (reap counts every expired session).
    beforeEach(async () => {
      await db.pool.query(`TRUNCATE "${schema}".sessions, "${schema}".session_requests`);
    });
    sessionSuite('the PostgreSQL store through PgBouncer', () => inCallOrder(createPostgresSessionStore({ pool, schema })));
  });

  inboxContract('postgres through PgBouncer', async () => {
    // Warm connections (client to PgBouncer, PgBouncer to the server): the contract races two replays
    // whose reads must both start before either commits, which a second connection's setup through the
    // extra hop can delay past the first one's commit under load.
    const warm = await Promise.all(Array.from({ length: 4 }, () => pool.connect()));
    await Promise.all(warm.map((client) => client.query('SELECT 1')));
    for (const client of warm) client.release();
    await db.pool.query(`TRUNCATE "${schema}".inbox_processed, "${schema}".inbox_attempts, "${schema}".effects`);
    return { store: createPostgresInboxStore({ pool, schema }), write: db.write, count: db.count };
  });

  /** An app whose handler counts its runs; `options` go to the store. */
  function app(receiverOptions: { inFlight?: 'wait'; transactional?: true }, storeOptions: Parameters<typeof createPostgresStore>[0]) {
    const store = createPostgresStore(storeOptions);
    const receiver = receiverOptions.transactional
      ? createReceiver({ store, transactional: true, ...(receiverOptions.inFlight && { inFlight: 'wait', waitTimeoutMs: 5_000 }) })
      : createReceiver({ store, ...(receiverOptions.inFlight && { inFlight: 'wait', waitTimeoutMs: 5_000 }) });
    const state = { runs: 0 };
    const hono = new Hono();
    hono.use(idempotency({ receiver }));
    hono.post('/orders', async (c) => {
      state.runs++;
      const tx = (c.get('idempotency') as { tx?: pg.PoolClient }).tx;
      if (tx) await tx.query(`INSERT INTO "${schema}".effects (consumer, message_id) VALUES ('orders', $1)`, [c.req.header('idempotency-key')]);
      await new Promise((resolve) => setTimeout(resolve, 50));
      return c.json({ order: state.runs }, 201);
    });
    const post = (key: string): Promise<Response> =>
      Promise.resolve(hono.request('/orders', { method: 'POST', headers: { 'idempotency-key': key, 'content-type': 'application/json' }, body: '{}' }));
    return { state, post, store };
  }

  describe('through PgBouncer', () => {
    it('transactional mode: 20 parallel duplicates write one business row and run once', async () => {
      const key = `"tx-${randomUUID()}"`;
      const { state, post, store } = app({ transactional: true }, { pool, schema, preparedStatements: false, listen: false });
      const responses = await Promise.all(Array.from({ length: 20 }, () => post(key)));
      expect(state.runs).toBe(1);
      expect(responses.filter((res) => res.status === 201)).toHaveLength(1);
      expect(await db.count('orders', key)).toBe(1);
      await store.close();
    });

    it('transactional mode with locked claims: 20 parallel duplicates (10 in wait mode) write one business row and run once', async () => {
      const key = `"locked-${randomUUID()}"`;
      const locked = { pool, schema, preparedStatements: false, listen: false, transactionalClaim: 'locked' } as const;
      const rejecting = app({ transactional: true }, locked);
      const waiting = app({ transactional: true, inFlight: 'wait' }, locked);
      const responses = await Promise.all(Array.from({ length: 20 }, (_, i) => (i % 2 === 0 ? rejecting : waiting).post(key)));
      expect(rejecting.state.runs + waiting.state.runs).toBe(1);
      expect(responses.filter((res) => res.status === 201 && res.headers.get('idempotent-replayed') !== 'true')).toHaveLength(1);
      expect(responses.every((res) => res.status === 201 || res.status === 409)).toBe(true);
      expect(await db.count('orders', key)).toBe(1);
      await rejecting.store.close();
      await waiting.store.close();
    });

    it('atomic phases: a crash after the first phase resumes at the second, and the first phase runs once', async () => {
      await db.truncate();
      const clock = new ManualClock(1_700_000_000_000);
      const store = createPostgresStore({ pool, schema, clock, preparedStatements: false, listen: false });
      const runner = createPhaseRunner({ store, transactional: true, leaseMs: 1_000 });
      let crash = true;
      const runs = { first: 0, second: 0 };
      const plan = definePhases<pg.PoolClient, string>({
        id: 'pgbouncer.plan',
        phases: [
          {
            name: 'first',
            run: async ({ tx, input }) => {
              runs.first++;
              await tx.query(`INSERT INTO "${schema}".effects (consumer, message_id) VALUES ('phase-1', $1)`, [input]);
              return { step: 1 };
            },
          },
          {
            name: 'second',
            run: async ({ tx, input }) => {
              runs.second++;
              if (crash) throw new Error('crash in the second phase');
              await tx.query(`INSERT INTO "${schema}".effects (consumer, message_id) VALUES ('phase-2', $1)`, [input]);
              return { step: 2 };
            },
          },
        ],
        respond: (value) => ({ status: 201, headers: {}, body: new TextEncoder().encode(JSON.stringify(value)) }),
      });
      const input = randomUUID();
      const id = { scope: 'phases', key: input, fingerprint: FP };
      await expect(runner.execute(plan, id, input)).rejects.toThrow('crash in the second phase');
      crash = false;
      clock.advance(2_000);
      const resumed = await runner.execute(plan, id, input);
      expect(resumed.resumedFrom).toBe('first');
      expect(runs).toEqual({ first: 1, second: 2 });
      expect([await db.count('phase-1', input), await db.count('phase-2', input)]).toEqual([1, 1]);
      await store.close();
    });

    it("inFlight: 'wait' without a listen connection fails with an error naming the option, and runs once", async () => {
      await db.truncate();
      const store = createPostgresStore({ pool, schema, preparedStatements: false });
      const claimed = await store.claim({ scope: 's', key: 'held', fingerprint: FP, leaseMs: 10_000, retentionMs: 60_000 });
      expect(claimed.acquired).toBe(true);
      await expect(store.waitFor('s', 'held', 1_000)).rejects.toThrow(/goes through a connection pooler[\s\S]*option "listen"/);
      await store.close();
    });

    for (const [name, listen] of [
      ['a listen connection straight to PostgreSQL', { connectionString: POSTGRES_URL }],
      ['listen: false (polling)', false],
    ] as const) {
      it(`inFlight: 'wait' with ${name}: 20 parallel duplicates get the one response`, async () => {
        const key = `"wait-${randomUUID()}"`;
        const { state, post, store } = app({ inFlight: 'wait' }, { pool, schema, preparedStatements: false, listen });
        const responses = await Promise.all(Array.from({ length: 20 }, () => post(key)));
        expect(state.runs).toBe(1);
        expect(responses.map((res) => res.status)).toEqual(Array.from({ length: 20 }, () => 201));
        expect(responses.filter((res) => res.headers.get('idempotent-replayed') === 'true')).toHaveLength(19);
        await store.close();
      });
    }

    for (const [name, listen, refused] of [
      ['without a listen connection: reports the pooler once and publishes by polling', undefined, 1],
      ['with a listen connection straight to PostgreSQL', { connectionString: POSTGRES_URL }, 0],
      ['with listen: false, by polling', false, 0],
    ] as const) {
      it(`outbox relay through PgBouncer ${name}`, async () => {
        const outbox = createOutbox({ schema });
        const published: OutboxMessage[] = [];
        const events: OutboxEvent[] = [];
        const relay = createRelay({
          pool,
          outbox,
          publisher: { publish: (message) => Promise.resolve(void published.push(message)), close: () => Promise.resolve() },
          pollIntervalMs: 100,
          onEvent: (event) => events.push(event),
          ...(listen !== undefined && { listen }),
        });
        relay.start();
        const topic = `t-${randomUUID()}`;
        for (let i = 0; i < 5; i++) {
          const client = await pool.connect();
          try {
            await client.query('BEGIN');
            await outbox.enqueue(client, { topic, key: 'k', payload: `m${i}` });
            await client.query('COMMIT');
          } finally {
            client.release();
          }
          await new Promise((resolve) => setTimeout(resolve, 150));
        }
        const deadline = Date.now() + 10_000;
        while (published.filter((m) => m.topic === topic).length < 5 && Date.now() < deadline) {
          await new Promise((resolve) => setTimeout(resolve, 50));
        }
        await relay.stop();
        expect(published.filter((m) => m.topic === topic).map((m) => new TextDecoder().decode(m.payload))).toEqual(['m0', 'm1', 'm2', 'm3', 'm4']);
        const poolerErrors = events.filter((event) => event.type === 'error' && /connection pooler/.test(event.error ?? ''));
        expect(poolerErrors).toHaveLength(refused);
      });
    }

    it('inbox through PgBouncer: 10 concurrent deliveries of one message apply it once', async () => {
      const inbox = createInbox({ store: createPostgresInboxStore({ pool, schema }) });
      const id = randomUUID();
      await Promise.all(Array.from({ length: 10 }, () => inbox.handle({ consumer: 'bounced', messageId: id }, (tx) => db.write(tx, 'bounced', id))));
      expect(await db.count('bounced', id)).toBe(1);
    });
  });
}
