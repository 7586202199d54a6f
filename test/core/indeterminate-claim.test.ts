/**
 * Claims know their owner: the connection drops after the claim reached the server (and committed) but
 * before its reply arrived. The engine claims once more with the same owner token, the store recognises
 * its own record, and the request runs exactly once, with no 503 and no 409 answered to itself. Real
 * PostgreSQL and Redis behind a TCP proxy that loses the claim's reply.
 */
import pg from 'pg';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Receiver } from '../../src/core/receiver.js';
import { createReceiver } from '../../src/receiver.js';
import type { IdempotencyStore } from '../../src/core/store.js';
import { createPostgresStore } from '../../src/stores/postgres/index.js';
import { createRedisStore } from '../../src/stores/redis/index.js';
import { createTestSchema, postgresAvailable, type TestSchema } from '../support/postgres-schema.js';
import { TcpProxy } from '../support/tcp-proxy.js';
import { POSTGRES_URL, REDIS_URL, serviceAvailable, uniqueName } from '../support/services.js';

const FP = 'e'.repeat(64);
const pgAvailable = await postgresAvailable();
const redisAvailable = await serviceAvailable('Redis', async () => {
  const probe = new Redis(REDIS_URL, { lazyConnect: true, maxRetriesPerRequest: 0 });
  try {
    await probe.connect();
    await probe.ping();
  } finally {
    probe.disconnect();
  }
});

/** Runs the request whose claim reply is lost, then its client's retry; counts executions. */
async function lostClaimReply(receiver: Receiver<unknown>, store: IdempotencyStore, proxy: TcpProxy, claimBytes: string): Promise<void> {
  let executions = 0;
  const id = { scope: 'owner', key: `k-${uniqueName('x')}`, fingerprint: FP };
  const droppedBefore = proxy.dropped;
  proxy.arm((chunk) => chunk.includes(claimBytes));
  const first = await receiver.run(id, () => Promise.resolve(++executions));
  expect(proxy.dropped - droppedBefore).toBe(1);
  expect(first).toBe(1);
  const retry = await receiver.run(id, () => Promise.resolve(++executions));
  expect(retry).toBe(1);
  expect(executions).toBe(1);
  expect((await store.get(id.scope, id.key))?.state).toBe('completed');
}

describe.runIf(pgAvailable)('an indeterminate claim on PostgreSQL', () => {
  let db: TestSchema;
  let proxy: TcpProxy;
  let pool: pg.Pool;

  beforeAll(async () => {
    db = await createTestSchema('rs_owner');
    const url = new URL(POSTGRES_URL);
    proxy = new TcpProxy(url.hostname, Number(url.port || 5432));
    await proxy.start();
    url.host = `127.0.0.1:${proxy.port}`;
    pool = new pg.Pool({ connectionString: url.toString(), max: 4 });
    pool.on('error', () => undefined);
  });

  afterAll(async () => {
    await pool.end();
    await proxy.close();
    await db.drop();
  });

  for (const transactional of [false, true]) {
    it(`runs once when the claim committed and its reply was lost (${transactional ? 'transactional' : 'plain'} mode)`, async () => {
      // Unprepared, so every claim carries its text for the proxy to recognise.
      const store = createPostgresStore({ pool, schema: db.schema, preparedStatements: false });
      try {
        const receiver = transactional ? createReceiver({ store, transactional: true }) : createReceiver({ store });
        // A new key's claim is read_or_insert() (the claim() function serves takeovers and the owner's claim
        // again): its call names it.
        await lostClaimReply(receiver, store, proxy, '.read_or_insert(');
      } finally {
        await store.close();
      }
    });
  }
});

describe.runIf(redisAvailable)('an indeterminate claim on Redis', () => {
  let proxy: TcpProxy;
  let client: Redis;

  beforeAll(async () => {
    const url = new URL(REDIS_URL);
    proxy = new TcpProxy(url.hostname, Number(url.port || 6379));
    await proxy.start();
    // The documented fail-fast client: a command in flight when the connection drops fails at once.
    client = new Redis({ host: '127.0.0.1', port: proxy.port, maxRetriesPerRequest: 0 });
    await client.ping();
  });

  afterAll(async () => {
    client.disconnect();
    await proxy.close();
  });

  it('runs once when the claim script ran and its reply was lost', async () => {
    const store = createRedisStore({ client, prefix: uniqueName('rs_owner') });
    try {
      const receiver = createReceiver({ store });
      // Loads the scripts, so the claim under test is one EVALSHA (ioredis writes the name as the store's
      // named command spells it: `evalsha`).
      await receiver.run({ scope: 'owner', key: 'warm-up', fingerprint: FP }, () => Promise.resolve(0));
      await lostClaimReply(receiver, store, proxy, 'evalsha');
    } finally {
      await store.close();
    }
  });
});
