/**
 * The console's client sessions view in Chromium, on SQLite, PostgreSQL and Redis: sessions opened and
 * used by a real `SessionClient` through a session receiver appear with their low-water mark, highest
 * request number and saved responses.
 */
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import pg from 'pg';
import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createPostgresSessionStore,
  createRedisSessionStore,
  createSessionReceiver,
  createSqliteSessionStore,
  SessionClient,
  type SessionStore,
} from '../../src/sessions/index.js';
import { migrate } from '../../src/postgres.js';
import { createSqliteStore } from '../../src/stores/sqlite/index.js';
import { deleteUnder } from '../support/redis.js';
import { POSTGRES_URL, postgresAvailable, REDIS_URL, redisAvailable, uniqueName } from '../support/services.js';
import { chromiumAvailable, IMAGES, launchChromium, startConsole, type RunningConsole } from './harness.js';

const [pgUp, redisUp] = await Promise.all([postgresAvailable(), redisAvailable()]);

/** A session store on a real server, the `retrysafe console` arguments that reach it, and its teardown. */
interface Setup {
  readonly store: SessionStore;
  readonly args: readonly string[];
  close(): Promise<void>;
}

const setups: [name: string, up: boolean, open: () => Promise<Setup>][] = [
  [
    'SQLite',
    true,
    () => {
      const dir = mkdtempSync(join(tmpdir(), 'retrysafe-console-sessions-'));
      const path = join(dir, 'records.db');
      // The idempotency store's file, with the sessions beside it on a connection of their own.
      const records = createSqliteStore({ path });
      const store = createSqliteSessionStore({ path });
      return Promise.resolve({
        store,
        args: ['--store', `sqlite:${path}`],
        close: async () => {
          await Promise.all([store.close(), records.close()]);
          rmSync(dir, { recursive: true, force: true });
        },
      });
    },
  ],
  [
    'PostgreSQL',
    pgUp,
    async () => {
      const schema = uniqueName('console_sessions');
      await migrate({ connectionString: POSTGRES_URL, schema });
      const pool = new pg.Pool({ connectionString: POSTGRES_URL, max: 2 });
      return {
        store: createPostgresSessionStore({ pool, schema }),
        args: ['--store', `${POSTGRES_URL}?schema=${schema}`],
        close: async () => {
          await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
          await pool.end();
        },
      };
    },
  ],
  [
    'Redis',
    redisUp,
    async () => {
      const prefix = uniqueName('console_sessions');
      const client = new Redis(REDIS_URL, { lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 1 });
      await client.connect();
      return {
        store: createRedisSessionStore({ client, prefix: `${prefix}-s` }),
        args: ['--store', `${REDIS_URL}?prefix=${prefix}-r`, '--sessions-prefix', `${prefix}-s`],
        close: async () => {
          await deleteUnder(client, prefix);
          await client.quit();
        },
      };
    },
  ],
];

describe.runIf(chromiumAvailable).each(setups)('console client sessions view on %s (browser)', (name, up, open) => {
  let setup: Setup;
  let running: RunningConsole;
  let browser: Browser;
  const clients: SessionClient[] = [];

  beforeAll(async () => {
    if (!up) return;
    setup = await open();
    running = await startConsole(setup.args);
    browser = await launchChromium();
    mkdirSync(IMAGES, { recursive: true });
  }, 60_000);

  afterAll(async () => {
    for (const client of clients) client.close();
    await browser?.close();
    expect(await running?.stop()).toBe(0);
    await setup?.close();
  });

  it.runIf(up)('shows a session a SessionClient opened, with its low-water mark, highest request and saved responses', async () => {
    const receiver = createSessionReceiver({ store: setup.store });
    // Three clients: 3 requests one after another, 1 request, and none.
    for (const requests of [3, 1, 0]) {
      const client = await SessionClient.open({ register: () => receiver.register() });
      clients.push(client);
      for (let n = 1; n <= requests; n++) await client.request((request) => receiver.apply(request, () => Promise.resolve({ n })));
    }
    const [busy, once, idle] = clients as [SessionClient, SessionClient, SessionClient];
    // Each request carried the low-water mark of the ones before it: request 3 carried 2, so only its
    // response is still saved.
    expect(busy.lowWaterMark).toBe(3);

    const page = await browser.newPage({ viewport: { width: 1280, height: 360 } });
    await page.goto(running.url);
    await page.getByRole('button', { name: 'Client sessions' }).click();
    const cells = async (client: SessionClient): Promise<string[]> => {
      const row = page.locator('#sessions tbody tr', { hasText: client.clientId });
      await row.waitFor();
      return row.locator('td').allInnerTexts();
    };
    // client id, state, low-water mark, highest request, saved responses, in progress (then the lease).
    expect((await cells(busy)).slice(0, 6)).toEqual([busy.clientId, 'live', '2', '3', '1', '0']);
    expect((await cells(once)).slice(0, 6)).toEqual([once.clientId, 'live', '0', '1', '1', '0']);
    expect((await cells(idle)).slice(0, 6)).toEqual([idle.clientId, 'live', '0', '—', '0', '0']);
    expect(await page.locator('#sessions tbody tr').count()).toBe(3);
    if (name === 'PostgreSQL') await page.screenshot({ path: join(IMAGES, 'console-sessions.png') });

    // Search by client id prefix.
    await page.fill('input[name=client]', busy.clientId.slice(0, 13));
    await page.locator('#sessions tbody tr').filter({ hasNotText: busy.clientId }).first().waitFor({ state: 'detached' });
    expect(await page.locator('#sessions tbody tr').allInnerTexts()).toHaveLength(1);
    await page.close();

    // The API pages in client-id order with a cursor.
    const ids = [busy, once, idle].map((client) => client.clientId).sort();
    const first = (await (await fetch(new URL('/api/sessions?limit=2', running.url))).json()) as { sessions: { clientId: string }[]; next: string };
    expect(first.sessions.map((s) => s.clientId)).toEqual(ids.slice(0, 2));
    expect(first.next).toBe(ids[1]);
    const second = (await (await fetch(new URL(`/api/sessions?limit=2&after=${first.next}`, running.url))).json()) as { sessions: { clientId: string }[]; next?: string };
    expect(second).toEqual({ sessions: [expect.objectContaining({ clientId: ids[2], state: 'live', leaseEnded: false })] });
  }, 60_000);
});
