import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPostgresStore, migrate, type PostgresStore } from '../../src/postgres.js';
import type { ClaimInput } from '../../src/core/store.js';
import { POSTGRES_URL, postgresAvailable, uniqueName } from '../support/services.js';
import { chromiumAvailable, IMAGES, launchChromium, startConsole, type RunningConsole } from './harness.js';

const FP = 'a'.repeat(64);
const HOUR_MS = 3_600_000;
const available = (await postgresAvailable()) && chromiumAvailable;

function input(key: string): ClaimInput {
  // A hung holder: its lease runs for an hour, so no retry may take the key over on its own.
  return { scope: 'tenant-7', key, fingerprint: FP, leaseMs: HOUR_MS, retentionMs: 24 * HOUR_MS };
}

describe.runIf(available)('console keys view on PostgreSQL (browser)', () => {
  const schema = uniqueName('console_keys');
  let store: PostgresStore;
  let running: RunningConsole;
  let browser: Browser;

  beforeAll(async () => {
    await migrate({ connectionString: POSTGRES_URL, schema });
    store = createPostgresStore({ connectionString: POSTGRES_URL, schema });
    for (let i = 0; i < 3; i++) {
      const won = await store.claim({ ...input(`done-${i}`), leaseMs: 30_000 });
      if (!won.acquired) throw new Error('expected to acquire');
      await store.complete(won.claim, { status: 201, headers: { 'content-type': 'application/json' }, body: new TextEncoder().encode('{"id":1}') }, HOUR_MS);
    }
    running = await startConsole(['--store', `${POSTGRES_URL}?schema=${schema}`, '--allow-actions']);
    browser = await launchChromium();
    mkdirSync(IMAGES, { recursive: true });
  }, 60_000);

  afterAll(async () => {
    await browser?.close();
    expect(await running?.stop()).toBe(0);
    await store?.close();
    const client = new pg.Client({ connectionString: POSTGRES_URL });
    await client.connect();
    await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    await client.end();
  });

  it('finds a stuck key by scope and key, releases it, and a retry then executes', async () => {
    const stuck = await store.claim(input('charge-42'));
    if (!stuck.acquired) throw new Error('expected to acquire');
    // Before the release a retry is refused: the hung holder's lease stands.
    expect((await store.claim(input('charge-42'))).acquired).toBe(false);

    const page = await browser.newPage({ viewport: { width: 1280, height: 560 } });
    await page.goto(running.url);
    await page.selectOption('select[name=state]', 'in_progress');
    await page.fill('input[name=scope]', 'tenant-7');
    await page.fill('input[name=key]', 'charge');
    const row = page.locator('#keys tbody tr', { hasText: 'charge-42' });
    await row.waitFor();
    // The unfiltered list holds the row too: wait for the list the three filters ask for, then check it.
    await expect.poll(() => page.locator('#keys tbody tr').count(), { timeout: 10_000 }).toBe(1);
    await row.click();
    const detail = page.locator('#detail');
    await detail.getByText(stuck.claim.leaseToken).waitFor();
    await page.screenshot({ path: join(IMAGES, 'console-keys.png') });

    await detail.locator('#release').click();
    await detail.getByText(/^Released lease .*: the key is gone/).waitFor();
    expect(await store.get('tenant-7', 'charge-42')).toBeUndefined();
    // The retry runs: a fresh claim, not a takeover of the old lease.
    const retry = await store.claim(input('charge-42'));
    expect(retry.acquired && !retry.claim.takeover).toBe(true);
    // The old holder is fenced off: its completion no longer lands.
    expect(await store.complete(stuck.claim, { status: 200, headers: {}, body: new Uint8Array() }, HOUR_MS)).toBe(false);
    await page.close();
  }, 60_000);

  it('release is fenced: a key claimed again after the operator looked stays claimed', async () => {
    const first = await store.claim(input('refund-9'));
    if (!first.acquired) throw new Error('expected to acquire');
    const page = await browser.newPage();
    await page.goto(running.url);
    await page.fill('input[name=key]', 'refund-9');
    await page.locator('#keys tbody tr', { hasText: 'refund-9' }).click();
    await page.locator('#detail').getByText(first.claim.leaseToken).waitFor();
    // Between the operator's look and the click, the holder releases and a retry claims the key again;
    // the click then sends the token the operator saw, as the Release button does.
    expect(await store.release(first.claim)).toBe(true);
    const second = await store.claim(input('refund-9'));
    if (!second.acquired) throw new Error('expected to acquire');
    const answer = await page.evaluate(async (token) => {
      const response = await fetch('/api/key/release', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ scope: 'tenant-7', key: 'refund-9', leaseToken: token }),
      });
      return { status: response.status, type: response.headers.get('content-type') };
    }, first.claim.leaseToken);
    expect(answer).toEqual({ status: 409, type: 'application/problem+json' });
    expect((await store.get('tenant-7', 'refund-9'))?.leaseToken).toBe(second.claim.leaseToken);
    await page.close();
  }, 60_000);
});
