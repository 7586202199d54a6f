/**
 * The benchmark's server process: one framework and one configuration, started by bench/run.ts. Prints
 * `{"port": N}` on stdout once listening; `GET /__stats` answers its RSS and handler execution count.
 *
 * argv: <framework: express|fastify|nestjs-express|nestjs-fastify> <config>, where config is
 *   bare                       the handler alone
 *   raw-pg-N | raw-redis-N     the handler plus N sequential raw driver round trips (the floors)
 *   raw-pgw-N                  the handler plus N sequential durable PostgreSQL writes (INSERT, then UPDATEs)
 *   raw-pgtx-4                 the handler plus an autocommitted INSERT, then BEGIN, UPDATE, COMMIT: the
 *                              round trips and durable commits of a new key in transactional mode (claim,
 *                              BEGIN, complete, COMMIT)
 *   memory | sqlite | postgres | postgres-tx | redis   the handler behind retrysafe on that store
 *   minimal                    (Fastify only) the handler behind the least an idempotency layer does
 *                              (servers/minimal-layer.ts): a reference point, not a product
 *   sqlite-replay-cache | postgres-replay-cache | redis-replay-cache   that store with the receiver's
 *                              replay cache on (`replayCache: { maxEntries: 10_000 }`)
 *   memory-otel                the memory store with the OpenTelemetry metrics SDK installed as the global
 *                              meter provider (a periodic reader exporting every second to memory): what
 *                              the receiver's metrics cost an application that collects them
 * env: BENCH_POSTGRES_URL, BENCH_POSTGRES_SCHEMA (already migrated), BENCH_REDIS_URL, BENCH_REDIS_PREFIX
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { metrics } from '@opentelemetry/api';
import { AggregationTemporality, InMemoryMetricExporter, MeterProvider, PeriodicExportingMetricReader } from '@opentelemetry/sdk-metrics';
import { Redis } from 'ioredis';
import pg from 'pg';
import { createMemoryStore, createReceiver } from '../src/index.js';
import { createPostgresStore } from '../src/stores/postgres/index.js';
import { createRedisStore } from '../src/stores/redis/index.js';
import { createSqliteStore } from '../src/stores/sqlite/index.js';
import type { BenchApp } from './servers/app.js';
import { startExpress } from './servers/express.js';
import { startFastify } from './servers/fastify.js';
import { startNest } from './servers/nestjs.js';

const [framework = 'fastify', config = 'bare'] = process.argv.slice(2);
const dir = mkdtempSync(join(tmpdir(), 'retrysafe-bench-'));
const postgresUrl = process.env['BENCH_POSTGRES_URL'] ?? '';
const schema = process.env['BENCH_POSTGRES_SCHEMA'] ?? '';
const redisUrl = process.env['BENCH_REDIS_URL'] ?? '';
const closers: (() => Promise<unknown>)[] = [];

function pgPool(): pg.Pool {
  const pool = new pg.Pool({ connectionString: postgresUrl, max: 16 });
  closers.push(() => pool.end());
  return pool;
}

function redisClient(): Redis {
  const client = new Redis(redisUrl);
  closers.push(() => client.quit());
  return client;
}

/** The app of config `name` (see the list above). */
function configure(name: string): BenchApp {
  if (name === 'raw-pgtx-4') {
    const pool = pgPool();
    let n = 0;
    return {
      roundTrips: async () => {
        const key = `${process.pid}-tx-${n++}`;
        await pool.query(`INSERT INTO "${schema}".bench_floor (k, v) VALUES ($1, 0)`, [key]);
        const client = await pool.connect();
        try {
          await client.query('BEGIN');
          await client.query(`UPDATE "${schema}".bench_floor SET v = 1 WHERE k = $1`, [key]);
          await client.query('COMMIT');
        } finally {
          client.release();
        }
      },
    };
  }
  const raw = /^raw-(pg|pgw|redis)-(\d+)$/.exec(name);
  if (raw) {
    const trips = Number(raw[2]);
    if (raw[1] === 'pg') {
      const pool = pgPool();
      return { roundTrips: async () => { for (let i = 0; i < trips; i++) await pool.query('SELECT 1'); } };
    }
    if (raw[1] === 'pgw') {
      // Durable writes, each its own autocommit statement: an INSERT, then UPDATEs of that row.
      const pool = pgPool();
      let n = 0;
      return {
        roundTrips: async () => {
          const key = `${process.pid}-${n++}`;
          await pool.query(`INSERT INTO "${schema}".bench_floor (k, v) VALUES ($1, 0)`, [key]);
          for (let i = 1; i < trips; i++) await pool.query(`UPDATE "${schema}".bench_floor SET v = $2 WHERE k = $1`, [key, i]);
        },
      };
    }
    const client = redisClient();
    return { roundTrips: async () => { for (let i = 0; i < trips; i++) await client.ping(); } };
  }
  switch (name) {
    case 'bare':
      return {};
    case 'minimal':
      return { minimalLayer: true };
    case 'memory':
      return { receiver: createReceiver({ store: createMemoryStore() }) };
    case 'memory-otel': {
      const exporter = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE);
      const reader = new PeriodicExportingMetricReader({ exporter, exportIntervalMillis: 1000 });
      // Keep memory flat: the exported batches are dropped as they come.
      setInterval(() => exporter.reset(), 1000).unref();
      metrics.setGlobalMeterProvider(new MeterProvider({ readers: [reader] }));
      return { receiver: createReceiver({ store: createMemoryStore() }) };
    }
    case 'sqlite':
      return { receiver: createReceiver({ store: createSqliteStore({ path: join(dir, 'bench.db') }) }) };
    case 'postgres':
      return { receiver: createReceiver({ store: createPostgresStore({ pool: pgPool(), schema }) }) };
    case 'postgres-tx':
      return { receiver: createReceiver({ store: createPostgresStore({ pool: pgPool(), schema }), transactional: true }) };
    case 'redis':
      return {
        receiver: createReceiver({
          store: createRedisStore({ client: redisClient(), prefix: process.env['BENCH_REDIS_PREFIX'] ?? 'bench' }),
        }),
      };
    case 'sqlite-replay-cache':
    case 'postgres-replay-cache':
    case 'redis-replay-cache': {
      // The store's own config, with the receiver's replay cache on (its own rows; the targets are read without).
      const base = configure(name.slice(0, -'-replay-cache'.length)).receiver;
      if (base === undefined) throw new TypeError(`bench config ${name} has no store`);
      return { receiver: createReceiver({ store: base.store, replayCache: { maxEntries: 10_000 } }) };
    }
    default:
      throw new TypeError(`unknown bench config ${name}`);
  }
}

const app = configure(config);
const port =
  framework === 'fastify' ? await startFastify(app)
  : framework === 'nestjs-express' ? await startNest('express', app)
  : framework === 'nestjs-fastify' ? await startNest('fastify', app)
  : await startExpress(app);
process.stdout.write(`${JSON.stringify({ port })}\n`);
process.on('SIGTERM', () => {
  void Promise.allSettled(closers.map((close) => close())).then(() => {
    rmSync(dir, { recursive: true, force: true });
    process.exit(0);
  });
});
