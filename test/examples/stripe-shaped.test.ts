/**
 * examples/stripe-shaped driven by stripe-node itself, with its own retries and idempotency keys, through
 * the faults a real deployment sees: replies cut on the wire after the server answered, slow handlers,
 * concurrent duplicates of one call, and the server killed (SIGKILL) and started again mid-run. Every
 * logical charge must exist once in the database, and every call must resolve as that charge.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import BetterSqlite3 from 'better-sqlite3';
import Stripe from 'stripe';
import { afterAll, describe, expect, it } from 'vitest';
import { TcpProxy } from '../support/tcp-proxy.js';

const CHARGES = 500;
const WORKERS = 24;
/** One charge in ten is sent twice at once under its key; one in twenty takes `SLOW_MS`. */
const DUPLICATE_EVERY = 10;
const SLOW_EVERY = 20;
/** One charge in twenty is sent again under its key with another amount once it resolved: 422, thrown, never a charge. */
const REUSE_EVERY = 20;
/** The server is killed once this many charges have resolved. */
const KILL_AFTER = 250;

const directory = mkdtempSync(join(tmpdir(), 'retrysafe-stripe-shaped-'));
const database = join(directory, 'charges.db');

async function freePort(): Promise<number> {
  const probe = createServer().listen(0, '127.0.0.1');
  await once(probe, 'listening');
  const address = probe.address();
  probe.close();
  if (address === null || typeof address === 'string') throw new Error('no address');
  return address.port;
}

/** Starts the example as a child process; resolves once it prints `listening`. */
async function startServer(port: number): Promise<ChildProcess> {
  const child = spawn(process.execPath, ['--import', 'tsx', 'examples/stripe-shaped/server.ts'], {
    env: { ...process.env, PORT: String(port), DATABASE: database, LEASE_MS: '3000', SLOW_MS: '150' },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let output = '';
  await new Promise<void>((resolve, reject) => {
    child.stdout?.on('data', (chunk: Buffer) => {
      output += chunk.toString('utf8');
      if (output.includes('listening')) resolve();
    });
    child.once('exit', (code) => reject(new Error(`the example server exited with ${String(code)} before listening`)));
  });
  return child;
}

async function kill(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = once(child, 'exit');
  child.kill('SIGKILL');
  await exited;
}

describe('examples/stripe-shaped with stripe-node', () => {
  let server: ChildProcess | undefined;
  afterAll(async () => {
    if (server !== undefined) await kill(server);
    rmSync(directory, { recursive: true, force: true });
  });

  it(`creates ${CHARGES} charges once each under cut replies, slow handlers, duplicates and a restart`, async () => {
    const port = await freePort();
    server = await startServer(port);
    const proxy = new TcpProxy('127.0.0.1', port);
    await proxy.start();
    const stripe = new Stripe('sk_test_retrysafe', {
      host: '127.0.0.1',
      port: proxy.port,
      protocol: 'http',
      maxNetworkRetries: 15,
      timeout: 30_000,
      telemetry: false,
    });
    const statuses = new Map<number, number>();
    // stripe-node's emitter is untyped in its declarations: name the one event read here.
    const emitter = stripe as unknown as { on(event: 'response', listener: (event: { status: number }) => void): void };
    emitter.on('response', (event) => statuses.set(event.status, (statuses.get(event.status) ?? 0) + 1));

    // Cut about one reply in twelve: the server answered (and committed), the client sees a reset.
    const cutting = setInterval(() => proxy.arm((chunk) => chunk.subarray(0, 16).toString('latin1').startsWith('POST /v1/charges') && Math.random() < 1 / 12), 2);

    type Call = { key: string; amount: number; id: string | undefined; resolvedAmount: number | undefined };
    const calls: Call[] = [];
    /** Reused keys answered as a resource instead of an error, and the errors thrown for them. */
    const reuses = { resolved: 0, errors: [] as { status: number | undefined; rawType: string | undefined; code: string | undefined; retry: unknown }[] };
    let resolved = 0;
    let restart: Promise<void> | undefined;
    let inFlightAtKill = 0;
    let inFlight = 0;

    async function call(key: string, amount: number, description: string | undefined): Promise<void> {
      inFlight++;
      try {
        const charge = await stripe.charges.create({ amount, currency: 'usd', ...(description !== undefined && { description }) }, { idempotencyKey: key });
        calls.push({ key, amount, id: charge.id, resolvedAmount: charge.amount });
      } finally {
        inFlight--;
      }
    }

    async function reuse(key: string, amount: number): Promise<void> {
      try {
        await stripe.charges.create({ amount, currency: 'usd' }, { idempotencyKey: key });
        reuses.resolved++;
      } catch (error) {
        if (!(error instanceof Stripe.errors.StripeError)) throw error;
        const headers = error.headers as Record<string, string> | undefined;
        reuses.errors.push({ status: error.statusCode, rawType: error.rawType, code: error.code, retry: headers?.['stripe-should-retry'] });
      }
    }

    async function charge(i: number): Promise<void> {
      const key = `charge-${i}`;
      const amount = 100 + i;
      const description = i % SLOW_EVERY === 0 ? 'slow' : undefined;
      const copies = i % DUPLICATE_EVERY === 0 ? 2 : 1;
      await Promise.all(Array.from({ length: copies }, () => call(key, amount, description)));
      if (i % REUSE_EVERY === 5) await reuse(key, amount + 1);
      resolved++;
      if (resolved === KILL_AFTER && server !== undefined) {
        const killed = server;
        inFlightAtKill = inFlight;
        restart = kill(killed).then(async () => {
          server = await startServer(port);
        });
      }
    }

    let next = 0;
    await Promise.all(
      Array.from({ length: WORKERS }, async () => {
        while (next < CHARGES) await charge(next++);
      }),
    );
    clearInterval(cutting);
    await restart;
    await proxy.close();

    const db = new BetterSqlite3(database, { readonly: true });
    try {
      const rows = db.prepare('SELECT id, idempotency_key AS key, amount FROM charges').all() as { id: string; key: string; amount: number }[];
      const byKey = new Map(rows.map((row) => [row.key, row]));
      const doubles = rows.length - byKey.size;
      const wrong = calls.filter((c) => c.id === undefined || !c.id.startsWith('ch_') || c.resolvedAmount !== c.amount || byKey.get(c.key)?.id !== c.id);
      expect({ charges: rows.length, keys: byKey.size, doubles, wrong: wrong.length }).toEqual({ charges: CHARGES, keys: CHARGES, doubles: 0, wrong: 0 });
      expect(calls).toHaveLength(CHARGES + CHARGES / DUPLICATE_EVERY);
      expect(reuses.resolved).toBe(0);
      expect(reuses.errors).toEqual(
        Array.from({ length: CHARGES / REUSE_EVERY }, () => ({ status: 422, rawType: 'idempotency_error', code: 'idempotency_key_reused', retry: 'false' })),
      );
      for (const row of rows) expect(row.amount).toBe(100 + Number(row.key.slice('charge-'.length)));
    } finally {
      db.close();
    }
    // The faults happened: replies were cut, and the server was killed with calls in flight.
    expect(proxy.dropped).toBeGreaterThan(0);
    expect(inFlightAtKill).toBeGreaterThan(0);
    console.log(`stripe-shaped: ${proxy.dropped} replies cut, ${inFlightAtKill} calls in flight at the kill, statuses ${JSON.stringify(Object.fromEntries(statuses))}`);
  });
});
