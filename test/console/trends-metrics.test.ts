/**
 * The console's trends from a metrics endpoint, in Chromium: `retrysafe gateway` (in this process, on
 * SQLite, in front of a Node upstream) serves its admin `/metrics`, the console scrapes it with every sample
 * (`--metrics`), and under a scripted load — new keys, replays, 409s for duplicates in flight — the counts
 * the console drew add up to the requests sent. Also the unit tests of the scrape's parsing and quantiles.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseScrape, ratesBetween } from '../../src/console/scrape.js';
import type { Gateway } from '../../src/gateway/server.js';
import { gatewayInProcess, send, workDir, writeConfig } from '../gateway/support.js';
import { runCli } from '../support/run-cli.js';
import { chromiumAvailable, launchChromium, startConsole, type RunningConsole } from './harness.js';

describe('the scrape of a Prometheus text endpoint', () => {
  const text = (executed: number, replayed: number, fast: number, slow: number) => `# HELP retrysafe_requests_total Requests
# TYPE retrysafe_requests_total counter
retrysafe_requests_total{outcome="executed",retrysafe_scope="a"} ${executed}
retrysafe_requests_total{outcome="replayed"} ${replayed}
retrysafe_requests_total{outcome="in_flight_rejected"} 1
retrysafe_store_operation_duration_seconds_bucket{operation="claim",le="0.001"} ${fast}
retrysafe_store_operation_duration_seconds_bucket{operation="claim",le="0.01"} ${fast + slow}
retrysafe_store_operation_duration_seconds_bucket{operation="claim",le="+Inf"} ${fast + slow}
retrysafe_store_operation_duration_seconds_count{operation="claim"} ${fast + slow}
`;

  it('counts requests by outcome between two scrapes and reads the latency quantiles from the bucket increases', () => {
    const before = parseScrape(text(10, 5, 100, 0), 1_000);
    const after = parseScrape(text(30, 25, 150, 50), 3_000);
    const rates = ratesBetween(before, after);
    expect(rates).toMatchObject({ requests: 40, replayed: 20, conflicts: 0, requestsPerSecond: 20, replayRatio: 0.5, conflictRatio: 0, latencyOf: 'store' });
    // 50 of 100 observations at or under 1 ms: the median is the first bucket's edge; p99 interpolates in the second.
    expect(rates.latencyP50Ms).toBe(1);
    expect(rates.latencyP99Ms).toBeCloseTo(9.82, 2);
  });

  it('takes a counter that went down as a restart counting from 0', () => {
    const rates = ratesBetween(parseScrape(text(100, 100, 0, 0), 0), parseScrape(text(4, 0, 0, 0), 1_000));
    // executed 100 → 4 restarted (4 new), replayed 100 → 0 restarted (none), in_flight_rejected 1 → 1 (none).
    expect(rates).toMatchObject({ requests: 4, replayed: 0, conflicts: 0, latencyP50Ms: null });
  });
});

describe.runIf(chromiumAvailable)('console trends from the gateway\'s metrics (browser)', () => {
  let work: { dir: string; remove: () => Promise<void> };
  let upstream: Server;
  let gateway: Gateway & { url: string };
  let running: RunningConsole;
  let browser: Browser;

  beforeAll(async () => {
    work = await workDir();
    upstream = createServer((request, response) => {
      request.resume();
      // A request named slow holds its key long enough for its duplicates to find it in flight.
      const delay = request.url === '/pay/slow' ? 1_500 : 0;
      setTimeout(() => response.writeHead(201, { 'content-type': 'application/json' }).end('{"paid":true}'), delay);
    });
    await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
    const path = await writeConfig(work.dir, {
      listen: '127.0.0.1:0',
      admin: '127.0.0.1:0',
      store: `sqlite:${join(work.dir, 'gateway.db')}`,
      scope: 'global',
      upstreams: { app: { url: `http://127.0.0.1:${(upstream.address() as AddressInfo).port}` } },
      defaults: { timeout: '5s', lease: '10s', ttl: '1h' },
      routes: [{ path: '/pay/**', upstream: 'app' }],
    });
    gateway = await gatewayInProcess(path);
    const metrics = `http://127.0.0.1:${gateway.adminAddress?.port ?? 0}/metrics`;
    [running, browser] = await Promise.all([
      startConsole(['--store', `sqlite:${join(work.dir, 'gateway.db')}`, '--sample-every', '200ms', '--metrics', metrics]),
      launchChromium(),
    ]);
  }, 60_000);

  afterAll(async () => {
    await browser?.close();
    if (running !== undefined) expect(await running.stop()).toBe(0);
    await gateway?.close();
    await new Promise<void>((resolve) => (upstream ? upstream.close(() => resolve()) : resolve()));
    await work?.remove();
  });

  it('draws the request rate, the replay and 409 ratios and the upstream latency; the counts drawn add up to the requests sent', async () => {
    const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    await page.goto(running.url);
    await page.getByRole('button', { name: 'Trends' }).click();
    // One drawn chart per figure: store round trip, requests, ratios, latency.
    await expect.poll(() => page.locator('.chart canvas').count(), { timeout: 10_000 }).toBe(4);

    for (let i = 0; i < 20; i++) expect((await send(`${gateway.url}/pay/new`, { key: `new-${i}` })).status).toBe(201);
    for (let i = 0; i < 30; i++) expect((await send(`${gateway.url}/pay/new`, { key: `new-${i % 20}` })).headers['idempotent-replayed']).toBe('true');
    const slow = send(`${gateway.url}/pay/slow`, { key: 'slow-1' });
    await new Promise((resolve) => setTimeout(resolve, 300));
    const duplicates = await Promise.all(Array.from({ length: 5 }, () => send(`${gateway.url}/pay/slow`, { key: 'slow-1' })));
    expect(duplicates.map((d) => d.status)).toEqual([409, 409, 409, 409, 409]);
    expect((await slow).status).toBe(201);

    type Sample = { metrics: { requests: number; replayed: number; conflicts: number; latencyP50Ms: number | null; latencyOf: string | null } | null };
    const totals = async () => {
      const { samples } = (await (await fetch(new URL('/api/trends', running.url))).json()) as { samples: Sample[] };
      const counted = samples.flatMap((s) => (s.metrics === null ? [] : [s.metrics]));
      return { samples: counted, requests: counted.reduce((n, m) => n + m.requests, 0), replayed: counted.reduce((n, m) => n + m.replayed, 0), conflicts: counted.reduce((n, m) => n + m.conflicts, 0) };
    };
    await expect.poll(async () => (await totals()).requests, { timeout: 10_000 }).toBe(56);
    const { samples, replayed, conflicts } = await totals();
    expect(replayed).toBe(30);
    expect(conflicts).toBe(5);
    expect(samples.some((m) => m.latencyOf === 'upstream' && m.latencyP50Ms !== null)).toBe(true);
    await page.locator('#chart-latency h3', { hasText: 'upstream latency' }).waitFor();
    await page.locator('#now-requestsPerSecond').waitFor();
    await page.close();
  }, 60_000);

  it('refuses a --metrics that is no http(s) URL: one line, exit 2', async () => {
    const result = await runCli(['console', '--store', `sqlite:${join(work.dir, 'gateway.db')}`, '--metrics', 'ftp://x/metrics']);
    expect(result.code).toBe(2);
    expect(result.stderr).toMatch(/^retrysafe: option '--metrics <url>' argument 'ftp:\/\/x\/metrics' is invalid\. --metrics takes an http:\/\/ or https:\/\/ URL\. \(see --help\)\n$/);
  });
});
