/**
 * Where the tests find the real servers, and what happens when one is missing: locally the suite that
 * needs it is skipped with a loud warning; with `CI=true` or `RETRYSAFE_REQUIRE_SERVICES=1` a missing
 * service is a failure, never a silent skip.
 */
import { randomBytes } from 'node:crypto';
import { createServer } from 'node:net';
import pg from 'pg';

export const POSTGRES_URL = process.env['RETRYSAFE_POSTGRES_URL'] ?? 'postgres://postgres@127.0.0.1:5432/test';
export const REDIS_URL = process.env['RETRYSAFE_REDIS_URL'] ?? 'redis://127.0.0.1:6379';
export const AMQP_URL = process.env['RETRYSAFE_AMQP_URL'] ?? 'amqp://guest:guest@127.0.0.1:5672';
export const NATS_URL = process.env['RETRYSAFE_NATS_URL'] ?? 'nats://127.0.0.1:4222';

/** True when a missing service must fail the run (CI). */
export const SERVICES_REQUIRED = process.env['CI'] === 'true' || process.env['RETRYSAFE_REQUIRE_SERVICES'] === '1';

/**
 * Probes a service. Resolves `true` when it answers. When it does not: throws in CI (so the run fails),
 * otherwise warns and resolves `false` so the caller can skip that suite locally.
 */
export async function serviceAvailable(name: string, probe: () => Promise<unknown>): Promise<boolean> {
  try {
    await probe();
    return true;
  } catch (error) {
    const message = `${name} is not reachable: ${error instanceof Error ? error.message : String(error)}`;
    if (SERVICES_REQUIRED) throw new Error(`${message} (required in CI)`, { cause: error });
    console.warn(`\n!!! SKIPPING ${name} tests: ${message}\n`);
    return false;
  }
}

/** A name unique to this test run, safe as a SQL identifier, key prefix or queue name. */
export function uniqueName(prefix: string): string {
  return `${prefix}_${process.pid}_${randomBytes(4).toString('hex')}`;
}

/** Whether PostgreSQL answers at {@link POSTGRES_URL} (see {@link serviceAvailable}). */
export function postgresAvailable(): Promise<boolean> {
  return serviceAvailable('PostgreSQL', async () => {
    const client = new pg.Client({ connectionString: POSTGRES_URL, connectionTimeoutMillis: 2_000 });
    await client.connect();
    await client.end();
  });
}

/** Whether Redis answers at {@link REDIS_URL} (see {@link serviceAvailable}). */
export function redisAvailable(): Promise<boolean> {
  return serviceAvailable('Redis', async () => {
    const { Redis } = await import('ioredis');
    const client = new Redis(REDIS_URL, { lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 1 });
    try {
      await client.connect();
    } finally {
      client.disconnect();
    }
  });
}

/** A TCP port free on 127.0.0.1 right now (the kernel picks it; a server started next may take it). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => (typeof address === 'object' && address ? resolve(address.port) : reject(new Error('no port'))));
    });
  });
}
