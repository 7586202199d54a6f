import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import BetterSqlite3 from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createSqliteStore } from '../../src/stores/sqlite/index.js';
import { runCli } from '../support/run-cli.js';
import { startConsole, type RunningConsole } from './harness.js';

const FP = 'b'.repeat(64);

describe('console access rules (SQLite store, over HTTP)', () => {
  let dir: string;
  let path: string;
  let readOnly: RunningConsole;
  let guarded: RunningConsole;
  let leaseToken: string;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'retrysafe-console-'));
    path = join(dir, 'records.db');
    const store = createSqliteStore({ path });
    const won = await store.claim({ scope: 's', key: 'held', fingerprint: FP, leaseMs: 3_600_000, retentionMs: 7_200_000 });
    if (!won.acquired) throw new Error('expected to acquire');
    leaseToken = won.claim.leaseToken;
    for (let i = 0; i < 5; i++) await store.claim({ scope: 's', key: `page-${i}`, fingerprint: FP, leaseMs: 1_000, retentionMs: 7_200_000 });
    await store.close();
    [readOnly, guarded] = await Promise.all([
      startConsole(['--store', `sqlite:${path}`]),
      startConsole(['--store', `sqlite:${path}`, '--token', 'sesame', '--allow-actions']),
    ]);
  }, 60_000);

  afterAll(async () => {
    expect(await Promise.all([readOnly?.stop(), guarded?.stop()])).toEqual([0, 0]);
    rmSync(dir, { recursive: true, force: true });
  });

  const release = (base: string, headers: Record<string, string> = {}): Promise<Response> =>
    fetch(new URL('/api/key/release', base), {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: JSON.stringify({ scope: 's', key: 'held', leaseToken }),
    });

  it('answers actions with 403 problem+json when started without --allow-actions, and changes nothing', async () => {
    const response = await release(readOnly.url);
    expect(response.status).toBe(403);
    expect(response.headers.get('content-type')).toBe('application/problem+json');
    expect(((await response.json()) as { title: string }).title).toBe('Read-only console');
    const record = await fetch(new URL('/api/key?scope=s&key=held', readOnly.url));
    expect(((await record.json()) as { state: string }).state).toBe('in_progress');
  });

  it('pages keys in bounded pages with a cursor', async () => {
    const first = (await (await fetch(new URL('/api/keys?key=page-&limit=2', readOnly.url))).json()) as { records: { key: string }[]; next: { scope: string; key: string } };
    expect(first.records.map((r) => r.key)).toEqual(['page-0', 'page-1']);
    const query = new URLSearchParams({ key: 'page-', limit: '2', afterScope: first.next.scope, afterKey: first.next.key });
    const second = (await (await fetch(new URL(`/api/keys?${query.toString()}`, readOnly.url))).json()) as { records: { key: string }[] };
    expect(second.records.map((r) => r.key)).toEqual(['page-2', 'page-3']);
  });

  it('says on start where to open the UI with the token, without printing the token', () => {
    expect(readOnly.line).toMatch(/^retrysafe: console on http:\/\/127\.0\.0\.1:\d+\/ \(read-only\)\n$/);
    expect(guarded.line).toBe(`retrysafe: console on ${guarded.url} (actions allowed); open ${guarded.url}#token=<the --token value>\n`);
  });

  it('requires the bearer token on every API call when started with --token', async () => {
    expect((await fetch(new URL('/api/info', guarded.url))).status).toBe(401);
    expect((await release(guarded.url, { authorization: 'Bearer wrong' })).status).toBe(401);
    expect(((await (await fetch(new URL('/api/key?scope=s&key=held', guarded.url), { headers: { authorization: 'Bearer sesame' } })).json()) as { state: string }).state).toBe('in_progress');
    const released = await release(guarded.url, { authorization: 'Bearer sesame' });
    expect(released.status).toBe(200);
    expect((await fetch(new URL('/api/key?scope=s&key=held', guarded.url), { headers: { authorization: 'Bearer sesame' } })).status).toBe(404);
  });

  it('has no sessions view when the file holds no sessions table, and creates none', async () => {
    const info = (await (await fetch(new URL('/api/info', readOnly.url))).json()) as { sessions: unknown };
    expect(info.sessions).toBeNull();
    const sessions = await fetch(new URL('/api/sessions', readOnly.url));
    expect(sessions.status).toBe(501);
    expect(sessions.headers.get('content-type')).toBe('application/problem+json');
    const database = new BetterSqlite3(path, { readonly: true });
    try {
      expect(database.prepare("SELECT name FROM sqlite_master WHERE name LIKE '%session%'").all()).toEqual([]);
    } finally {
      database.close();
    }
  });

  it.each([
    [['--sessions-prefix', 'rs'], 'retrysafe: --sessions-prefix applies to a redis: store only\n'],
    [['--sessions-table', 'bad-name'], "retrysafe: option '--sessions-table <name>' argument 'bad-name' is invalid. --sessions-table takes letters, digits and underscores (at most 40). (see --help)\n"],
  ])('refuses a sessions flag %j that does not fit the store: one line, exit 2', async (flags, message) => {
    const result = await runCli(['console', '--store', `sqlite:${path}`, ...flags]);
    expect(result).toEqual({ code: 2, stdout: '', stderr: message });
  });

  it('refuses to listen beyond localhost without a token: one line, exit 2', async () => {
    const result = await runCli(['console', '--store', `sqlite:${path}`, '--host', '0.0.0.0']);
    expect(result.code).toBe(2);
    expect(result.stderr).toBe('retrysafe: --host 0.0.0.0 exposes the console beyond this machine; give --token too\n');
    expect(result.stdout).toBe('');
  });
});
