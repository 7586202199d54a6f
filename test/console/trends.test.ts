/**
 * The console's trends view in Chromium on PostgreSQL: under a scripted load (outbox rows enqueued, then
 * drained by a relay; inbox messages dead-lettered) the figures drawn are the counts sent, sampled by the
 * console process from the store's own queries.
 */
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
import { runCli } from '../support/run-cli.js';
import { POSTGRES_URL, postgresAvailable, uniqueName } from '../support/services.js';
import { chromiumAvailable, IMAGES, launchChromium, startConsole, type RunningConsole } from './harness.js';

const available = (await postgresAvailable()) && chromiumAvailable;

describe.runIf(available)('console trends on PostgreSQL (browser)', () => {
  const schema = uniqueName('console_trends');
  let pool: pg.Pool;
  let running: RunningConsole;
  let browser: Browser;

  beforeAll(async () => {
    await migrate({ connectionString: POSTGRES_URL, schema });
    pool = new pg.Pool({ connectionString: POSTGRES_URL, max: 4 });
    [running, browser] = await Promise.all([startConsole(['--store', `${POSTGRES_URL}?schema=${schema}`, '--sample-every', '200ms']), launchChromium()]);
  }, 60_000);

  afterAll(async () => {
    await browser?.close();
    if (running !== undefined) expect(await running.stop()).toBe(0);
    await pool?.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    await pool?.end();
  });

  it('draws the outbox backlog and the inbox dead letters as they were sent, and the backlog falling to 0 as a relay drains it', async () => {
    const outbox = createOutbox({ schema });
    for (let i = 0; i < 30; i++) await outbox.enqueue(pool, { topic: 'orders', key: `order-${i % 3}`, payload: JSON.stringify({ n: i }) });
    const inbox = createInbox({ store: createPostgresInboxStore({ pool, schema }), maxAttempts: 1 });
    for (let i = 0; i < 3; i++) await inbox.handle({ consumer: 'billing', messageId: `m-${i}` }, () => Promise.reject(new Error('ledger locked')));

    const page = await browser.newPage({ viewport: { width: 1280, height: 520 } });
    await page.goto(running.url);
    await page.getByRole('button', { name: 'Trends' }).click();
    await page.locator('#now-outboxPending', { hasText: /^30$/ }).waitFor();
    await page.locator('#now-inboxDeadLetters', { hasText: /^3$/ }).waitFor();
    expect(await page.locator('#now-storeMs').innerText()).toMatch(/^\d+(\.\d+)?$/);
    // One drawn chart per figure.
    await expect.poll(() => page.locator('.chart canvas').count(), { timeout: 10_000 }).toBe(4);

    const received = new Set<string>();
    const hook: Server = createServer((request, response) => {
      received.add(String(request.headers['webhook-id']));
      request.resume();
      request.on('end', () => response.writeHead(204).end());
    });
    await new Promise<void>((resolve) => hook.listen(0, '127.0.0.1', resolve));
    const publisher = createWebhookPublisher({ url: `http://127.0.0.1:${(hook.address() as AddressInfo).port}/orders`, secret: 'a-webhook-secret-of-32-bytes!!!!' });
    const relay = createRelay({ pool, outbox, publisher, batchSize: 5 });
    relay.start();
    try {
      await page.locator('#now-outboxPending', { hasText: /^0$/ }).waitFor({ timeout: 30_000 });
    } finally {
      await relay.stop();
      await publisher.close();
      await new Promise<void>((resolve) => hook.close(() => resolve()));
    }
    expect(received.size).toBe(30);
    // The window holds the whole movement: samples with the full backlog, then the drained one.
    const trends = (await (await fetch(new URL('/api/trends', running.url))).json()) as { samples: { outboxPending: number | null; inboxDeadLetters: number | null }[] };
    const backlog = trends.samples.map((s) => s.outboxPending);
    expect(backlog).toContain(30);
    expect(backlog[backlog.length - 1]).toBe(0);
    expect(backlog.every((n) => n === null || (n >= 0 && n <= 30))).toBe(true);
    expect(trends.samples[trends.samples.length - 1]?.inboxDeadLetters).toBe(3);
    await page.screenshot({ path: join(IMAGES, 'console-trends.png') });
    await page.close();
  }, 60_000);

  it('refuses a sampling interval that is no positive duration: one line, exit 2', async () => {
    const result = await runCli(['console', '--store', `${POSTGRES_URL}?schema=${schema}`, '--sample-every', 'often']);
    expect(result.code).toBe(2);
    expect(result.stderr).toMatch(/^retrysafe: option '--sample-every <duration>' argument 'often' is invalid\..*\n$/);
  });
});
