/**
 * The retrying client's defaults against a server restart: a real server (a child process) SIGKILLed
 * while calls are in flight and started again on the same port about 1.5 s later. With the defaults every
 * call must succeed, and each logical call must take effect exactly once on the server (the server counts
 * executions in the same SQLite transaction as the saved response).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import BetterSqlite3 from 'better-sqlite3';
import { afterAll, describe, expect, it } from 'vitest';
import { createRetryingFetch, RetryExhaustedError, type RetryingFetchOptions } from '../../src/client/fetch.js';
import { ManualClock } from '../../src/core/clock.js';
import { freePort } from '../support/services.js';

const CHILD = fileURLToPath(new URL('./fixtures/restart-server.ts', import.meta.url));
const dir = mkdtempSync(join(tmpdir(), 'retrysafe-client-restart-'));
const children = new Set<ChildProcess>();

afterAll(() => {
  for (const child of children) child.kill('SIGKILL');
  rmSync(dir, { recursive: true, force: true });
});

/** Starts the server child on `port` and resolves once it listens. */
async function startServer(port: number, db: string): Promise<ChildProcess> {
  const child = spawn(process.execPath, ['--import', 'tsx', CHILD], {
    env: { ...process.env, RESTART_PORT: String(port), RESTART_DB: db },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.add(child);
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => void (stderr += chunk.toString()));
  await new Promise<void>((resolve, reject) => {
    child.stdout?.on('data', (chunk: Buffer) => {
      if (chunk.toString().includes('listening')) resolve();
    });
    child.once('exit', (code) => reject(new Error(`the server exited with code ${String(code)}: ${stderr}`)));
  });
  return child;
}

async function kill(child: ChildProcess): Promise<void> {
  const exited = once(child, 'exit');
  child.kill('SIGKILL');
  await exited;
  children.delete(child);
}

describe('the retrying client across a server restart', () => {
  it('with the defaults, 40 calls in flight through a SIGKILL and a 1.5 s restart all succeed, each executed once', async () => {
    const port = await freePort();
    const db = join(dir, 'restart.db');
    let server = await startServer(port, db);
    const attempts: number[] = [];
    const retrying = createRetryingFetch({ onAttempt: (a) => attempts.push(a.attempt) });
    const calls: Promise<Response>[] = [];
    for (let i = 0; i < 40; i++) {
      calls.push(retrying(`http://127.0.0.1:${port}/charges`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ i }) }));
      if (i === 19) await kill(server);
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    server = await startServer(port, db);
    const settled = await Promise.allSettled(calls);
    await kill(server);

    const failed = settled.filter((s) => s.status === 'rejected');
    expect(failed.map((s) => String((s).reason))).toEqual([]);
    const responses = settled.map((s) => (s as PromiseFulfilledResult<Response>).value);
    expect(responses.map((r) => r.status)).toEqual(Array.from({ length: 40 }, () => 201));
    const keys = await Promise.all(responses.map(async (r) => ((await r.json()) as { key: string }).key));
    expect(new Set(keys).size).toBe(40);
    // The calls made after the kill were retried: the fault did happen.
    expect(Math.max(...attempts)).toBeGreaterThan(1);

    const database = new BetterSqlite3(db, { readonly: true });
    const rows = database.prepare('SELECT key, COUNT(*) AS n FROM effects GROUP BY key').all() as { key: string; n: number }[];
    database.close();
    expect(rows).toHaveLength(40);
    expect(rows.filter((row) => row.n !== 1)).toEqual([]);
    expect(new Set(rows.map((row) => row.key))).toEqual(new Set(keys));
  });

  it('with the defaults and the median jitter draw, rides out 2 s of 503s (on an injected clock)', async () => {
    const clock = new ManualClock(0);
    const waits: number[] = [];
    const sleep: NonNullable<RetryingFetchOptions['sleep']> = (ms) => {
      waits.push(ms);
      clock.advance(ms);
      return Promise.resolve();
    };
    const server: Server = createServer((_req, res) => res.writeHead(clock.now() < 2_000 ? 503 : 201).end());
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    try {
      const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
      const res = await createRetryingFetch({ clock, sleep, random: () => 0.5 })(url, { method: 'POST' }).catch((error: unknown) => error);
      expect(res).not.toBeInstanceOf(RetryExhaustedError);
      expect((res as Response).status).toBe(201);
      // Full jitter at the median draw: half of 500, 1,000, 2,000 … ms.
      expect(waits).toEqual([250, 500, 1_000, 2_000]);
    } finally {
      server.closeAllConnections();
      server.close();
    }
  });
});
