/** `retrysafe inbox dead-letters | redrive | reap` against PostgreSQL and a SQLite file. */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Command } from 'commander';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { register } from '../../src/cli/inbox.js';
import { ManualClock } from '../../src/core/clock.js';
import { createInbox, createPostgresInboxStore, createSqliteInboxStore } from '../../src/messaging/inbox/index.js';
import { postgresAvailable } from '../support/postgres-schema.js';
import { POSTGRES_URL } from '../support/services.js';
import { createEffectsSchema, type EffectsSchema } from '../support/messaging.js';

const available = await postgresAvailable();

async function run(args: string[]): Promise<{ out: string; err: string; exitCode: number | undefined }> {
  const program = new Command('retrysafe').exitOverride();
  register(program);
  let out = '';
  let err = '';
  const stdout = vi.spyOn(process.stdout, 'write').mockImplementation((chunk) => {
    out += String(chunk);
    return true;
  });
  const stderr = vi.spyOn(process.stderr, 'write').mockImplementation((chunk) => {
    err += String(chunk);
    return true;
  });
  const before = process.exitCode;
  try {
    await program.parseAsync(['inbox', ...args], { from: 'user' });
    return { out, err, exitCode: process.exitCode === before ? undefined : Number(process.exitCode) };
  } finally {
    process.exitCode = before;
    stdout.mockRestore();
    stderr.mockRestore();
  }
}

afterEach(() => {
  vi.restoreAllMocks();
});

describe.runIf(available)('retrysafe inbox (PostgreSQL)', () => {
  let db: EffectsSchema;

  beforeAll(async () => {
    db = await createEffectsSchema('rs_inbox_cli', 4);
  });

  afterAll(async () => {
    await db.drop();
  });

  it('lists dead letters, redrives one once, and refuses an unknown one with exit code 1', async () => {
    const inbox = createInbox({ store: createPostgresInboxStore({ pool: db.pool, schema: db.schema }), maxAttempts: 1 });
    await inbox.handle({ consumer: 'mailer', messageId: 'm-1', body: new TextEncoder().encode('hi') }, () => Promise.reject(new Error('smtp down')));
    const store = ['--store', POSTGRES_URL, '--schema', db.schema];

    const listed = await run(['dead-letters', ...store]);
    expect(listed.out).toMatch(/^mailer\tm-1\t1 attempts\t\d{4}-\d\d-\d\dT[^\t]+\tError: smtp down\n$/);
    const json = await run(['dead-letters', ...store, '--json', '--consumer', 'mailer']);
    expect(JSON.parse(json.out)).toMatchObject({ consumer: 'mailer', messageId: 'm-1', attempts: 1, body: Buffer.from('hi').toString('base64') });

    expect(await run(['redrive', 'm-1', '--consumer', 'mailer', ...store])).toMatchObject({ exitCode: undefined, out: expect.stringContaining('requested') as unknown });
    expect((await inbox.pendingRedrives('mailer')).map((l) => l.messageId)).toEqual(['m-1']);
    const again = await run(['redrive', 'm-1', '--consumer', 'mailer', ...store]);
    expect(again.exitCode).toBe(1);
    expect(again.err).toContain('no dead letter "m-1"');
    // Listed as redrive pending until the consumer takes it.
    expect((await run(['dead-letters', ...store])).out).toBe('mailer\tm-1\t0 attempts\tredrive pending\tError: smtp down\n');
    expect(await inbox.handle({ consumer: 'mailer', messageId: 'm-1' }, () => Promise.resolve())).toMatchObject({ status: 'processed' });
    expect((await run(['dead-letters', ...store])).out).toBe('retrysafe: no dead letters\n');
  });

  it('reaps old marks until caught up, and refuses a retention not above the retry horizon', async () => {
    const clock = new ManualClock(Date.now() - 10 * 86_400_000);
    const inbox = createInbox({ store: createPostgresInboxStore({ pool: db.pool, schema: db.schema }), clock });
    for (let i = 0; i < 5; i += 1) await inbox.handle({ consumer: 'gc', messageId: `old-${i}` }, () => Promise.resolve());
    const store = ['--store', POSTGRES_URL, '--schema', db.schema];
    expect((await run(['reap', ...store, '--retention', '7d', '--limit', '2'])).out).toBe('retrysafe: deleted 5 rows\n');
    await expect(run(['reap', ...store, '--retention', '1h'])).rejects.toMatchObject({ exitCode: 2 });
    await expect(run(['dead-letters', '--store', 'mysql://x'])).rejects.toMatchObject({ code: 'commander.invalidArgument' });
  });
});

describe('retrysafe inbox (SQLite)', () => {
  it('lists the dead letters of a SQLite file', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'rs-inbox-cli-'));
    try {
      const path = join(dir, 'app.db');
      const store = createSqliteInboxStore({ path });
      const inbox = createInbox({ store, maxAttempts: 1 });
      await inbox.handle({ consumer: 'c', messageId: 'x' }, () => Promise.reject(new Error('nope')));
      await inbox.close();
      expect((await run(['dead-letters', '--store', `sqlite:${path}`])).out).toMatch(/^c\tx\t1 attempts\t.+\tError: nope\n$/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
