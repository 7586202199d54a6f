/**
 * `retrysafe demo` leaves nothing behind, on SQLite (the default), PostgreSQL and Redis: run to the end, and
 * interrupted mid-run by SIGINT to the whole process group (as a terminal's Ctrl-C sends it), and on
 * PostgreSQL by SIGTERM to the CLI alone. The run names
 * what it wrote (the report's `removed`, or the one line it prints when interrupted); each of those, and
 * anything else carrying the run's id (a schema, a record in another schema, a Redis key anywhere), must be
 * gone once the process has exited.
 */
import { spawn } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import type { DemoReport } from '../../../src/demo/payments/report.js';
import { runCli } from '../../support/run-cli.js';
import { POSTGRES_URL, REDIS_URL, postgresAvailable, redisAvailable } from '../../support/services.js';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const postgres = await postgresAvailable();
const redis = await redisAvailable();
const pool = new pg.Pool({ connectionString: POSTGRES_URL, max: 1 });
const keys = new Redis(REDIS_URL, { lazyConnect: true, maxRetriesPerRequest: 1 });
if (redis) await keys.connect();
afterAll(async () => {
  await pool.end();
  if (redis) await keys.quit();
});

/** A demo of a few seconds; the machine may be loaded, so the budget is wide. */
const RUN_TIMEOUT_MS = 120_000;

type Backend = 'sqlite' | 'postgres' | 'redis';

const BACKENDS: readonly { readonly name: Backend; readonly store: readonly string[]; readonly available: boolean }[] = [
  { name: 'sqlite', store: [], available: true },
  { name: 'postgres', store: ['--store', POSTGRES_URL], available: postgres },
  { name: 'redis', store: ['--store', REDIS_URL], available: redis },
];

async function demoSchemas(): Promise<string[]> {
  const { rows } = await pool.query<{ nspname: string }>("SELECT nspname FROM pg_namespace WHERE nspname LIKE 'retrysafe\\_demo\\_%'");
  return rows.map((row) => row.nspname);
}

async function scan(pattern: string): Promise<string[]> {
  const found: string[] = [];
  for await (const batch of keys.scanStream({ match: pattern, count: 1_000 }) as AsyncIterable<string[]>) found.push(...batch);
  return found;
}

function demoDirectories(): string[] {
  return readdirSync(tmpdir()).filter((name) => name.startsWith('retrysafe-demo-') && !name.startsWith('retrysafe-demo-gateway-'));
}

/** Names of what the run may be writing now (new since `before`), to wait until traffic flows. */
async function inFlight(backend: Backend, before: ReadonlySet<string>): Promise<string[]> {
  const now =
    backend === 'postgres'
      ? await demoSchemas()
      : backend === 'redis'
        ? await scan('retrysafe_demo_*')
        : demoDirectories().filter((name) => existsSync(join(tmpdir(), name, 'payments.db')));
  return now.filter((name) => !before.has(name));
}

/**
 * Asserts that nothing `removed` names exists, and that nothing else carries the run's id: no schema, no
 * record in the default schema `retrysafe`, no Redis key anywhere.
 */
async function expectNothingLeft(removed: readonly string[]): Promise<void> {
  const directory = removed.find((item) => item.startsWith('temporary directory '))?.slice('temporary directory '.length);
  expect(directory, removed.join(', ')).toBeDefined();
  expect(existsSync(directory ?? '/')).toBe(false);
  const runId = removed.map((item) => /retrysafe_demo_([0-9a-f]+)/.exec(item)?.[1]).find((id) => id !== undefined);
  if (runId === undefined) return;
  if (postgres) {
    const { rows } = await pool.query<{ nspname: string }>('SELECT nspname FROM pg_namespace WHERE strpos(nspname, $1) > 0', [runId]);
    expect(rows).toEqual([]);
    const records = await pool.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM pg_tables WHERE schemaname = 'retrysafe' AND tablename = 'records'",
    );
    if (records.rows[0]?.n === 1) {
      const left = await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM retrysafe.records WHERE strpos(key, $1) > 0', [runId]);
      expect(left.rows[0]?.n).toBe(0);
    }
  }
  if (redis) expect(await scan(`*${runId}*`)).toEqual([]);
}

describe('retrysafe demo leaves nothing behind', () => {
  for (const { name, store, available } of BACKENDS) {
    describe.runIf(available)(`on ${name}`, () => {
      it('run to the end: PASS, and what it names as removed is gone', { timeout: RUN_TIMEOUT_MS }, async () => {
        const result = await runCli(['demo', '--json', '--payments', '10', ...store], RUN_TIMEOUT_MS - 10_000);
        expect(result.code, result.stderr).toBe(0);
        const report = JSON.parse(result.stdout) as DemoReport;
        expect(report.passed).toBe(true);
        // Progress lines go to stderr alone; the last one, at the end of the traffic, has the final tally.
        expect(result.stderr).toMatch(/^retrysafe demo: payments 10\/10 answered \(10 sent\), \d+ HTTP attempts, server crashes \d+, restarts \d+$/m);
        expect(report.removed.length).toBe(name === 'sqlite' ? 1 : 2);
        await expectNothingLeft(report.removed);
      });

      // SIGINT to the process group, as a terminal's Ctrl-C; SIGTERM to the CLI alone, as a supervisor stops it.
      const signals = name === 'postgres' ? (['SIGINT', 'SIGTERM'] as const) : (['SIGINT'] as const);
      it.each(signals)('%s mid-run: exits 128+signal with one line naming what it removed, and all of it is gone', { timeout: RUN_TIMEOUT_MS }, async (signal) => {
        const before = new Set(name === 'postgres' ? await demoSchemas() : name === 'redis' ? await scan('retrysafe_demo_*') : demoDirectories());
        const child = spawn(process.execPath, ['--import', 'tsx', 'src/cli/main.ts', 'demo', '--payments', '5000', ...store], {
          cwd: ROOT,
          detached: true,
          stdio: ['ignore', 'pipe', 'pipe'],
        });
        let stdout = '';
        let stderr = '';
        child.stdout.setEncoding('utf8').on('data', (text: string) => (stdout += text));
        child.stderr.setEncoding('utf8').on('data', (text: string) => (stderr += text));
        const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
        try {
          // Traffic flows once the run's schema, keys or SQLite file exist (another file's demo may add its own).
          const deadline = Date.now() + 60_000;
          while ((await inFlight(name, before)).length === 0 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 100));
          expect(await inFlight(name, before)).not.toEqual([]);
          await new Promise((resolve) => setTimeout(resolve, 500));
          if (signal === 'SIGINT') process.kill(-(child.pid ?? 0), 'SIGINT');
          else child.kill('SIGTERM');
          expect(await exited, stderr).toBe(signal === 'SIGINT' ? 130 : 143);
        } finally {
          if (child.exitCode === null && child.signalCode === null) process.kill(-(child.pid ?? 0), 'SIGKILL');
        }
        expect(stdout).toBe('');
        const line = /^retrysafe: demo interrupted; removed (.+)\n$/.exec(stderr.split('\n').filter((text) => !text.startsWith('retrysafe demo: ')).join('\n'));
        expect(line, stderr).not.toBeNull();
        const removed = (line?.[1] ?? '').split(', ');
        expect(removed.length).toBe(name === 'sqlite' ? 1 : 2);
        await expectNothingLeft(removed);
      });
    });
  }
});
