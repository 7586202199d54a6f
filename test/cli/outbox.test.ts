/**
 * `retrysafe outbox status | dead-letters | redrive | reap` against the real PostgreSQL, run as a user
 * runs the CLI (a child process).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createOutbox, createRelay, PublishError } from '../../src/messaging/outbox/index.js';
import { runCli } from '../support/run-cli.js';
import { createTestSchema, postgresAvailable, type TestSchema } from '../support/postgres-schema.js';
import { POSTGRES_URL } from '../support/services.js';
import { untilVisible } from '../support/outbox.js';

const available = await postgresAvailable();

describe.runIf(available)('retrysafe outbox', () => {
  let db: TestSchema;
  let dead: string;

  beforeAll(async () => {
    db = await createTestSchema('rs_outbox_cli', 4);
    const outbox = createOutbox({ schema: db.schema });
    dead = await outbox.enqueue(db.pool, { topic: 'orders', key: 'a', payload: 'refused' });
    const relay = createRelay({
      pool: db.pool,
      outbox,
      publisher: { publish: () => Promise.reject(new PublishError('refused by the test', true)), close: () => Promise.resolve() },
    });
    await untilVisible(db.pool, db.schema);
    expect(await relay.runOnce()).toBe(1);
    await outbox.enqueue(db.pool, { topic: 'orders', key: 'b', payload: 'waiting' });
  });

  afterAll(async () => {
    await db.drop();
  });

  it('prints the status as text and as JSON', async () => {
    const text = await runCli(['outbox', 'status', '--store', POSTGRES_URL, '--schema', db.schema]);
    expect(text.code).toBe(0);
    expect(text.stdout).toMatch(/pending\s+1\n/);
    expect(text.stdout).toMatch(/dead letters\s+1\n/);
    expect(text.stdout).toMatch(/oldest pending age\s+\d+ ms\n/);
    const json = await runCli(['outbox', 'status', '--store', POSTGRES_URL, '--schema', db.schema, '--json']);
    expect(JSON.parse(json.stdout)).toMatchObject({ schema: db.schema, pending: 1, deadLetters: 1, inFlight: 0, sent: 0 });
  });

  it('lists and redrives dead letters; a second redrive finds none (exit 1)', async () => {
    const list = await runCli(['outbox', 'dead-letters', '--store', POSTGRES_URL, '--schema', db.schema, '--json']);
    expect(list.code).toBe(0);
    const letter = JSON.parse(list.stdout) as { id: string; error: string; payload: string };
    expect(letter).toMatchObject({ id: dead, error: 'refused by the test', payload: Buffer.from('refused').toString('base64') });
    expect((await runCli(['outbox', 'redrive', dead, '--store', POSTGRES_URL, '--schema', db.schema])).code).toBe(0);
    const again = await runCli(['outbox', 'redrive', dead, '--store', POSTGRES_URL, '--schema', db.schema]);
    expect(again.code).toBe(1);
    expect(again.stderr).toContain(`no dead letter ${dead}`);
  });

  it('reaps and rejects bad flags with exit code 2', async () => {
    const reap = await runCli(['outbox', 'reap', '--store', POSTGRES_URL, '--schema', db.schema, '--retention', '1s']);
    expect(reap.stdout).toBe('retrysafe: deleted 0 sent rows\n');
    expect((await runCli(['outbox', 'status', '--store', 'redis://127.0.0.1:6379'])).code).toBe(2);
    expect((await runCli(['outbox', 'status', '--store', POSTGRES_URL, '--schema', 'no-dashes'])).code).toBe(2);
    expect((await runCli(['outbox', 'redrive', 'not-a-uuid', '--store', POSTGRES_URL])).code).toBe(2);
  });
});
