/**
 * The console's DNS-rebinding and cross-site defences, over real HTTP: the Host header must name the
 * console (421 otherwise) and an action's Origin must be the console's own (403 otherwise).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createSqliteStore } from '../../src/stores/sqlite/index.js';
import { runCli } from '../support/run-cli.js';
import { startConsole, type RunningConsole } from './harness.js';

const FP = 'd'.repeat(64);

interface Raw {
  readonly status: number;
  readonly type: string | undefined;
  readonly body: { title?: string; status?: number; state?: string; released?: boolean };
}

/**
 * One request to `address:port` with exactly the headers given (Node's `fetch` will not send a Host of our
 * choosing, which is the point here).
 */
function raw(address: string, port: number, path: string, headers: Record<string, string>, body?: unknown): Promise<Raw> {
  return new Promise((resolve, reject) => {
    const text = body === undefined ? undefined : JSON.stringify(body);
    const req = request(
      { host: address, port, path, method: text === undefined ? 'GET' : 'POST', setHost: false, headers: { ...headers, ...(text !== undefined && { 'content-type': 'application/json' }) } },
      (response) => {
        const chunks: Buffer[] = [];
        response.on('data', (chunk: Buffer) => chunks.push(chunk));
        response.on('end', () => {
          const json = Buffer.concat(chunks).toString('utf8');
          resolve({ status: response.statusCode ?? 0, type: response.headers['content-type'], body: json.startsWith('{') ? (JSON.parse(json) as Raw['body']) : {} });
        });
      },
    );
    req.on('error', reject);
    req.end(text);
  });
}

describe('console Host and Origin checks (SQLite store, over HTTP)', () => {
  let dir: string;
  let path: string;
  let local: RunningConsole;
  let wide: RunningConsole;
  let port: number;
  let widePort: number;
  const tokens = new Map<string, string>();

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'retrysafe-console-host-'));
    path = join(dir, 'records.db');
    const store = createSqliteStore({ path });
    for (const key of ['a', 'b']) {
      const won = await store.claim({ scope: 's', key, fingerprint: FP, leaseMs: 3_600_000, retentionMs: 7_200_000 });
      if (!won.acquired) throw new Error('expected to acquire');
      tokens.set(key, won.claim.leaseToken);
    }
    await store.close();
    [local, wide] = await Promise.all([
      startConsole(['--store', `sqlite:${path}`, '--allow-actions', '--allowed-host', 'console.example', '--allowed-host', 'FD00::7']),
      startConsole(['--store', `sqlite:${path}`, '--host', '0.0.0.0', '--token', 'sesame']),
    ]);
    port = Number(new URL(local.url).port);
    widePort = Number(new URL(wide.url).port);
  }, 60_000);

  afterAll(async () => {
    expect(await Promise.all([local?.stop(), wide?.stop()])).toEqual([0, 0]);
    rmSync(dir, { recursive: true, force: true });
  });

  it('answers the loopback names and the --allowed-host names, whatever the port and case', async () => {
    for (const host of [`127.0.0.1:${port}`, `localhost:${port}`, `LOCALHOST.:${port}`, `[::1]:${port}`, `[0:0::1]:${port}`, 'console.example', `Console.Example:${port}`, `[fd00::7]:${port}`]) {
      const answer = await raw('127.0.0.1', port, '/api/info', { host });
      expect({ host, status: answer.status }).toEqual({ host, status: 200 });
    }
  });

  it('refuses any other Host with 421 problem+json, on the API and on the page alike (DNS rebinding)', async () => {
    for (const [host, where] of [
      [`evil.example:${port}`, '/api/info'],
      [`evil.example:${port}`, '/'],
      [`localhost.evil.example:${port}`, '/api/keys'],
      [`127.0.0.1.evil.example:${port}`, '/api/key?scope=s&key=a'],
      [`10.1.2.3:${port}`, '/api/info'],
      ['', '/api/info'],
      ['user@localhost', '/api/info'],
    ] as const) {
      const answer = await raw('127.0.0.1', port, where, { host });
      expect({ host, where, status: answer.status, type: answer.type }).toEqual({ host, where, status: 421, type: 'application/problem+json' });
      expect(answer.body).toMatchObject({ title: 'Misdirected request', status: 421 });
    }
  });

  it('refuses a rebinding Host before it acts: the record stays in progress', async () => {
    const answer = await raw('127.0.0.1', port, '/api/key/release', { host: `evil.example:${port}` }, { scope: 's', key: 'a', leaseToken: tokens.get('a') });
    expect(answer.status).toBe(421);
    expect((await raw('127.0.0.1', port, '/api/key?scope=s&key=a', { host: `127.0.0.1:${port}` })).body.state).toBe('in_progress');
  });

  it('refuses an action from another origin with 403 problem+json, and changes nothing', async () => {
    for (const origin of ['http://evil.example', `http://localhost:${port + 1}`, `http://127.0.0.1:${port + 1}`, 'null', `ftp://127.0.0.1:${port}`]) {
      const answer = await raw('127.0.0.1', port, '/api/key/release', { host: `127.0.0.1:${port}`, origin }, { scope: 's', key: 'a', leaseToken: tokens.get('a') });
      expect({ origin, status: answer.status, type: answer.type }).toEqual({ origin, status: 403, type: 'application/problem+json' });
      expect(answer.body.title).toBe('Cross-origin request refused');
    }
    expect((await raw('127.0.0.1', port, '/api/key?scope=s&key=a', { host: `127.0.0.1:${port}` })).body.state).toBe('in_progress');
  });

  it('lets an action from the console’s own origin, or from a script without Origin, through', async () => {
    const own = await raw('127.0.0.1', port, '/api/key/release', { host: `127.0.0.1:${port}`, origin: `http://127.0.0.1:${port}` }, { scope: 's', key: 'a', leaseToken: tokens.get('a') });
    expect(own).toMatchObject({ status: 200, body: { released: true } });
    const script = await raw('127.0.0.1', port, '/api/key/release', { host: `localhost:${port}` }, { scope: 's', key: 'b', leaseToken: tokens.get('b') });
    expect(script).toMatchObject({ status: 200, body: { released: true } });
  });

  it('bound to 0.0.0.0, answers the address a connection arrived on, and no other', async () => {
    const auth = { authorization: 'Bearer sesame' };
    // Linux routes all of 127.0.0.0/8 to the loopback interface: 127.0.0.2 is an address of this machine.
    expect((await raw('127.0.0.2', widePort, '/api/info', { ...auth, host: `127.0.0.2:${widePort}` })).status).toBe(200);
    expect((await raw('127.0.0.2', widePort, '/api/info', { ...auth, host: `127.0.0.3:${widePort}` })).status).toBe(421);
    expect((await raw('127.0.0.2', widePort, '/api/info', { ...auth, host: `0.0.0.0:${widePort}` })).status).toBe(200);
    expect((await raw('127.0.0.2', widePort, '/api/info', { ...auth, host: `console.example:${widePort}` })).status).toBe(421);
  });

  it('refuses an --allowed-host that carries a port or is no host name: one line, exit 2', async () => {
    for (const name of ['console.example:8080', '[::1]:8080', 'a b', 'http://x']) {
      const result = await runCli(['console', '--store', `sqlite:${path}`, '--allowed-host', name]);
      expect({ name, code: result.code, stdout: result.stdout }).toEqual({ name, code: 2, stdout: '' });
      expect(result.stderr).toContain('--allowed-host takes a host name or an IP address, without a port.');
      expect(result.stderr.trimEnd().split('\n')).toHaveLength(1);
    }
  });
});
