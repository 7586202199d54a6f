/**
 * The keep-alive of a holder that crashes: a child process claims a key in plain mode, makes its effect and
 * keeps working, its lease renewed by the engine; it is SIGKILLed once a renewal has moved the lease's end.
 * Nothing renews the lease after that: a retry is refused as in flight until the lease ends, `leaseMs` after
 * the last renewal, and then takes the key over and runs once more (the crashed child's effect stays
 * one: the window between an effect and its completion, docs/semantics.md). PostgreSQL, Redis and SQLite,
 * each shared by the two processes.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { afterAll, describe, it } from 'vitest';
import { RequestInProgressError } from '../../src/core/errors.js';
import type { IdempotencyStore } from '../../src/core/store.js';
import { createReceiver } from '../../src/receiver.js';
import { createPostgresStore } from '../../src/stores/postgres/index.js';
import { createRedisStore } from '../../src/stores/redis/index.js';
import { createSqliteStore } from '../../src/stores/sqlite/index.js';
import { createTestSchema, type TestSchema } from '../support/postgres-schema.js';
import { deleteUnder } from '../support/redis.js';
import { postgresAvailable, REDIS_URL, redisAvailable, uniqueName } from '../support/services.js';

const HOLDER = fileURLToPath(new URL('./fixtures/keep-alive-holder.ts', import.meta.url));
const LEASE_MS = 3_000;
const FP = 'f'.repeat(64);
const dir = mkdtempSync(join(tmpdir(), 'rs-keepalive-crash-'));
const db: TestSchema | undefined = (await postgresAvailable()) ? await createTestSchema('rs_keepalive_crash', 2) : undefined;
const redis = (await redisAvailable()) ? new Redis(REDIS_URL) : undefined;
const redisPrefix = uniqueName('rs:keepalive-crash');

afterAll(async () => {
  if (redis) {
    await deleteUnder(redis, redisPrefix);
    redis.disconnect();
  }
  await db?.drop();
  rmSync(dir, { recursive: true, force: true });
});

interface Subject {
  readonly name: string;
  /** What the holder is told to open: the schema, the prefix, the file. */
  readonly target: string;
  readonly store: IdempotencyStore;
}

const sqlitePath = join(dir, 'records.db');
const subjects: Subject[] = [
  ...(db ? [{ name: 'postgres', target: db.schema, store: createPostgresStore({ pool: db.pool, schema: db.schema }) }] : []),
  ...(redis ? [{ name: 'redis', target: redisPrefix, store: createRedisStore({ client: redis, prefix: redisPrefix }) }] : []),
  { name: 'sqlite', target: sqlitePath, store: createSqliteStore({ path: sqlitePath }) },
];

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

describe('keep-alive of a holder SIGKILLed mid-work', () => {
  it.concurrent.for(subjects)('$name: renews while the holder lives, stops when it dies; a takeover comes leaseMs after the last renewal, not before', async ({ name, target, store }, { expect }) => {
    const key = randomUUID();
    const effects = join(dir, `${key}.effects`);
    writeFileSync(effects, '');
    const holder = spawn(process.execPath, ['--import', 'tsx', HOLDER, name, target, key, String(LEASE_MS), effects], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stderr = '';
    holder.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const exited = new Promise<NodeJS.Signals | null>((resolve) => holder.once('exit', (_code, signal) => resolve(signal)));
    try {
      const lines = createInterface({ input: holder.stdout })[Symbol.asyncIterator]();
      const first = await lines.next();
      expect(first.done === true ? `exited before its effect; stderr: ${stderr}` : first.value).toBe('effect');

      // The keep-alive at work: the lease's end moves past the claim's.
      const claimed = await store.get('crash', key);
      expect(claimed?.state).toBe('in_progress');
      const claimedEnd = claimed?.leaseExpiresAt ?? 0;
      for (;;) {
        const now = await store.get('crash', key);
        if ((now?.leaseExpiresAt ?? 0) > claimedEnd) break;
        // A generous bound: a holder slowed by a loaded machine may renew late, but it does renew.
        if (Date.now() > claimedEnd + 10_000) throw new Error('the lease was never renewed');
        await sleep(20);
      }
      holder.kill('SIGKILL');
      expect(await exited).toBe('SIGKILL');
    } finally {
      if (holder.exitCode === null && holder.signalCode === null) holder.kill('SIGKILL');
    }
    // A renewal the holder sent just before it died has landed by now.
    await sleep(100);
    const orphan = await store.get('crash', key);
    expect(orphan?.state).toBe('in_progress');
    const leaseEnd = orphan?.leaseExpiresAt ?? 0;

    const id = { scope: 'crash', key, fingerprint: FP };
    let runs = 0;
    const work = (): Promise<{ status: number; headers: Record<string, string>; body: Uint8Array }> => {
      runs++;
      return Promise.resolve({ status: 201, headers: {}, body: new TextEncoder().encode('after the crash') });
    };
    // Before the lease ends the dead holder still has the key.
    const early = await createReceiver({ store, leaseMs: LEASE_MS }).execute(id, work).catch((error: unknown) => error);
    expect(early).toBeInstanceOf(RequestInProgressError);
    // A retry that waits gets the key as soon as the lease has ended, and not before.
    let takenOverAt = 0;
    const waiting = createReceiver({ store, leaseMs: LEASE_MS, inFlight: 'wait', waitTimeoutMs: LEASE_MS * 4 });
    const takeover = await waiting.execute(id, async (context) => {
      takenOverAt = Date.now();
      expect(context.claim.takeover).toBe(true);
      return work();
    });
    expect(takeover).toMatchObject({ replayed: false, saved: true });
    expect(takenOverAt).toBeGreaterThanOrEqual(leaseEnd);
    // The crashed holder made its effect once; the takeover ran once; every later retry replays.
    expect(readFileSync(effects, 'utf8').trim().split('\n')).toHaveLength(1);
    expect(runs).toBe(1);
    const replay = await waiting.execute(id, work);
    expect(replay.replayed).toBe(true);
    expect(runs).toBe(1);
  });
});
