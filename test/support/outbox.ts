/**
 * Helpers of the outbox tests: a webhook receiver on 127.0.0.1 that verifies signatures, a hand-written
 * OpenTelemetry meter, a TCP proxy that can cut a broker off, and a loop that runs a relay until a
 * condition holds, a wait for rows to pass the snapshot xmin, and a look at whether a relay waits.
 */
import { once } from 'node:events';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type pg from 'pg';
import { createNoopMeter, type Attributes, type BatchObservableCallback, type Counter, type Histogram, type Meter, type ObservableGauge } from '@opentelemetry/api';
import { verifyWebhook } from '../../src/messaging/transports/webhook-signature.js';
import type { Relay } from '../../src/messaging/outbox/relay.js';

export const WEBHOOK_SECRET = 'outbox-test-secret-0123456789';

/** One request the webhook receiver got. */
export interface Received {
  readonly id: string;
  readonly idempotencyKey: string | undefined;
  readonly signed: boolean;
  readonly body: string;
  readonly headers: IncomingMessage['headers'];
}

/** A webhook receiver: records every request and answers with `respond(body)` (default 200). */
export interface WebhookReceiver {
  readonly url: string;
  readonly received: Received[];
  respond: (request: Received) => number | Promise<number>;
  close(): Promise<void>;
}

export async function startWebhookReceiver(): Promise<WebhookReceiver> {
  const received: Received[] = [];
  const receiver: WebhookReceiver = {
    url: '',
    received,
    respond: () => 200,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      const header = (name: string): string | undefined => {
        const value = req.headers[name];
        return typeof value === 'string' ? value : undefined;
      };
      const request: Received = {
        id: header('webhook-id') ?? '',
        idempotencyKey: header('idempotency-key'),
        signed: verifyWebhook(WEBHOOK_SECRET, {
          id: header('webhook-id'),
          timestamp: header('webhook-timestamp'),
          signature: header('webhook-signature'),
          body,
          nowMs: Date.now(),
        }),
        body: body.toString('utf8'),
        headers: req.headers,
      };
      received.push(request);
      void Promise.resolve(receiver.respond(request)).then((status) => {
        res.statusCode = status;
        res.end();
      });
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('no address');
  (receiver as { url: string }).url = `http://127.0.0.1:${address.port}/hook`;
  return receiver;
}

/** Runs `relay.runOnce()` until `done()` holds, or fails after `timeoutMs` (rows may wait on another session's xmin). */
export async function runUntil(relay: Relay, done: () => boolean | Promise<boolean>, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await done())) {
    if (Date.now() > deadline) throw new Error(`condition not reached within ${timeoutMs} ms`);
    const claimed = await relay.runOnce();
    if (claimed === 0) await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/**
 * Waits until every pending row of `schema`'s outbox is below the current snapshot's xmin, i.e. a claim can
 * see it. Other test files share the server, and any transaction of theirs that was open when a row
 * committed holds that row back; call this before asserting how many rows one `runOnce` claims.
 */
export async function untilVisible(pool: pg.Pool, schema: string, timeoutMs = 15_000): Promise<void> {
  await waitUntil(async () => {
    const r = await pool.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM "${schema}".outbox WHERE status = 0 AND xid >= pg_snapshot_xmin(pg_current_snapshot())`,
    );
    return r.rows[0]?.n === 0;
  }, timeoutMs);
}

/**
 * The backend pids holding the outbox's waiting lock (migration 0007) exclusively: one while a relay waits
 * for a NOTIFY, none otherwise. pg_locks shows a two-key advisory lock as (classid, objid, objsubid 2), the
 * int4 keys read as unsigned oids.
 */
export async function waitingLockHolders(pool: pg.Pool, channel: string): Promise<number[]> {
  const r = await pool.query<{ pid: number }>(
    `SELECT pid FROM pg_locks
     WHERE locktype = 'advisory' AND objsubid = 2 AND mode = 'ExclusiveLock' AND granted
       AND classid = 1920168034 AND objid::bigint = (hashtext($1)::bigint + 4294967296) % 4294967296`,
    [channel],
  );
  return r.rows.map((row) => row.pid);
}

/** How many relays wait for a NOTIFY on the outbox: 1 or 0. */
export async function relaysWaiting(pool: pg.Pool, channel: string): Promise<number> {
  return (await waitingLockHolders(pool, channel)).length;
}

/** Waits until a relay holds the outbox's waiting lock, so an enqueue from now on NOTIFYs it. */
export async function untilRelayWaits(pool: pg.Pool, channel: string, timeoutMs = 15_000): Promise<void> {
  await waitUntil(async () => (await relaysWaiting(pool, channel)) > 0, timeoutMs);
}

/**
 * Waits until `done()` holds (polling every 20 ms), or fails after `timeoutMs`; `explain()`, when given,
 * adds what the test knows about why to the failure's message.
 */
export async function waitUntil(
  done: () => boolean | Promise<boolean>,
  timeoutMs = 15_000,
  explain?: () => Promise<string>,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await done())) {
    if (Date.now() > deadline) {
      const why = explain ? `: ${await explain().catch((error: unknown) => `(explain failed: ${String(error)})`)}` : '';
      throw new Error(`condition not reached within ${timeoutMs} ms${why}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/**
 * What holds an outbox's pending rows back, for a failure message: how many are pending, how many are not
 * yet below the snapshot xmin, and the oldest transaction on the server (any database's counts).
 */
export async function outboxBacklog(pool: pg.Pool, schema: string): Promise<string> {
  const rows = await pool.query<{ pending: number; invisible: number }>(
    `SELECT count(*)::int AS pending,
            count(*) FILTER (WHERE xid >= pg_snapshot_xmin(pg_current_snapshot()))::int AS invisible
       FROM "${schema}".outbox WHERE status = 0`,
  );
  const oldest = await pool.query<{ age_ms: number | null; state: string | null; query: string | null }>(
    `SELECT (extract(epoch FROM now() - xact_start) * 1000)::int AS age_ms, state, left(query, 120) AS query
       FROM pg_stat_activity WHERE backend_xid IS NOT NULL AND pid <> pg_backend_pid()
       ORDER BY xact_start LIMIT 1`,
  );
  const row = rows.rows[0];
  const old = oldest.rows[0];
  return `${row?.pending ?? '?'} pending, ${row?.invisible ?? '?'} not yet below the snapshot xmin; oldest transaction with an xid: ${
    old ? `${old.age_ms ?? '?'} ms, ${old.state ?? '?'}, ${JSON.stringify(old.query)}` : 'none'
  }`;
}

/** One value a counter added or a histogram recorded. */
interface Point {
  readonly name: string;
  readonly value: number;
  readonly attributes: Attributes;
}

/** A Meter that keeps what counters and histograms recorded, and lets the test run the batch gauge callbacks. */
export class RecordingMeter {
  readonly points: Point[] = [];
  readonly units = new Map<string, string | undefined>();
  readonly callbacks = new Set<BatchObservableCallback>();
  private readonly gaugeNames = new Map<ObservableGauge, string>();
  private readonly noop = createNoopMeter();

  /** This object as an OpenTelemetry Meter. */
  get meter(): Meter {
    const record = (name: string) => (value: number, attributes: Attributes = {}) => void this.points.push({ name, value, attributes });
    const createCounter = (name: string, options?: { unit?: string }): Counter => {
      this.units.set(name, options?.unit);
      return { add: record(name) };
    };
    const createHistogram = (name: string, options?: { unit?: string }): Histogram => {
      this.units.set(name, options?.unit);
      return { record: record(name) };
    };
    const createObservableGauge = (name: string, options?: { unit?: string }): ObservableGauge => {
      this.units.set(name, options?.unit);
      // The no-op meter hands out one shared gauge; each name needs its own object to be told apart.
      const gauge = Object.create(this.noop.createObservableGauge(name)) as ObservableGauge;
      this.gaugeNames.set(gauge, name);
      return gauge;
    };
    return {
      ...Object.fromEntries(['createGauge', 'createUpDownCounter', 'createObservableCounter', 'createObservableUpDownCounter'].map((m) => [m, () => undefined])),
      createCounter,
      createHistogram,
      createObservableGauge,
      addBatchObservableCallback: (callback: BatchObservableCallback) => void this.callbacks.add(callback),
      removeBatchObservableCallback: (callback: BatchObservableCallback) => void this.callbacks.delete(callback),
    } as unknown as Meter;
  }

  /** The values `name` recorded on points whose attributes include `match`, in order. */
  values(name: string, match: Attributes = {}): number[] {
    return this.points
      .filter((p) => p.name === name && Object.entries(match).every(([key, value]) => p.attributes[key] === value))
      .map((p) => p.value);
  }

  /** The sum of the values `name` recorded on points whose attributes include `match`. */
  sum(name: string, match: Attributes = {}): number {
    return this.values(name, match).reduce((total, value) => total + value, 0);
  }

  /** Runs every registered batch callback; resolves with gauge name → observed value. */
  async collect(): Promise<Map<string, number>> {
    const observed = new Map<string, number>();
    for (const callback of this.callbacks) {
      await callback({
        observe: (gauge: unknown, value: number) => void observed.set(this.gaugeNames.get(gauge as ObservableGauge) ?? '?', value),
      });
    }
    return observed;
  }
}
