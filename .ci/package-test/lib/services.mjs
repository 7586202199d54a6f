// The local services a stack runs against, each stack on a database and a key prefix of its own.
import { connect, createServer } from 'node:net';
import { env } from 'node:process';
import { createRequire } from 'node:module';
import { URL } from 'node:url';

// The repository's own drivers (devDependencies) set the services up and tear them down; the stacks
// only ever use the drivers they installed themselves.
const require = createRequire(import.meta.url);

export const POSTGRES_URL = env.RETRYSAFE_POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
export const REDIS_URL = env.RETRYSAFE_REDIS_URL ?? 'redis://127.0.0.1:6379';
const URLS = { postgres: POSTGRES_URL, redis: REDIS_URL };

/** @returns {Promise<boolean>} whether the service's port accepts a connection within 2 seconds */
export function reachable(service) {
  const url = new URL(URLS[service]);
  const port = Number(url.port || (service === 'postgres' ? 5432 : 6379));
  return new Promise((resolvePromise) => {
    const socket = connect({ host: url.hostname, port, timeout: 2000 });
    const done = (ok) => {
      socket.destroy();
      resolvePromise(ok);
    };
    socket.once('connect', () => done(true));
    socket.once('error', () => done(false));
    socket.once('timeout', () => done(false));
  });
}

/** Creates an empty database named `name` and returns its URL. */
export async function createDatabase(name) {
  const pg = require('pg');
  const client = new pg.Client({ connectionString: POSTGRES_URL });
  await client.connect();
  try {
    await client.query(`DROP DATABASE IF EXISTS ${client.escapeIdentifier(name)} WITH (FORCE)`);
    await client.query(`CREATE DATABASE ${client.escapeIdentifier(name)}`);
  } finally {
    await client.end();
  }
  const url = new URL(POSTGRES_URL);
  url.pathname = `/${name}`;
  return url.toString();
}

export async function dropDatabase(name) {
  const pg = require('pg');
  const client = new pg.Client({ connectionString: POSTGRES_URL });
  await client.connect();
  try {
    await client.query(`DROP DATABASE IF EXISTS ${client.escapeIdentifier(name)} WITH (FORCE)`);
  } finally {
    await client.end();
  }
}

/** Deletes every Redis key that starts with `prefix`. */
export async function deleteRedisPrefix(prefix) {
  const { Redis } = require('ioredis');
  const client = new Redis(REDIS_URL, { lazyConnect: true, maxRetriesPerRequest: 1 });
  await client.connect();
  try {
    let cursor = '0';
    do {
      const [next, keys] = await client.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000);
      if (keys.length > 0) await client.del(...keys);
      cursor = next;
    } while (cursor !== '0');
  } finally {
    client.disconnect();
  }
}

/** A TCP port on 127.0.0.1 free at the moment of asking (the kernel's pick). */
export function freePort() {
  return new Promise((resolvePromise, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolvePromise(port));
    });
  });
}
