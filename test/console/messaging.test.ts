import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import pg from 'pg';
import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createInbox } from '../../src/messaging/inbox/inbox.js';
import { createPostgresInboxStore } from '../../src/messaging/inbox/postgres.js';
import { createOutbox } from '../../src/messaging/outbox/outbox.js';
import { createRelay } from '../../src/messaging/outbox/relay.js';
import { createWebhookPublisher } from '../../src/messaging/transports/webhook.js';
import { migrate } from '../../src/postgres.js';
import { POSTGRES_URL, postgresAvailable, uniqueName } from '../support/services.js';
import { chromiumAvailable, IMAGES, launchChromium, startConsole, type RunningConsole } from './harness.js';

const available = (await postgresAvailable()) && chromiumAvailable;

describe.runIf(available)('console inbox and outbox views on PostgreSQL (browser)', () => {
  const schema = uniqueName('console_msg');
  let pool: pg.Pool;
  let running: RunningConsole;
  let browser: Browser;

  beforeAll(async () => {
    await migrate({ connectionString: POSTGRES_URL, schema });
    pool = new pg.Pool({ connectionString: POSTGRES_URL, max: 4 });
    await pool.query(`CREATE TABLE ${schema}.ledger (message_id text PRIMARY KEY)`);
    running = await startConsole(['--store', `${POSTGRES_URL}?schema=${schema}`, '--allow-actions']);
    browser = await launchChromium();
  }, 60_000);

  afterAll(async () => {
    await browser?.close();
    expect(await running?.stop()).toBe(0);
    await pool?.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    await pool?.end();
  });

  it('redrives an inbox dead letter, and the consumer then applies it once', async () => {
    const inbox = createInbox({ store: createPostgresInboxStore({ pool, schema }), maxAttempts: 1 });
    const apply = (tx: pg.PoolClient, id: string): Promise<unknown> => tx.query(`INSERT INTO ${schema}.ledger VALUES ($1)`, [id]);
    const failed = await inbox.handle({ consumer: 'billing', messageId: 'invoice-17', body: new TextEncoder().encode('{"amount":40}') }, () => {
      throw new Error('ledger locked');
    });
    expect(failed.status).toBe('dead_lettered');

    const page = await browser.newPage({ viewport: { width: 1280, height: 400 } });
    await page.goto(running.url);
    await page.getByRole('button', { name: 'Inbox dead letters' }).click();
    const row = page.locator('#inbox tbody tr', { hasText: 'invoice-17' });
    await row.getByText('ledger locked').waitFor();
    await page.screenshot({ path: join(IMAGES, 'console-inbox.png') });
    await row.getByRole('button', { name: 'Redrive' }).click();
    await page.getByText('Redrive of invoice-17 requested').waitFor();

    // The running consumer's part: broker adapters poll pending redrives and run them through the inbox.
    const pending = await inbox.pendingRedrives('billing');
    expect(pending.map((letter) => letter.messageId)).toEqual(['invoice-17']);
    for (const letter of pending) {
      const outcome = await inbox.handle({ consumer: 'billing', messageId: letter.messageId, body: letter.body }, (tx) => apply(tx, letter.messageId).then(() => undefined));
      expect(outcome.status).toBe('processed');
    }
    await page.getByText('No dead letters.').waitFor();
    expect((await pool.query(`SELECT message_id FROM ${schema}.ledger`)).rows).toEqual([{ message_id: 'invoice-17' }]);
    await page.close();
  }, 60_000);

  it('shows the outbox backlog and its oldest unsent age, and watches a relay drain it', async () => {
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
});
