import { afterEach, describe, expect, it } from 'vitest';
import { parseStoreUrl, StoreUrlError, type OpenedStore } from '../src/store-url.js';
import { POSTGRES_URL, REDIS_URL, postgresAvailable, redisAvailable, uniqueName } from './support/services.js';
import { runCli } from './support/run-cli.js';

const postgres = await postgresAvailable();
const redis = await redisAvailable();

const opened: OpenedStore[] = [];
afterEach(async () => {
  for (const store of opened.splice(0)) await store.store.close();
});

describe('parseStoreUrl', () => {
  it('parses sqlite:PATH as a durable, transactional SQLite store', () => {
    const target = parseStoreUrl('sqlite:/tmp/some dir/idempotency.db');
    expect(target).toMatchObject({ scheme: 'sqlite', url: 'sqlite:/tmp/some dir/idempotency.db', durable: true });
  });

  it('parses sqlite::memory: and memory: as stores that die with the process', () => {
    expect(parseStoreUrl('sqlite::memory:')).toMatchObject({ scheme: 'sqlite', durable: false });
    expect(parseStoreUrl('memory:')).toMatchObject({ scheme: 'memory', durable: false });
    expect(parseStoreUrl('MEMORY:')).toMatchObject({ scheme: 'memory' });
  });

  it.each([
    ['postgres://app:secret@db.internal:5432/payments', 'postgres'],
    ['postgresql://127.0.0.1/test?sslmode=disable', 'postgresql'],
    ['postgres:///app?host=/var/run/postgresql', 'postgres'],
  ] as const)('parses %s as a durable, transactional PostgreSQL store', (url, scheme) => {
    expect(parseStoreUrl(url)).toMatchObject({ scheme, url, durable: true, transactional: true });
  });

  it.each([
    ['redis://127.0.0.1:6379', 'redis'],
    ['redis://:secret@cache.internal:6380/2', 'redis'],
    ['rediss://cache.example.com', 'rediss'],
  ] as const)('parses %s as a durable plain Redis store', (url, scheme) => {
    expect(parseStoreUrl(url)).toMatchObject({ scheme, url, durable: true, transactional: false });
  });

  it('takes ?schema= and ?prefix= out of the URL the driver gets, and keeps the other parameters', () => {
    expect(parseStoreUrl('postgres://u@db/app?sslmode=disable&schema=billing')).toMatchObject({
      schema: 'billing',
      driverUrl: 'postgres://u@db/app?sslmode=disable',
    });
    expect(parseStoreUrl('postgres://u@db/app')).toMatchObject({ schema: undefined, driverUrl: 'postgres://u@db/app' });
    expect(parseStoreUrl('redis://cache:6379/2?prefix=payments')).toMatchObject({ driverUrl: 'redis://cache:6379/2' });
  });

  it.each([
    ['ftp://example.com/db', /unknown scheme "ftp:"/],
    ['postgres://db.internal/app?schema=bad-name', /\?schema= must be/],
    ['postgres://db.internal/app?schema=', /\?schema= must be/],
    ['redis://127.0.0.1?prefix=a{b}', /\?prefix= must be non-empty/],
    ['redis://127.0.0.1?prefix=', /\?prefix= must be non-empty/],
    ['idempotency.db', /expected SCHEME:/],
    [':memory:', /expected SCHEME:/],
    ['', /expected SCHEME:/],
    ['sqlite:', /needs a file path/],
    ['sqlite:?synchronous=full', /needs a file path/],
    ['sqlite:./a.db?synchronous=off', /\?synchronous= must be normal or full, got "off"/],
    ['sqlite:./a.db?synchronous=FULL', /\?synchronous= must be normal or full/],
    ['sqlite:./a.db?synchronous=', /\?synchronous= must be normal or full/],
    ['sqlite:./a.db?mode=ro', /takes one query parameter, \?synchronous=normal or \?synchronous=full/],
    ['sqlite:./a.db?synchronous=full&synchronous=normal', /takes one query parameter/],
    ['memory:extra', /nothing after the colon/],
    ['postgres:db.internal/app', /postgres: needs a host/],
    ['postgres://', /not a valid postgres:\/\/ URL|postgres: needs a host/],
    ['postgres://db.internal', /postgres: needs a database name/],
    ['postgresql://db.internal/', /postgresql: needs a database name/],
    ['postgres://db.internal:99999/app', /not a valid postgres:\/\/ URL/],
    ['redis:127.0.0.1', /redis: needs a host/],
    ['rediss://', /not a valid rediss:\/\/ URL|rediss: needs a host/],
    ['redis://[::1/0', /not a valid redis:\/\/ URL/],
  ])('refuses %j with a StoreUrlError naming the value and the supported schemes', (url, reason) => {
    let caught: unknown;
    try {
      parseStoreUrl(url);
    } catch (error) {
      caught = error;
    }
    expect(caught).toBeInstanceOf(StoreUrlError);
    const error = caught as StoreUrlError;
    expect(error.code).toBe('store-url-invalid');
    expect(error.url).toBe(url);
    expect(error.message).toMatch(reason);
    expect(error.message).toContain(`invalid --store ${JSON.stringify(url)}`);
    expect(error.message).toContain('memory:, sqlite:./idempotency.db, postgres://user@127.0.0.1:5432/app');
    expect(error.message).toContain('redis://127.0.0.1:6379, rediss://127.0.0.1:6379');
  });

  it('takes ?synchronous= off the SQLite path and keeps it in the URL handed on', () => {
    expect(parseStoreUrl('sqlite:/tmp/a.db?synchronous=full')).toMatchObject({
      scheme: 'sqlite',
      durable: true,
      driverUrl: 'sqlite:/tmp/a.db?synchronous=full',
    });
    expect(parseStoreUrl('sqlite::memory:?synchronous=normal')).toMatchObject({ durable: false });
  });

  it.each([
    ['sqlite::memory:', 1],
    ['sqlite::memory:?synchronous=normal', 1],
    ['sqlite::memory:?synchronous=full', 2],
  ] as const)('opens %s with PRAGMA synchronous = %i', async (url, level) => {
    const store = await parseStoreUrl(url).open('create');
    opened.push(store);
    if (store.scheme !== 'sqlite') throw new Error(`expected a SQLite store, got ${store.scheme}`);
    expect(store.database.pragma('synchronous', { simple: true })).toBe(level);
  });

  it('opens memory: as a plain store that claims once', async () => {
    const store = await parseStoreUrl('memory:').open('create');
    opened.push(store);
    expect(store.transactional).toBe(false);
    const input = { scope: 's', key: 'k', fingerprint: 'f', leaseMs: 1_000, retentionMs: 10_000 };
    const results = await Promise.all([store.store.claim(input), store.store.claim(input)]);
    expect(results.filter((result) => result.acquired)).toHaveLength(1);
  });

  it('opens sqlite::memory: as a transactional store whose transactions hand out its connection', async () => {
    const store = await parseStoreUrl('sqlite::memory:').open('create');
    opened.push(store);
    if (store.scheme !== 'sqlite') throw new Error(`expected a SQLite store, got ${store.scheme}`);
    expect(store.transactional).toBe(true);
    const handle = await store.store.transaction((tx) => Promise.resolve(tx));
    expect(handle).toBe(store.database);
  });
});

describe.runIf(postgres)('--store postgres://', () => {
  it('migrates on open and hands transactions the pool client the store runs on', async () => {
    const store = await parseStoreUrl(POSTGRES_URL).open('create');
    opened.push(store);
    if (store.scheme !== 'postgres' && store.scheme !== 'postgresql') throw new Error(`expected PostgreSQL, got ${store.scheme}`);
    expect(store.transactional).toBe(true);
    const key = uniqueName('store_url');
    const input = { scope: 'cli', key, fingerprint: 'f', leaseMs: 1_000, retentionMs: 10_000 };
    const results = await Promise.all([store.store.claim(input), store.store.claim(input)]);
    expect(results.filter((result) => result.acquired)).toHaveLength(1);
    const answer = await store.store.transaction(async (tx) => (await tx.query<{ one: number }>('SELECT 1 AS one')).rows[0]?.one);
    expect(answer).toBe(1);
  });

  it('exits 2 with one line naming the URL, password redacted, when nothing listens', async () => {
    const refused = await runCli(['reap', '--store', 'postgres://postgres:secret@127.0.0.1:1/test']);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toMatch(/^retrysafe: cannot reach the store at postgres:\/\/postgres:\*\*\*@127\.0\.0\.1:1\/test: .*ECONNREFUSED.*\n$/);
  });

  it('runs inspect and reap on it', async () => {
    const store = await parseStoreUrl(POSTGRES_URL).open('create');
    opened.push(store);
    const key = uniqueName('store_url_inspect');
    const claim = await store.store.claim({ scope: '', key, fingerprint: 'f', leaseMs: 1_000, retentionMs: 10_000 });
    if (!claim.acquired) throw new Error('expected to win the claim');
    await store.store.complete(claim.claim, { status: 201, headers: {}, body: new TextEncoder().encode('{"ok":true}') }, 60_000);
    const inspected = await runCli(['inspect', '--store', POSTGRES_URL, key]);
    expect(inspected.code).toBe(0);
    expect(JSON.parse(inspected.stdout)).toMatchObject({ key, state: 'completed', response: { status: 201, body: { encoding: 'utf8', data: '{"ok":true}' } } });
    const reaped = await runCli(['reap', '--store', POSTGRES_URL, '--batch', '500']);
    expect(reaped.code).toBe(0);
    expect(reaped.stdout).toMatch(/reaped \d+ expired records/);
  });

  it('works in the schema ?schema= names, from migrate to inspect, and nowhere else', async () => {
    const schema = uniqueName('rs_url_schema');
    const url = `${POSTGRES_URL}${POSTGRES_URL.includes('?') ? '&' : '?'}schema=${schema}`;
    try {
      const migrated = await runCli(['migrate', '--store', url]);
      expect(migrated.code).toBe(0);
      expect(migrated.stdout).toContain(`schema "${schema}"`);
      expect((await runCli(['migrate', '--store', url, '--schema', 'other_schema'])).code).toBe(2);
      const store = await parseStoreUrl(url).open('create');
      opened.push(store);
      if (store.scheme !== 'postgres' && store.scheme !== 'postgresql') throw new Error(`expected PostgreSQL, got ${store.scheme}`);
      expect(store.store.schema).toBe(schema);
      const key = uniqueName('in_schema');
      const claim = await store.store.claim({ scope: '', key, fingerprint: 'f', leaseMs: 1_000, retentionMs: 10_000 });
      if (!claim.acquired) throw new Error('expected to win the claim');
      expect((await runCli(['inspect', '--store', url, key])).code).toBe(0);
      // The default schema does not have it.
      expect((await runCli(['inspect', '--store', POSTGRES_URL, key])).code).toBe(1);
    } finally {
      const { default: pg } = await import('pg');
      const pool = new pg.Pool({ connectionString: POSTGRES_URL, max: 1 });
      await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await pool.end();
    }
  });
});

describe.runIf(redis)('--store redis://', () => {
  it('opens a plain store that claims once across two connections', async () => {
    const one = await parseStoreUrl(REDIS_URL).open('create');
    const two = await parseStoreUrl(REDIS_URL).open('create');
    opened.push(one, two);
    expect([one.scheme, one.transactional]).toEqual(['redis', false]);
    const input = { scope: 'cli', key: uniqueName('store_url'), fingerprint: 'f', leaseMs: 1_000, retentionMs: 10_000 };
    const results = await Promise.all([one.store.claim(input), two.store.claim(input)]);
    expect(results.filter((result) => result.acquired)).toHaveLength(1);
  });

  it('keeps its records under the ?prefix= the URL names', async () => {
    const prefix = uniqueName('rs_url_prefix');
    const prefixed = await parseStoreUrl(`${REDIS_URL}${REDIS_URL.includes('?') ? '&' : '?'}prefix=${prefix}`).open('create');
    const plain = await parseStoreUrl(REDIS_URL).open('create');
    opened.push(prefixed, plain);
    const input = { scope: 'cli', key: uniqueName('store_url'), fingerprint: 'f', leaseMs: 1_000, retentionMs: 10_000 };
    expect((await prefixed.store.claim(input)).acquired).toBe(true);
    expect((await prefixed.store.get('cli', input.key))?.state).toBe('in_progress');
    expect(await plain.store.get('cli', input.key)).toBeUndefined();
    expect(await prefixed.store.reap(10)).toBe(0);
  });

  it('runs inspect on it, and exits 2 with one line naming the URL when nothing listens', async () => {
    const store = await parseStoreUrl(REDIS_URL).open('create');
    opened.push(store);
    const key = uniqueName('store_url_inspect');
    const claim = await store.store.claim({ scope: '', key, fingerprint: 'f', leaseMs: 1_000, retentionMs: 10_000 });
    if (!claim.acquired) throw new Error('expected to win the claim');
    await store.store.complete(claim.claim, { status: 200, headers: {}, body: new TextEncoder().encode('ok') }, 60_000);
    const inspected = await runCli(['inspect', '--store', REDIS_URL, key]);
    expect(inspected.code).toBe(0);
    expect(JSON.parse(inspected.stdout)).toMatchObject({ key, state: 'completed', response: { status: 200 } });
    const refused = await runCli(['inspect', '--store', 'redis://:secret@127.0.0.1:1', key]);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toMatch(/^retrysafe: cannot reach the store at redis:\/\/:\*\*\*@127\.0\.0\.1:1: .*ECONNREFUSED.*\n$/);
  });
});
