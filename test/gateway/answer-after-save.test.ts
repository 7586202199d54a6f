/**
 * The gateway sends a response within `maxResponse` only once its record is saved: while another
 * connection holds the SQLite file's write lock (so the completion waits), the client has no answer even
 * though the upstream answered long ago; once the lock is let go, the client gets the response and the
 * record is completed. A gateway killed in that gap leaves a client without an answer (its retry is
 * answered from the record or the reconcile hook), never a client with an answer beside a record left in
 * progress. A response over `maxResponse` is still streamed before its record is saved.
 */
import { createHash } from 'node:crypto';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { IdempotencyStore } from '../../src/core/store.js';
import { parseStoreUrl } from '../../src/store-url.js';
import { freePort } from '../support/services.js';
import { executed, gatewayProcess, pythonAvailable, route, send, startPython, workDir, writeConfig, type Answer, type GatewayProcess, type UpstreamProcess } from './support.js';

const available = await pythonAvailable();
/** How long the upstream sleeps after it committed, before it answers (ms). */
const UPSTREAM_SLEEP_MS = 300;
const SCOPE_HEADERS = { 'x-api-key': 'tenant-a' };

describe.runIf(available)('gateway: the answer leaves after the record is saved', () => {
  let work: Awaited<ReturnType<typeof workDir>>;
  let python: UpstreamProcess;
  let gateway: GatewayProcess;
  let store: IdempotencyStore;
  let databasePath: string;

  beforeAll(async () => {
    work = await workDir();
    python = await startPython(work.dir);
    databasePath = join(work.dir, 'gateway.db');
    const port = await freePort();
    const path = await writeConfig(work.dir, {
      listen: `127.0.0.1:${port}`,
      store: `sqlite:${databasePath}`,
      scope: { apiKey: { header: 'x-api-key' } },
      upstreams: { py: { url: python.url } },
      // A lease long enough that no renewal falls inside the held write lock.
      defaults: { timeout: '5s', lease: '20s', ttl: '1h' },
      routes: [route('py', '/payments'), route('py', '/large', { name: 'large', maxResponse: 10 })],
    });
    // In a process of its own: better-sqlite3 waits for the lock synchronously, stopping its event loop.
    gateway = await gatewayProcess(path, port);
    store = (await parseStoreUrl(`sqlite:${databasePath}`).open('existing')).store;
  });

  afterAll(async () => {
    await store?.close();
    await gateway?.stop();
    await python?.stop();
    await work?.remove();
  });

  /** Sends a request whose upstream commits, then sleeps; resolves once the upstream committed. */
  async function sendAndWaitForCommit(path: string, key: string): Promise<{ answer: Promise<Answer>; answered: () => boolean }> {
    let done = false;
    const answer = send(`${gateway.url}${path}`, { key, body: '{"amount":100}', headers: { ...SCOPE_HEADERS, 'x-fault': `sleep=${UPSTREAM_SLEEP_MS}` } });
    void answer.then(
      () => (done = true),
      () => (done = true),
    );
    await executed(python, key);
    return { answer, answered: () => done };
  }

  it('holds the response while its completion waits for the store, then sends it and replays it', async () => {
    const { answer, answered } = await sendAndWaitForCommit('/payments', 'after-save-1');
    const lock = new Database(databasePath);
    lock.exec('BEGIN IMMEDIATE');
    try {
      // The upstream answers UPSTREAM_SLEEP_MS after its commit; give the gateway time well past that.
      await new Promise((resolve) => setTimeout(resolve, UPSTREAM_SLEEP_MS + 700));
      expect(answered()).toBe(false);
    } finally {
      lock.exec('COMMIT');
      lock.close();
    }
    const first = await answer;
    expect(first.status).toBe(201);
    expect(first.headers['idempotent-replayed']).toBeUndefined();
    expect((await store.get(`api-key:${createHash('sha256').update('tenant-a').digest('hex')}`, 'after-save-1'))?.state).toBe('completed');
    const again = await send(`${gateway.url}/payments`, { key: 'after-save-1', body: '{"amount":100}', headers: SCOPE_HEADERS });
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(again.body.equals(first.body)).toBe(true);
    expect(await python.executions('after-save-1')).toBe(1);
  });

  it('streams a response over maxResponse before its record is saved', async () => {
    const { answer } = await sendAndWaitForCommit('/large', 'after-save-2');
    const lock = new Database(databasePath);
    lock.exec('BEGIN IMMEDIATE');
    let first: Answer;
    try {
        first = await answer;
    } finally {
      lock.exec('COMMIT');
      lock.close();
    }
    expect(first.status).toBe(201);
    expect(await python.executions('after-save-2')).toBe(1);
  });
});

