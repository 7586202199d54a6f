/**
 * Ctrl-C on `retrysafe demo --store postgres://…`: SIGINT to the whole process group (the CLI and its
 * payments server, as a terminal sends it) must leave no `retrysafe_demo_<run>` schema and no temporary
 * directory behind, and say so in one line.
 */
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { POSTGRES_URL, postgresAvailable } from '../../support/services.js';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const available = await postgresAvailable();

async function demoSchemas(pool: pg.Pool): Promise<Set<string>> {
  const { rows } = await pool.query<{ nspname: string }>("SELECT nspname FROM pg_namespace WHERE nspname LIKE 'retrysafe\\_demo\\_%'");
  return new Set(rows.map((row) => row.nspname));
}

describe.runIf(available)('retrysafe demo on PostgreSQL, interrupted', () => {
  it('SIGINT drops the run\'s schema and temp directory, prints one line and exits 130', { timeout: 60_000 }, async () => {
    const pool = new pg.Pool({ connectionString: POSTGRES_URL, max: 1 });
    try {
      const before = await demoSchemas(pool);
      const child = spawn(process.execPath, ['--import', 'tsx', 'src/cli/main.ts', 'demo', '--store', POSTGRES_URL, '--payments', '100000'], {
        cwd: ROOT,
        detached: true,
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let stdout = '';
      let stderr = '';
      child.stdout.setEncoding('utf8').on('data', (text: string) => (stdout += text));
      child.stderr.setEncoding('utf8').on('data', (text: string) => (stderr += text));
      const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));

      // Wait until the run's schema exists (the server has started and traffic is flowing). Another test
      // file's demo may create a schema of its own meanwhile, so every new one is a candidate; the child's
      // own line below names which is ours.
      const created = new Set<string>();
      const deadline = Date.now() + 30_000;
      while (created.size === 0 && Date.now() < deadline) {
        await new Promise((resolve) => setTimeout(resolve, 100));
        for (const name of await demoSchemas(pool)) if (!before.has(name)) created.add(name);
      }
      expect(created.size).toBeGreaterThan(0);
      // Let traffic flow a little, still noting new schemas (ours may follow another file's).
      for (let i = 0; i < 5; i++) {
        await new Promise((resolve) => setTimeout(resolve, 100));
        for (const name of await demoSchemas(pool)) if (!before.has(name)) created.add(name);
      }
      // As a terminal's Ctrl-C: the whole process group.
      process.kill(-(child.pid ?? 0), 'SIGINT');

      expect(await exited).toBe(130);
      expect(stdout).toBe('');
      const match = /^retrysafe: demo interrupted; removed schema (retrysafe_demo_[0-9a-f]+), temporary directory (\S+)\n$/.exec(stderr);
      expect(match, stderr).not.toBeNull();
      const ours = match?.[1] ?? '';
      expect(created.has(ours), `${ours} is not among the schemas created during the run: ${[...created].join(', ')}`).toBe(true);
      expect(existsSync(match?.[2] ?? '/')).toBe(false);
      expect((await demoSchemas(pool)).has(ours)).toBe(false);
    } finally {
      await pool.end();
    }
  });
});
