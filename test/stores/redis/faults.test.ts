/**
 * Fault tests of the Redis store: a process killed between the business write and `complete`, Redis
 * restarted under a running client, and duplicates fired from two processes at once.
 */
import { spawn, type ChildProcess, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { RequestInProgressError, StoreUnavailableError } from '../../../src/core/errors.js';
import type { StoredResponse } from '../../../src/core/record.js';
import { createReceiver } from '../../../src/receiver.js';
import { createRedisStore } from '../../../src/stores/redis/index.js';
import { CLAIM_LUA } from '../../../src/stores/redis/scripts/claim.lua.js';
import { allowingOom, LuaScript } from '../../../src/stores/redis/script.js';
import { COMPLETE_LUA } from '../../../src/stores/redis/scripts/complete.lua.js';
import { deleteUnder } from '../../support/redis.js';
import { freePort, REDIS_URL, serviceAvailable, uniqueName } from '../../support/services.js';

const FIXTURE = fileURLToPath(new URL('./fixtures/child.ts', import.meta.url));
const ROOT = fileURLToPath(new URL('../../..', import.meta.url));
const FILE_PREFIX = uniqueName('rs_redis_faults');
const FP = 'f'.repeat(64);
const encoder = new TextEncoder();
const decoder = new TextDecoder();

function text(body: string): StoredResponse {
  return { status: 200, headers: { 'content-type': 'text/plain' }, body: encoder.encode(body) };
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

function child(...args: string[]): ChildProcessWithoutNullStreams {
  return spawn(process.execPath, ['--import', 'tsx', FIXTURE, ...args], { cwd: ROOT });
}

/** Resolves with the first stdout line of `proc` that satisfies `match`; rejects if it exits first. */
function lineFrom(proc: ChildProcessWithoutNullStreams, match: (line: string) => boolean): Promise<string> {
  return new Promise((resolve, reject) => {
    let buffered = '';
    let errors = '';
    proc.stderr.on('data', (chunk: Buffer) => (errors += chunk.toString()));
    const onData = (chunk: Buffer): void => {
      buffered += chunk.toString();
      const lines = buffered.split('\n');
      buffered = lines.pop() ?? '';
      const found = lines.find(match);
      if (found !== undefined) {
        proc.stdout.off('data', onData);
        resolve(found);
      }
    };
    proc.stdout.on('data', onData);
    proc.once('exit', (code) => reject(new Error(`child exited (${code}) before the expected line; stderr: ${errors}`)));
  });
}

function exited(proc: ChildProcess): Promise<void> {
  if (proc.exitCode !== null || proc.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => proc.once('exit', () => resolve()));
}

/** Starts a private redis-server (append-only file, fsync per write) and resolves once it accepts connections. */
async function startRedis(port: number, dir: string): Promise<ChildProcessWithoutNullStreams> {
  const server = spawn('redis-server', [
    '--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'yes', '--appendfsync', 'always', '--dir', dir,
  ]);
  await lineFrom(server, (line) => line.includes('Ready to accept connections'));
  return server;
}

async function until(condition: () => boolean, what: string, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(10);
  }
}

const client = new Redis(REDIS_URL, { lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 1 });

if (await serviceAvailable('Redis', () => client.connect())) {
  afterAll(async () => {
    await deleteUnder(client, FILE_PREFIX);
    await client.quit();
  });

  describe('redis store: faults', () => {
    it('re-executes after the lease when the holder is SIGKILLed between the business write and complete (the documented window)', async () => {
      const prefix = `${FILE_PREFIX}:crash`;
      const leaseMs = 2_000;
      const counter = `${prefix}:effects:order-1`;
      const proc = child('crash', REDIS_URL, prefix, 'order-1', String(leaseMs));
      await lineFrom(proc, (line) => line === 'wrote');
      proc.kill('SIGKILL');
      await exited(proc);
      expect(await client.get(counter)).toBe('1');

      const store = createRedisStore({ client, prefix });
      const receiver = createReceiver({ store, leaseMs });
      const id = { scope: 'shared', key: 'order-1', fingerprint: FP };
      const orphan = await store.get('shared', 'order-1');
      expect(orphan?.state).toBe('in_progress');
      const leaseExpiresAt = orphan?.leaseExpiresAt ?? 0;

      // Before the lease ends: the dead holder still owns the key, the retry is told it is in flight.
      expect(Date.now()).toBeLessThan(leaseExpiresAt);
      await expect(receiver.execute(id, () => Promise.reject(new Error('must not run')))).rejects.toBeInstanceOf(
        RequestInProgressError,
      );
      expect(await client.get(counter)).toBe('1');

      // After it: the retry takes over and runs the work again. Redis could not commit with the business write.
      await sleep(leaseExpiresAt - Date.now() + 20);
      let takeover = false;
      const rerun = await receiver.execute(id, async ({ claim }) => {
        takeover = claim.takeover;
        await client.incr(counter);
        return text('paid');
      });
      expect(takeover).toBe(true);
      expect(rerun).toMatchObject({ replayed: false, saved: true });
      expect(await client.get(counter)).toBe('2');

      const replay = await receiver.execute(id, () => Promise.reject(new Error('must not run')));
      expect(replay.replayed).toBe(true);
      expect(decoder.decode(replay.response.body)).toBe('paid');
      expect(await client.get(counter)).toBe('2');
      await store.close();
    });

    it('runs each key once for 100 parallel duplicates per key in each of 2 processes', async () => {
      const prefix = `${FILE_PREFIX}:dups`;
      const keys = 10;
      const perKey = 100;
      const procs = [child('duplicates', REDIS_URL, prefix, String(keys), String(perKey)), child('duplicates', REDIS_URL, prefix, String(keys), String(perKey))];
      await Promise.all(procs.map((proc) => lineFrom(proc, (line) => line === 'ready')));
      const reports = procs.map((proc) => lineFrom(proc, (line) => line.startsWith('{')));
      for (const proc of procs) proc.stdin.write('go\n');
      const results = (await Promise.all(reports)).map(
        (line) => JSON.parse(line) as { executed: number; replayed: number; failures: string[]; bodies: Record<string, string[]> },
      );
      await Promise.all(procs.map(exited));

      expect(results.flatMap((r) => r.failures)).toEqual([]);
      expect(results.reduce((sum, r) => sum + r.executed, 0)).toBe(keys);
      expect(results.reduce((sum, r) => sum + r.replayed, 0)).toBe(keys * perKey * 2 - keys);
      for (let k = 0; k < keys; k++) {
        expect(await client.get(`${prefix}:effects:dup-${k}`)).toBe('1');
        // Every caller in both processes got the one execution's body.
        const seen = new Set(results.flatMap((r) => r.bodies[`dup-${k}`] ?? []));
        expect(seen.size).toBe(1);
      }
    });

    it('fails closed while Redis is down and recovers after a restart, reloading its scripts', async () => {
      const dir = mkdtempSync(join(tmpdir(), 'retrysafe-redis-'));
      const port = await freePort();
      let server = await startRedis(port, dir);
      const own = new Redis({ host: '127.0.0.1', port, enableOfflineQueue: false, maxRetriesPerRequest: 1, retryStrategy: () => 50 });
      own.on('error', () => undefined);
      try {
        await until(() => own.status === 'ready', 'the client to connect');
        const receiver = createReceiver({ store: createRedisStore({ client: own }) });
        let runs = 0;
        const work = (body: string) => () => {
          runs++;
          return Promise.resolve(text(body));
        };
        const before = await receiver.execute({ scope: 's', key: 'before', fingerprint: FP }, work('before'));
        expect(before.saved).toBe(true);
        // The completion's script (the claim is a plain SET on Redis 7, the script on older servers).
        const scripts = [CLAIM_LUA, COMPLETE_LUA, allowingOom(COMPLETE_LUA)].map((source) => new LuaScript(source).sha);
        const loaded = async () => ((await own.script('EXISTS', ...scripts)) as number[]).includes(1);
        expect(await loaded()).toBe(true);

        server.kill('SIGKILL');
        await exited(server);
        await until(() => own.status !== 'ready', 'the client to notice');
        await expect(receiver.execute({ scope: 's', key: 'during', fingerprint: FP }, work('during'))).rejects.toBeInstanceOf(
          StoreUnavailableError,
        );
        expect(runs).toBe(1);

        server = await startRedis(port, dir);
        await until(() => own.status === 'ready', 'the client to reconnect');
        // A restarted Redis has an empty script cache: the next EVALSHA meets NOSCRIPT and the store reloads.
        expect(await loaded()).toBe(false);
        const replay = await receiver.execute({ scope: 's', key: 'before', fingerprint: FP }, work('again'));
        expect(replay.replayed).toBe(true);
        expect(decoder.decode(replay.response.body)).toBe('before');

        // Nothing was left claimed by the failed attempt: the key runs now, once.
        const during = await receiver.execute({ scope: 's', key: 'during', fingerprint: FP }, work('during'));
        expect(during).toMatchObject({ replayed: false, saved: true });
        expect(await loaded()).toBe(true);
        expect(runs).toBe(2);
        expect((await receiver.execute({ scope: 's', key: 'during', fingerprint: FP }, work('x'))).replayed).toBe(true);
        expect(runs).toBe(2);
      } finally {
        own.disconnect();
        server.kill('SIGKILL');
        await exited(server);
        rmSync(dir, { recursive: true, force: true });
      }
    });
  });
}
