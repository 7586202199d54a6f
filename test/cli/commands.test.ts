/**
 * The CLI's behaviour at its edges, run as a user runs it (a child process): read-only commands create
 * nothing, every command honours `?schema=`, an unreachable store is one line naming the URL (password
 * redacted) and exit 2, usage errors are one line, and the help and version say what the flags take.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createInbox, createPostgresInboxStore } from '../../src/messaging/inbox/index.js';
import { createOutbox, createRelay, PublishError } from '../../src/messaging/outbox/index.js';
import { createTestSchema, type TestSchema } from '../support/postgres-schema.js';
import { untilVisible } from '../support/outbox.js';
import { runCli, type CliResult } from '../support/run-cli.js';
import { POSTGRES_URL, postgresAvailable, uniqueName } from '../support/services.js';

const postgres = await postgresAvailable();

/** `POSTGRES_URL` with `?schema=NAME` appended. */
function withSchema(schema: string): string {
  return `${POSTGRES_URL}${POSTGRES_URL.includes('?') ? '&' : '?'}schema=${schema}`;
}

/** Exactly one line on stderr, nothing on stdout, exit 2. */
function expectOneLineFailure(result: CliResult): string {
  expect(result.stdout).toBe('');
  expect(result.code).toBe(2);
  expect(result.stderr).toMatch(/^retrysafe: [^\n]+\n$/);
  return result.stderr;
}

async function schemaExists(schema: string): Promise<boolean> {
  const client = new pg.Client({ connectionString: POSTGRES_URL });
  await client.connect();
  try {
    return (await client.query('SELECT 1 FROM pg_namespace WHERE nspname = $1', [schema])).rows.length > 0;
  } finally {
    await client.end();
  }
}

describe.runIf(postgres)('read-only commands on a schema that does not exist', () => {
  it('fail in one line saying to run migrate, and create nothing', async () => {
    const schema = uniqueName('rs_typo');
    const url = withSchema(schema);
    const results = await Promise.all([
      runCli(['inspect', '--store', url, 'k']),
      runCli(['outbox', 'status', '--store', url]),
      runCli(['outbox', 'dead-letters', '--store', url]),
      runCli(['inbox', 'dead-letters', '--store', url]),
      runCli(['reap', '--store', url]),
      runCli(['complete', '--store', url]),
    ]);
    for (const result of results) {
      expect(expectOneLineFailure(result)).toContain(`schema "${schema}" does not exist`);
      expect(result.stderr).toContain('retrysafe migrate');
    }
    expect(await schemaExists(schema)).toBe(false);
  });
});

describe('read-only commands on a SQLite file that does not exist', () => {
  it('fail in one line and do not create the file', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'retrysafe-cli-'));
    try {
      const path = join(dir, 'nope.db');
      const results = await Promise.all([
        runCli(['inspect', '--store', `sqlite:${path}`, 'k']),
        runCli(['reap', '--store', `sqlite:${path}`]),
        runCli(['inbox', 'dead-letters', '--store', `sqlite:${path}`]),
      ]);
      for (const result of results) expect(expectOneLineFailure(result)).toContain(`the SQLite file ${path} does not exist`);
      expect(existsSync(path)).toBe(false);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe.runIf(postgres)('?schema= in the --store URL', () => {
  let db: TestSchema;

  beforeAll(async () => {
    db = await createTestSchema('rs_cli_schema', 4);
    const outbox = createOutbox({ schema: db.schema });
    // One row the relay keeps retrying (a transient failure), one dead letter.
    await outbox.enqueue(db.pool, { topic: 'orders', key: 'stuck', payload: 'x' });
    const relay = createRelay({
      pool: db.pool,
      outbox,
      publisher: { publish: () => Promise.reject(new PublishError('broker said no', false)), close: () => Promise.resolve() },
    });
    await untilVisible(db.pool, db.schema);
    expect(await relay.runOnce()).toBe(1);
    const inbox = createInbox({ store: createPostgresInboxStore({ pool: db.pool, schema: db.schema }), maxAttempts: 1 });
    await inbox.handle({ consumer: 'mailer', messageId: 'm-1' }, () => Promise.reject(new Error('smtp down')));
  });

  afterAll(async () => {
    await db.drop();
  });

  it('is where outbox status, outbox dead-letters and inbox dead-letters look', async () => {
    const url = withSchema(db.schema);
    const [status, outboxDead, inboxDead] = await Promise.all([
      runCli(['outbox', 'status', '--store', url, '--json']),
      runCli(['outbox', 'dead-letters', '--store', url]),
      runCli(['inbox', 'dead-letters', '--store', url]),
    ]);
    expect(status.code).toBe(0);
    expect(JSON.parse(status.stdout)).toMatchObject({ schema: db.schema, pending: 1, retrying: 1 });
    expect(outboxDead).toMatchObject({ code: 0, stdout: 'retrysafe: no dead letters\n' });
    expect(inboxDead.code).toBe(0);
    expect(inboxDead.stdout).toMatch(/^mailer\tm-1\t1 attempts\t.*smtp down\n$/);
  });

  it('outbox status shows why a row is stuck: the last error of the oldest retried row', async () => {
    const text = await runCli(['outbox', 'status', '--store', withSchema(db.schema)]);
    expect(text.code).toBe(0);
    expect(text.stdout).toContain(`retrysafe outbox in schema "${db.schema}"`);
    expect(text.stdout).toMatch(/retrying\s+1 \(oldest's last error: .*broker said no\)\n/);
  });

  it('refuses a --schema that differs from the URL\'s ?schema=, in one line', async () => {
    const result = await runCli(['outbox', 'status', '--store', withSchema(db.schema), '--schema', 'other']);
    expect(expectOneLineFailure(result)).toContain(`--schema other differs from the --store URL's ?schema=${db.schema}`);
  });
});

describe('an unreachable store', () => {
  const url = 'postgres://app:s3cret@127.0.0.1:5999/test';
  const redacted = 'postgres://app:***@127.0.0.1:5999/test';

  it.each([
    [['inspect', '--store', url, 'k']],
    [['reap', '--store', url]],
    [['complete', '--store', url]],
    [['migrate', '--store', url]],
    [['outbox', 'status', '--store', url]],
    [['outbox', 'dead-letters', '--store', url]],
    [['inbox', 'dead-letters', '--store', url]],
    [['demo', '--store', url]],
  ])('%j: one line naming the URL with the password redacted, exit 2', async (args) => {
    const stderr = expectOneLineFailure(await runCli(args));
    expect(stderr).toContain(`cannot reach the store at ${redacted}: connect ECONNREFUSED`);
    expect(stderr).not.toContain('s3cret');
  });

  it('Redis: one line naming the URL, no "Unhandled error event" from the driver', async () => {
    const results = await Promise.all([runCli(['reap', '--store', 'redis://127.0.0.1:6999']), runCli(['demo', '--store', 'redis://127.0.0.1:6999'])]);
    for (const result of results) {
      expect(expectOneLineFailure(result)).toContain('cannot reach the store at redis://127.0.0.1:6999: connect ECONNREFUSED');
    }
  });

  it('demo on SQLite in a directory that does not exist: one line, no stack trace from the server', async () => {
    const stderr = expectOneLineFailure(await runCli(['demo', '--store', 'sqlite:/nonexistent-retrysafe-dir/x.db']));
    expect(stderr).toContain('sqlite:/nonexistent-retrysafe-dir/x.db');
    expect(stderr).toContain('directory does not exist');
  });
});

describe('usage, help and version', () => {
  it('--version prints the package version', async () => {
    const { version } = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string };
    expect(await runCli(['--version'])).toMatchObject({ code: 0, stdout: `${version}\n` });
  });

  it('help shows duration defaults in the unit the flags take', async () => {
    const [complete, reap] = await Promise.all([runCli(['complete', '--help']), runCli(['inbox', 'reap', '--help'])]);
    expect(complete.stdout).toMatch(/--lease <duration>[\s\S]*\(default: 30s\)/);
    expect(complete.stdout).toMatch(/--retention <duration>[\s\S]*\(default: 24h\)/);
    expect(reap.stdout).toMatch(/--retry-horizon <duration>[\s\S]*\(default: 24h\)/);
  });

  it.each([
    [['demo', '--orders', '20'], '--orders applies to --scenario orders only'],
    [['demo', '--amqp', 'amqp://127.0.0.1'], '--amqp applies to --scenario orders only'],
    [['demo', '--scenario', 'orders', '--payments', '20'], '--payments applies to --scenario payments and gateway only'],
    [['demo', '--broker', 'kafka'], '--broker applies to --scenario orders only'],
    [['demo', '--scenario', 'gateway', '--unsafe'], '--unsafe applies to --scenario payments and orders only, not to --scenario gateway'],
    [['demo', '--scenario', 'orders', '--broker', 'nats'], "option '--broker <name>' argument 'nats' is invalid. --broker must be rabbitmq or kafka."],
    [['demo', '--scenario', 'orders', '--broker', 'kafka', '--amqp', 'amqp://127.0.0.1'], '--amqp applies to --broker rabbitmq only, not to --broker kafka'],
    [['demo', '--bogus'], "unknown option '--bogus'"],
    [['demo', '--payments', '5'], '--payments must be an integer from 10 to 1000000.'],
    [['demo', '--store', 'postgres://app@127.0.0.1:5999/test?schema=mine'], 'demo keeps its records in a schema of its own (retrysafe_demo_<run>, removed afterwards): drop ?schema= from --store'],
    [['demo', '--scenario', 'gateway', '--store', 'redis://127.0.0.1:6999?prefix=mine'], 'drop ?prefix= from --store'],
    [['nope'], "unknown command 'nope'"],
    [['inbox', 'reap', '--store', 'sqlite:/tmp/x.db', '--retention', '1h'], '--retention (3600 s) must exceed --retry-horizon (86400 s)'],
  ])('%j is refused in one line with exit 2', async (args, message) => {
    expect(expectOneLineFailure(await runCli(args))).toContain(message);
  });
});
