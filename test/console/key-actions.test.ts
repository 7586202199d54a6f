/**
 * The console's key actions in Chromium, on SQLite and PostgreSQL: after every release and every
 * resolution of an indeterminate record the page shows the record as the store now has it (gone,
 * completed, claimed again), its buttons follow that state, and the action's outcome is reported — also
 * when the record changed between the operator's look and the click (`freezeUntilAction`).
 */
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Claim } from '../../src/core/record.js';
import type { ClaimInput, IdempotencyStore } from '../../src/core/store.js';
import { claimOnRecord, HoldingStore } from '../../src/gateway/indeterminate.js';
import { createPostgresStore, migrate } from '../../src/postgres.js';
import { createSqliteStore } from '../../src/stores/sqlite/index.js';
import { POSTGRES_URL, postgresAvailable, uniqueName } from '../support/services.js';
import { chromiumAvailable, freezeUntilAction, IMAGES, launchChromium, startConsole, type RunningConsole } from './harness.js';

const FP = 'd'.repeat(64);
const HOUR_MS = 3_600_000;
const pgUp = await postgresAvailable();

function input(key: string, leaseMs = HOUR_MS): ClaimInput {
  return { scope: 'shop', key, fingerprint: FP, leaseMs, retentionMs: 24 * HOUR_MS };
}

async function claimed(store: IdempotencyStore, key: string, leaseMs?: number): Promise<Claim> {
  const won = await store.claim(input(key, leaseMs));
  if (!won.acquired) throw new Error(`expected to acquire ${key}`);
  return won.claim;
}

interface Setup {
  readonly store: IdempotencyStore;
  readonly url: string;
  close(): Promise<void>;
}

const setups: [name: string, up: boolean, open: () => Promise<Setup>][] = [
  [
    'SQLite',
    true,
    () => {
      const dir = mkdtempSync(join(tmpdir(), 'retrysafe-console-actions-'));
      const path = join(dir, 'records.db');
      return Promise.resolve({ store: createSqliteStore({ path }), url: `sqlite:${path}`, close: () => Promise.resolve(rmSync(dir, { recursive: true, force: true })) });
    },
  ],
  [
    'PostgreSQL',
    pgUp,
    async () => {
      const schema = uniqueName('console_actions');
      await migrate({ connectionString: POSTGRES_URL, schema });
      return {
        store: createPostgresStore({ connectionString: POSTGRES_URL, schema }),
        url: `${POSTGRES_URL}?schema=${schema}`,
        close: async () => {
          const client = new pg.Client({ connectionString: POSTGRES_URL });
          await client.connect();
          await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
          await client.end();
        },
      };
    },
  ],
];

describe.each(setups)('console key actions on %s (browser)', (name, up, open) => {
  let setup: Setup;
  let store: IdempotencyStore;
  let running: RunningConsole;
  let browser: Browser;

  beforeAll(async () => {
    if (!up || !chromiumAvailable) return;
    setup = await open();
    store = setup.store;
    [running, browser] = await Promise.all([startConsole(['--store', setup.url, '--allow-actions']), launchChromium()]);
    mkdirSync(IMAGES, { recursive: true });
  }, 60_000);

  afterAll(async () => {
    await browser?.close();
    if (running !== undefined) expect(await running.stop()).toBe(0);
    await store?.close();
    await setup?.close();
  });

  /** A page on the keys view with `key` opened in the detail pane. */
  async function detailOf(key: string, leaseToken: string): Promise<Page> {
    const page = await browser.newPage({ viewport: { width: 1280, height: 560 } });
    await page.goto(running.url);
    await page.fill('input[name=key]', key);
    await page.locator('#keys tbody tr', { hasText: key }).click();
    await page.locator('#detail').getByText(leaseToken).waitFor();
    return page;
  }

  it.runIf(up && chromiumAvailable)('lists a stuck key under "stuck"; after its release the page shows it gone, without an error or a Release button', async () => {
    const stuck = await claimed(store, 'one-stuck', 1);
    await claimed(store, 'one-busy');
    // The relative times' wording is the locale's.
    const page = await browser.newPage({ viewport: { width: 1280, height: 560 }, locale: 'en-US' });
    await page.goto(running.url);
    await page.fill('input[name=key]', 'one-');
    await page.selectOption('select[name=state]', 'stuck');
    const row = page.locator('#keys tbody tr', { hasText: 'one-stuck' });
    await row.waitFor();
    // The key whose holder still has its lease is in progress, not stuck.
    await expect.poll(() => page.locator('#keys tbody tr').count(), { timeout: 10_000 }).toBe(1);
    // Local and relative times, the UTC time on hover.
    const created = row.locator('time').first();
    expect(await created.getAttribute('title')).toMatch(/^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$/);
    expect(await created.innerText()).toMatch(/\((now|\d+ seconds? ago)\)$/);
    await row.click();
    const detail = page.locator('#detail');
    await detail.getByText(stuck.leaseToken).waitFor();
    expect(await detail.locator('#state').innerText()).toBe('in progress, lease expired (stuck)');

    await detail.locator('#release').click();
    await detail.getByText(`Released lease ${stuck.leaseToken.slice(0, 8)}…: the key is gone`).waitFor();
    await detail.locator('#gone').waitFor();
    expect(await detail.locator('#release').count()).toBe(0);
    expect(await detail.locator('.error').count()).toBe(0);
    expect(await detail.locator('dl').count()).toBe(0);
    await page.getByText('No records in state stuck.').waitFor();
    expect(await store.get('shop', 'one-stuck')).toBeUndefined();
    await page.close();
  }, 60_000);

  it.runIf(up && chromiumAvailable)('after a release the key was claimed again at once: the page says so and shows the new lease', async () => {
    const first = await claimed(store, 'again-2');
    const page = await detailOf('again-2', first.leaseToken);
    let second: Claim | undefined;
    // The release goes through; a retry claims the key before the page reads it again.
    await page.route('**/api/key/release', async (route) => {
      const answer = await route.fetch();
      second = await claimed(store, 'again-2');
      await route.fulfill({ response: answer });
    });
    await page.locator('#release').click();
    const detail = page.locator('#detail');
    await detail.getByText(/The key has been claimed again since/).waitFor();
    expect(second).toBeDefined();
    await detail.getByText(second?.leaseToken ?? '').waitFor();
    expect(await detail.locator('#release').innerText()).toBe(`Release lease ${second?.leaseToken.slice(0, 8) ?? ''}…`);
    await page.close();
  }, 60_000);

  it.runIf(up && chromiumAvailable)('a release refused because the key completed meanwhile says why and shows the completed record, without lease or button', async () => {
    const held = await claimed(store, 'done-3');
    const page = await detailOf('done-3', held.leaseToken);
    await freezeUntilAction(page, '/api/key', '/api/key/release');
    expect(await store.complete(held, { status: 201, headers: {}, body: new Uint8Array([1]) }, HOUR_MS)).toBe(true);
    await page.locator('#release').click();
    const detail = page.locator('#detail');
    await detail.getByText('Not released: the record is no longer in progress under that lease token.').waitFor();
    expect(await detail.locator('#state').innerText()).toBe('completed');
    expect(await detail.locator('#release').count()).toBe(0);
    expect(await detail.getByText('lease expires').count()).toBe(0);
    // The list shows no lease for a completed key either.
    const row = page.locator('#keys tbody tr', { hasText: 'done-3' });
    await row.getByText('201').waitFor();
    expect(await row.locator('td').nth(4).innerText()).toBe('—');
    await page.close();
  }, 60_000);

  /** Holds a new record of `key` as the gateway does after an upstream timeout. */
  async function hold(key: string): Promise<string> {
    const claim = await claimed(store, key);
    expect(await new HoldingStore(store).hold(claim, 'upstream-timeout', 24 * HOUR_MS)).toBe(true);
    return claim.leaseToken;
  }

  async function heldPanel(key: string): Promise<Page> {
    const page = await browser.newPage({ viewport: { width: 1280, height: 480 } });
    await page.goto(running.url);
    await page.getByRole('button', { name: 'Indeterminate' }).click();
    const row = page.locator('#held tbody tr', { hasText: key });
    await row.getByText('upstream-timeout').waitFor();
    expect(await row.locator('td').nth(3).innerText()).toBe('504');
    await row.click();
    await page.locator('#resolve #complete').waitFor();
    return page;
  }

  it.runIf(up && chromiumAvailable)('marks an indeterminate record done with the response given, which retries then replay', async () => {
    await hold('charge-4');
    const page = await heldPanel('charge-4');
    const pane = page.locator('#resolve');
    await pane.getByText('Now indeterminate (upstream-timeout): retries get 504.').waitFor();
    if (name === 'PostgreSQL') await page.screenshot({ path: join(IMAGES, 'console-indeterminate.png') });
    await pane.locator('input[name=status]').fill('201');
    await pane.locator('textarea[name=body]').fill('{"charge":"ch_4"}');
    await pane.locator('#complete').click();
    await pane.getByText('Marked done with status 201.').waitFor();
    await pane.getByText('Now completed with status 201: every retry replays it.').waitFor();
    expect(await pane.locator('#complete').count()).toBe(0);
    await page.getByText('No indeterminate records.').waitFor();
    const record = await store.get('shop', 'charge-4');
    expect(record?.state).toBe('completed');
    expect(record?.response?.status).toBe(201);
    expect(record?.response?.headers).toEqual({ 'content-type': 'application/json' });
    expect(new TextDecoder().decode(record?.response?.body)).toBe('{"charge":"ch_4"}');
    await page.close();
  }, 60_000);

  it.runIf(up && chromiumAvailable)('releases an indeterminate record: the page shows it gone and the next retry claims it anew', async () => {
    await hold('charge-5');
    const page = await heldPanel('charge-5');
    const pane = page.locator('#resolve');
    await pane.locator('#held-release').click();
    await pane.getByText('Released.').waitFor();
    await pane.getByText('Now gone: the next retry sends the request to the upstream.').waitFor();
    expect(await store.get('shop', 'charge-5')).toBeUndefined();
    const retry = await store.claim(input('charge-5'));
    expect(retry.acquired && !retry.claim.takeover).toBe(true);
    await page.close();
  }, 60_000);

  it.runIf(up && chromiumAvailable)('a resolution of a record resolved meanwhile says why and shows it as it is now', async () => {
    await hold('charge-6');
    const page = await heldPanel('charge-6');
    await freezeUntilAction(page, '/api/key', '/api/indeterminate/resolve');
    // Someone else (the reconcile hook, `retrysafe gateway resolve`) released it between the look and the click.
    const record = await store.get('shop', 'charge-6');
    if (record === undefined) throw new Error('expected the held record');
    expect(await store.release(claimOnRecord(record))).toBe(true);
    const pane = page.locator('#resolve');
    await pane.locator('#complete').click();
    await pane.getByText('Not resolved: the record is gone: resolved by someone else, or expired.').waitFor();
    await pane.getByText('Now gone: the next retry sends the request to the upstream.').waitFor();
    expect(await store.get('shop', 'charge-6')).toBeUndefined();
    await page.close();
  }, 60_000);
  it.runIf(up && chromiumAvailable)('releases every stuck key shown after a confirmation naming their count, and reports how many were released', async () => {
    const stuck = await Promise.all(['bulk-a', 'bulk-b', 'bulk-c'].map((key) => claimed(store, key, 1)));
    const live = await claimed(store, 'bulk-live');
    const page = await browser.newPage({ viewport: { width: 1280, height: 560 } });
    await page.goto(running.url);
    await page.fill('input[name=key]', 'bulk-');
    await page.selectOption('select[name=state]', 'stuck');
    await expect.poll(() => page.locator('#keys tbody tr').count(), { timeout: 10_000 }).toBe(3);
    // One of them is claimed again after the page showed it: its release, fenced by the token shown, is refused.
    await freezeUntilAction(page, '/api/keys', '/api/key/release');
    expect(await store.release(stuck[2] as Claim)).toBe(true);
    const again = await claimed(store, 'bulk-c');
    let asked = '';
    page.once('dialog', (dialog) => {
      asked = dialog.message();
      void dialog.accept();
    });
    await page.locator('#release-all').click();
    await page.getByText(/^Released 2 of 3 stuck keys; 1 not \(first problem: the record is no longer in progress under that lease token\)\.$/).waitFor();
    expect(asked).toMatch(/^Release 3 stuck keys\?/);
    expect(await store.get('shop', 'bulk-a')).toBeUndefined();
    expect(await store.get('shop', 'bulk-b')).toBeUndefined();
    expect((await store.get('shop', 'bulk-c'))?.leaseToken).toBe(again.leaseToken);
    expect((await store.get('shop', 'bulk-live'))?.leaseToken).toBe(live.leaseToken);
    await page.close();
  }, 60_000);

  it.runIf(up && chromiumAvailable)('releases nothing when the confirmation is dismissed', async () => {
    await claimed(store, 'keep-1', 1);
    const page = await browser.newPage({ viewport: { width: 1280, height: 560 } });
    await page.goto(running.url);
    await page.fill('input[name=key]', 'keep-');
    await page.selectOption('select[name=state]', 'stuck');
    await page.locator('#release-all', { hasText: 'Release the 1 stuck key shown' }).waitFor();
    page.once('dialog', (dialog) => void dialog.dismiss());
    await page.locator('#release-all').click();
    await page.waitForTimeout(500);
    expect((await store.get('shop', 'keep-1'))?.state).toBe('in_progress');
    expect(await page.getByText(/^Released/).count()).toBe(0);
    await page.close();
  }, 60_000);

  it.runIf(up && chromiumAvailable)('copies a link to a key, without the token, that opens the console on that key', async () => {
    const held = await claimed(store, 'linked/7 x');
    const page = await detailOf('linked/7 x', held.leaseToken);
    await page.context().grantPermissions(['clipboard-read', 'clipboard-write']);
    await page.locator('#copy-link').click();
    await page.getByText('Link copied (without the token):').waitFor();
    const link = await page.locator('#key-link').inputValue();
    expect(link).toBe(`${running.url}#scope=shop&key=linked%2F7+x`);
    expect(await page.evaluate<string>('navigator.clipboard.readText()')).toBe(link);
    const opened = await browser.newPage({ viewport: { width: 1280, height: 560 } });
    await opened.goto(link);
    await opened.locator('#detail h2', { hasText: 'linked/7 x' }).waitFor();
    await opened.locator('#detail').getByText(held.leaseToken).waitFor();
    // The list's first answer may come after the detail's.
    await expect.poll(() => opened.locator('#keys tbody tr').count(), { timeout: 10_000 }).toBe(1);
    await Promise.all([page.close(), opened.close()]);
  }, 60_000);
});
