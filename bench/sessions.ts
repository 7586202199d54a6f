/**
 * Client-session receiver overhead (retrysafe/sessions): requests/s of `receiver.apply` vs calling the same
 * handler bare, in one process, on the memory and SQLite session stores; and the saved-response count
 * after the run, which must stay bounded by the requests in flight (the low-water mark discards the rest).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  createMemorySessionStore,
  createSessionReceiver,
  createSqliteSessionStore,
  type SessionStore,
} from '../src/sessions/index.js';

const requests = Number(process.env['BENCH_SESSION_REQUESTS'] ?? 20_000);
/** Requests each client keeps in flight: the low-water mark trails the newest number by this much. */
const inFlight = 8;

const handler = (n: number): Promise<{ n: number }> => Promise.resolve({ n });

async function bare(): Promise<number> {
  const started = performance.now();
  for (let n = 1; n <= requests; n++) await handler(n);
  return (requests / (performance.now() - started)) * 1000;
}

async function throughSessions(store: SessionStore): Promise<{ perSecond: number; stored: number }> {
  const receiver = createSessionReceiver({ store });
  const clientId = await receiver.register();
  const started = performance.now();
  for (let base = 1; base <= requests; base += inFlight) {
    // A pipelining client: `inFlight` numbers at once, acknowledging everything below the batch.
    const batch = [];
    for (let n = base; n < base + inFlight && n <= requests; n++) {
      batch.push(receiver.apply({ clientId, requestNumber: n, lowWaterMark: base - 1 }, () => handler(n)));
    }
    await Promise.all(batch);
  }
  const perSecond = (requests / (performance.now() - started)) * 1000;
  const stats = await receiver.stats(clientId);
  return { perSecond, stored: stats?.storedResponses ?? Number.NaN };
}

/** Runs the sessions benchmark and returns its markdown table. */
export async function runSessionsBench(): Promise<string> {
  const dir = mkdtempSync(join(tmpdir(), 'retrysafe-bench-sessions-'));
  try {
    const baseline = await bare();
    const memory = await throughSessions(createMemorySessionStore());
    const sqlite = await throughSessions(createSqliteSessionStore({ path: join(dir, 'sessions.db') }));
    const row = (name: string, r: { perSecond: number; stored: number }): string =>
      `| ${name} | ${Math.round(r.perSecond)} | ${(r.perSecond / baseline).toFixed(3)} | ${(1e6 / r.perSecond - 1e6 / baseline).toFixed(1)} | ${r.stored} |`;
    return [
      `### Client sessions (${requests} requests from one client, ${inFlight} in flight)`,
      '',
      '| path | requests/s | ratio vs bare call | overhead (µs/request) | saved responses after the run |',
      '|---|---:|---:|---:|---:|',
      `| bare handler call | ${Math.round(baseline)} | 1.000 | 0 | — |`,
      row('session receiver, memory store', memory),
      row('session receiver, SQLite file', sqlite),
    ].join('\n');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
