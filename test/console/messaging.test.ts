/**
 * The console's inbox view (SQLite and PostgreSQL) and outbox view (PostgreSQL) in Chromium: a redriven
 * dead letter reads "redrive pending" until the consumer takes it, every redrive reports its outcome (also
 * one refused because the row changed after the page showed it), the outbox shows why its oldest rows are
 * stuck, and an error cut to its column is readable in full on a click.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createInbox, type Inbox } from '../../src/messaging/inbox/inbox.js';
import { createPostgresInboxStore } from '../../src/messaging/inbox/postgres.js';
import { createSqliteInboxStore } from '../../src/messaging/inbox/sqlite.js';
import { createOutbox } from '../../src/messaging/outbox/outbox.js';
import { createRelay } from '../../src/messaging/outbox/relay.js';
import { createWebhookPublisher } from '../../src/messaging/transports/webhook.js';
import { migrate } from '../../src/postgres.js';
import { createSqliteStore } from '../../src/stores/sqlite/index.js';
import { POSTGRES_URL, postgresAvailable, uniqueName } from '../support/services.js';
import { chromiumAvailable, freezeUntilAction, IMAGES, launchChromium, startConsole, type RunningConsole } from './harness.js';

const pgUp = await postgresAvailable();
const LONG_ERROR = `ledger locked by batch 77: ${'the nightly reconciliation holds the ledger table; '.repeat(6)}retry after it ends`;

/** An inbox over a real database, the console's `--store` for it, and its teardown. */
interface Setup {
  readonly inbox: Inbox<unknown>;
  readonly url: string;
  close(): Promise<void>;
}

const setups: [name: string, up: boolean, open: () => Promise<Setup>][] = [
  [
    'SQLite',
    true,
    () => {
      const dir = mkdtempSync(join(tmpdir(), 'retrysafe-console-inbox-'));
      const path = join(dir, 'app.db');
      // The idempotency store's file, with the inbox tables beside it.
      const records = createSqliteStore({ path });
      const store = createSqliteInboxStore({ path });
      return Promise.resolve({
        inbox: createInbox({ store, maxAttempts: 1 }),
        url: `sqlite:${path}`,
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
      const schema = uniqueName('console_inbox');
      await migrate({ connectionString: POSTGRES_URL, schema });
      const pool = new pg.Pool({ connectionString: POSTGRES_URL, max: 2 });
      return {
        inbox: createInbox({ store: createPostgresInboxStore({ pool, schema }), maxAttempts: 1 }),
        url: `${POSTGRES_URL}?schema=${schema}`,
        close: async () => {
          await pool.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
          await pool.end();
        },
      };
    },
  ],
];

let browser: Browser;

beforeAll(async () => {
  if (chromiumAvailable) browser = await launchChromium();
}, 60_000);

afterAll(async () => {
  await browser?.close();
});

/** Dead-letters `messageId` of consumer `billing` with {@link LONG_ERROR}. */
async function deadLetter(inbox: Inbox<unknown>, messageId: string): Promise<void> {
  const outcome = await inbox.handle({ consumer: 'billing', messageId, body: new TextEncoder().encode('{"amount":40}') }, () => Promise.reject(new Error(LONG_ERROR)));
  expect(outcome.status).toBe('dead_lettered');
}

/** Whether the element shows its whole text (nothing cut off at its right edge). */
function shownInFull(page: Page, selector: string): Promise<boolean> {
  return page.locator(selector).evaluate((element: { scrollWidth: number; clientWidth: number }) => element.scrollWidth <= element.clientWidth);
}

describe.each(setups)('console inbox view on %s (browser)', (name, up, open) => {
  let setup: Setup;
  let running: RunningConsole;

  beforeAll(async () => {
    if (!up || !chromiumAvailable) return;
    setup = await open();
    running = await startConsole(['--store', setup.url, '--allow-actions']);
  }, 60_000);

  afterAll(async () => {
    if (running !== undefined) expect(await running.stop()).toBe(0);
    await setup?.close();
  });

  async function inboxPage(messageId: string): Promise<Page> {
    const page = await browser.newPage({ viewport: { width: 1280, height: 400 } });
    await page.goto(running.url);
    await page.getByRole('button', { name: 'Inbox dead letters' }).click();
    await page.locator('#inbox tbody tr', { hasText: messageId }).getByText('dead-lettered').waitFor();
    return page;
  }

  it.runIf(up && chromiumAvailable)('redrives a dead letter: it reads "redrive pending" until the consumer applies it once', async () => {
    const { inbox } = setup;
    await deadLetter(inbox, 'invoice-17');
    const page = await inboxPage('invoice-17');
    const row = page.locator('#inbox tbody tr', { hasText: 'invoice-17' });
    // The error is cut to its column, and shown in full on a click.
    const cell = '#inbox tbody tr:has-text("invoice-17") td.error-text';
    expect(await shownInFull(page, cell)).toBe(false);
    await page.locator(cell).click();
    expect(await shownInFull(page, cell)).toBe(true);
    if (name === 'PostgreSQL') await page.screenshot({ path: join(IMAGES, 'console-inbox.png') });

    await row.getByRole('button', { name: 'Redrive' }).click();
    await page.getByText('Redrive of invoice-17 requested').waitFor();
    await row.getByText('redrive pending').waitFor();
    expect(await row.getByRole('button', { name: 'Redrive' }).count()).toBe(0);

    // The running consumer's part: broker adapters poll pending redrives and run them through the inbox.
    const pending = await inbox.pendingRedrives('billing');
    expect(pending.map((letter) => letter.messageId)).toEqual(['invoice-17']);
    let applied = 0;
    for (const letter of pending) {
      const outcome = await inbox.handle({ consumer: 'billing', messageId: letter.messageId, body: letter.body }, () => Promise.resolve(void (applied += 1)));
      expect(outcome.status).toBe('processed');
    }
    expect(applied).toBe(1);
    await page.getByText('No dead letters.').waitFor();
    await page.close();
  }, 60_000);

  it.runIf(up && chromiumAvailable)('a redrive refused because it was redriven meanwhile says why and shows the row as it is now', async () => {
    const { inbox } = setup;
    await deadLetter(inbox, 'invoice-18');
    const page = await inboxPage('invoice-18');
    await freezeUntilAction(page, '/api/inbox/dead-letters', '/api/inbox/redrive');
    expect(await inbox.redrive('billing', 'invoice-18')).toBe(true);
    const row = page.locator('#inbox tbody tr', { hasText: 'invoice-18' });
    await row.getByRole('button', { name: 'Redrive' }).click();
    await page.getByText('Redrive of invoice-18 refused: the message is not dead-lettered (any more)').waitFor();
    await row.getByText('redrive pending').waitFor();
    await page.close();
  }, 60_000);

  it.runIf(up && chromiumAvailable)('redrives every dead letter shown after a confirmation naming their count, and reports how many', async () => {
    const { inbox } = setup;
    for (const id of ['bulk-1', 'bulk-2', 'bulk-3']) await deadLetter(inbox, id);
    const page = await inboxPage('bulk-3');
    let asked = '';
    page.once('dialog', (dialog) => {
      asked = dialog.message();
      void dialog.accept();
    });
    await page.locator('#redrive-all', { hasText: 'Redrive the 3 dead letters shown' }).click();
    await page.getByText('Redrive requested for 3 of 3 dead letters.').waitFor();
    expect(asked).toMatch(/^Redrive 3 dead letters\?/);
    for (const id of ['bulk-1', 'bulk-2', 'bulk-3']) await page.locator('#inbox tbody tr', { hasText: id }).getByText('redrive pending').waitFor();
    expect(await page.locator('#redrive-all').count()).toBe(0);
    const pending = (await inbox.pendingRedrives('billing')).map((letter) => letter.messageId);
    expect(pending).toEqual(expect.arrayContaining(['bulk-1', 'bulk-2', 'bulk-3']));
    await page.close();
  }, 60_000);
});

describe.runIf(pgUp && chromiumAvailable)('console outbox view on PostgreSQL (browser)', () => {
  const schema = uniqueName('console_outbox');
  let pool: pg.Pool;
  let running: RunningConsole;

  beforeAll(async () => {
    await migrate({ connectionString: POSTGRES_URL, schema });
    pool = new pg.Pool({ connectionString: POSTGRES_URL, max: 4 });
    running = await startConsole(['--store', `${POSTGRES_URL}?schema=${schema}`, '--allow-actions']);
  }, 60_000);

  afterAll(async () => {
    if (running !== undefined) expect(await running.stop()).toBe(0);
    await pool?.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    await pool?.end();
  });

  it('shows the backlog and its oldest unsent age, and watches a relay drain it', async () => {
    const outbox = createOutbox({ schema });
    const received = new Set<string>();
    const hook: Server = createServer((request, response) => {
      received.add(String(request.headers['webhook-id']));
      request.resume();
      request.on('end', () => response.writeHead(204).end());
    });
    await new Promise<void>((resolve) => hook.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(hook.address() as AddressInfo).port}/orders`;
    for (let i = 0; i < 40; i++) await outbox.enqueue(pool, { topic: 'orders', key: `order-${i % 4}`, payload: JSON.stringify({ n: i }) });

    const page = await browser.newPage({ viewport: { width: 1280, height: 300 } });
    await page.goto(running.url);
    await page.getByRole('button', { name: 'Outbox' }).click();
    await page.locator('#backlog', { hasText: /^40$/ }).waitFor();
    expect(await page.locator('#outbox-figures .figure', { hasText: 'oldest unsent' }).locator('b').innerText()).toMatch(/^\d+\.\d s$/);
    await page.screenshot({ path: join(IMAGES, 'console-outbox.png') });

    const publisher = createWebhookPublisher({ url, secret: 'a-webhook-secret-of-32-bytes!!!!' });
    const relay = createRelay({ pool, outbox, publisher, batchSize: 5 });
    relay.start();
    try {
      await page.locator('#backlog', { hasText: /^0$/ }).waitFor({ timeout: 30_000 });
    } finally {
      await relay.stop();
      await publisher.close();
      await new Promise<void>((resolve) => hook.close(() => resolve()));
    }
    expect(received.size).toBe(40);
    await page.close();
  }, 60_000);

  it('shows why the oldest rows are stuck, reads a failed row\'s error in full, and reports each redrive', async () => {
    const outbox = createOutbox({ schema });
    // A broker that refuses every message: each row fails with the same long error.
    const refusing = { publish: () => Promise.reject(new Error(LONG_ERROR)), close: () => Promise.resolve() };
    const dead = await outbox.enqueue(pool, { topic: 'payments', key: 'p-1', payload: '{}' });
    const alsoDead = await outbox.enqueue(pool, { topic: 'payments', key: 'p-2', payload: '{}' });
    expect(await createRelay({ pool, outbox, publisher: refusing, listen: false, maxAttempts: 1 }).runOnce()).toBe(2);
    await outbox.enqueue(pool, { topic: 'payments', key: 'p-3', payload: '{}' });
    // Retried later (an hour's backoff): pending, with its last error.
    expect(await createRelay({ pool, outbox, publisher: refusing, listen: false, maxAttempts: 5, backoffBaseMs: 3_600_000 }).runOnce()).toBe(1);

    const page = await browser.newPage({ viewport: { width: 1280, height: 480 } });
    await page.goto(running.url);
    await page.getByRole('button', { name: 'Outbox' }).click();
    expect(await page.locator('#stuck-why').innerText()).toContain(LONG_ERROR);
    const cell = `#outbox tbody tr:has-text("${dead}") td.error-text`;
    expect(await shownInFull(page, cell)).toBe(false);
    await page.locator(cell).click();
    expect(await shownInFull(page, cell)).toBe(true);

    await page.locator('#outbox tbody tr', { hasText: dead }).getByRole('button', { name: 'Redrive' }).click();
    await page.getByText(`Redrive of ${dead} done: the row is pending again`).waitFor();
    expect(await page.locator('#outbox tbody tr', { hasText: dead }).count()).toBe(0);

    await freezeUntilAction(page, '/api/outbox', '/api/outbox/redrive');
    expect(await outbox.redrive(pool, alsoDead)).toBe(true);
    await page.locator('#outbox tbody tr', { hasText: alsoDead }).getByRole('button', { name: 'Redrive' }).click();
    await page.getByText(`Redrive of ${alsoDead} refused: the row is not dead-lettered (any more)`).waitFor();
    await page.getByText('No failed rows.').waitFor();
    await page.close();
  }, 60_000);
});
