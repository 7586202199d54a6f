/**
 * The operator console's HTTP server: a JSON API over one idempotency store (and, where the database
 * holds them, the inbox and outbox tables) plus the static web UI that drives it. Built on `node:http`; the
 * UI's modules (Preact, htm) are served from the package's own dependencies, so nothing is fetched from
 * the network at run time.
 *
 * API (all JSON; errors are RFC 9457 `application/problem+json`):
 * - `GET /api/info` — the store's name and which views and actions are available.
 * - `GET /api/keys?state=&scope=&key=&afterScope=&afterKey=&limit=` — one page (at most 200) of records in
 *   (scope, key) order; `state` is `in_progress`, `completed`, `stuck` or `indeterminate` (`./records.ts`);
 *   `key` is a prefix; `next` is the cursor of the following page.
 * - `GET /api/key?scope=&key=` — one record in full; 404 when absent.
 * - `POST /api/key/release` `{ scope, key, leaseToken }` — releases an in-progress record, fenced by the
 *   lease token the operator saw: 200 `{ released: true }`, or 409 when the record was completed, released
 *   or claimed again meanwhile (then nothing changed).
 * - `POST /api/indeterminate/resolve` — completes or releases a record the gateway holds (`./resolve.ts`).
 * - `GET /api/inbox/dead-letters?consumer=&limit=` (dead letters and pending redrives),
 *   `POST /api/inbox/redrive` `{ consumer, messageId }`.
 * - `GET /api/outbox` (status and dead letters), `POST /api/outbox/redrive` `{ id }`: 200, or 404 when the
 *   row is no dead letter (any more).
 * - `GET /api/trends` — `{ intervalMs, samples }`: the console's own samples of the last hour (`./trends.ts`),
 *   each with `metrics` (request rate, replay and 409 ratios, latency p50/p99) when `metricsUrl` is set.
 * - `GET /api/sessions?client=&after=&limit=` — one page (at most 200) of client sessions in client-id
 *   order; `client` is a prefix; `next` is the `after` of the following page.
 *
 * Access: every request must name the console in its `Host` header — a loopback name, one of
 * `allowedHosts`, or the address the connection arrived on — else 421 (the DNS-rebinding defence of
 * `./host-check.ts`); a `POST` whose `Origin` is another origin answers 403. With a `token`, every `/api/`
 * request must carry `Authorization: Bearer TOKEN` (401 otherwise). Actions (the `POST`s) answer 403 unless
 * `allowActions` is set, and take only `application/json` bodies, which a cross-site form cannot send.
 *
 * @module
 */
import { timingSafeEqual } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { fileURLToPath } from 'node:url';
import type { IdempotencyStore } from '../core/store.js';
import type { Inbox } from '../messaging/inbox/inbox.js';
import type { Outbox, Queryable } from '../messaging/outbox/outbox.js';
import type { SessionStore, SessionSummary } from '../sessions/store.js';
import { allowedHostName, hostAllowed, LOOPBACK_HOSTS, originAllowed } from './host-check.js';
import { detail, isKeysState, pageOf, summary } from './records.js';
import { resolveHeld } from './resolve.js';
import { startTrends, type Trends } from './trends.js';

/** What the console serves. */
export interface ConsoleOptions {
  /** The idempotency store; the keys view needs its optional `listRecords`. */
  readonly store: IdempotencyStore;
  /** How the store is named in the UI (a URL with its password redacted). */
  readonly storeName: string;
  /** The inbox over the same database, when it has the inbox tables. */
  readonly inbox?: Inbox<unknown> | undefined;
  /** The outbox and the connection it is queried through, when the database has the outbox table. */
  readonly outbox?: { readonly outbox: Outbox; readonly db: Queryable } | undefined;
  /**
   * The client sessions over the same database, when it holds them: a session store that can list its
   * sessions, and where it keeps them (shown in the UI, e.g. `table retrysafe_sessions`).
   */
  readonly sessions?: { readonly store: Pick<Required<SessionStore>, 'listSessions'>; readonly location: string } | undefined;
  /** Enables the release and redrive actions; without it they answer 403. */
  readonly allowActions: boolean;
  /** When set, every API request must carry `Authorization: Bearer <token>`. */
  readonly token?: string | undefined;
  /**
   * Host names (or IP addresses) the `Host` header may name besides `localhost`, `127.0.0.1`, `[::1]` and
   * the address a connection arrived on: the name the console is bound to, or reached by through a proxy.
   * No ports. @defaultValue none
   */
  readonly allowedHosts?: readonly string[] | undefined;
  /** How often the trends are sampled, in milliseconds. @defaultValue 5_000 */
  readonly trendIntervalMs?: number | undefined;
  /**
   * A Prometheus text endpoint scraped with every trend sample for request rates, replay and 409 ratios and
   * latency quantiles: the receiver's instruments through OpenTelemetry's Prometheus exporter, or `retrysafe
   * gateway`'s admin `/metrics` (`./scrape.ts`). @defaultValue none: those charts are not drawn
   */
  readonly metricsUrl?: string | undefined;
}

/** How long the trends are kept: 60 minutes, in milliseconds. */
const TREND_WINDOW_MS = 3_600_000;

/** The largest page `GET /api/keys` returns. */
export const MAX_PAGE = 200;

const UI_ROOT = new URL('../../src/console/ui/', import.meta.url);

// The browser modules, by the name the UI's import map gives them, resolved from the package's dependencies.
const VENDOR: Readonly<Record<string, string>> = {
  'preact.mjs': 'preact',
  'hooks.mjs': 'preact/hooks',
  'htm.mjs': 'htm',
  'uplot.mjs': 'uplot/dist/uPlot.esm.js',
  'uplot.css': 'uplot/dist/uPlot.min.css',
};

const STATIC: Readonly<Record<string, string>> = {
  '/': 'index.html',
  '/style.css': 'style.css',
  ...Object.fromEntries(['app', 'lib', 'keys', 'indeterminate', 'messaging', 'sessions', 'trends'].map((name) => [`/${name}.mjs`, `${name}.mjs`])),
};

const TYPES: Readonly<Record<string, string>> = {
  html: 'text/html; charset=utf-8',
  mjs: 'text/javascript; charset=utf-8',
  js: 'text/javascript; charset=utf-8',
  css: 'text/css; charset=utf-8',
};

/** An answer the handlers give; turned into a response by the dispatcher. */
class Answer {
  constructor(
    readonly status: number,
    readonly body: unknown,
  ) {}
}

function problem(status: number, title: string, detail?: string): Answer {
  return new Answer(status, { type: 'about:blank', title, status, ...(detail !== undefined && { detail }) });
}

/**
 * Creates the console's HTTP server (not yet listening).
 *
 * Samples the trends from creation until the server closes.
 *
 * @throws TypeError when `allowedHosts` holds something that is no host name or IP address
 * @throws RangeError when `trendIntervalMs` is not a positive integer
 * @example
 * ```ts
 * const server = createConsoleServer({ store, storeName: 'postgres://…', allowActions: false });
 * server.listen(8080, '127.0.0.1');
 * ```
 */
export function createConsoleServer(options: ConsoleOptions): Server {
  const expected = options.token === undefined ? undefined : Buffer.from(`Bearer ${options.token}`);
  const hosts = new Set(LOOPBACK_HOSTS);
  for (const name of options.allowedHosts ?? []) {
    const host = allowedHostName(name);
    if (host === undefined) throw new TypeError(`retrysafe: allowedHosts holds ${JSON.stringify(name)}, which is no host name or IP address (give no port)`);
    hosts.add(host);
  }
  const trends = startTrends(options, options.trendIntervalMs ?? 5_000, TREND_WINDOW_MS);
  const server = createServer((request, response) => {
    void dispatch(options, trends, hosts, expected, request, response).catch((error: unknown) => {
      send(response, problem(500, 'The console failed', error instanceof Error ? error.message : String(error)));
    });
  });
  server.once('close', () => trends.stop());
  return server;
}

async function dispatch(
  options: ConsoleOptions,
  trends: Trends,
  hosts: ReadonlySet<string>,
  expected: Buffer | undefined,
  request: IncomingMessage,
  response: ServerResponse,
): Promise<void> {
  if (!hostAllowed(hosts, request)) {
    return send(response, problem(421, 'Misdirected request', 'the Host header does not name this console; start it with --allowed-host NAME to answer to NAME'));
  }
  if (request.method !== 'GET' && request.method !== 'HEAD' && !originAllowed(request)) {
    return send(response, problem(403, 'Cross-origin request refused', 'the Origin of an action must be the console itself'));
  }
  // Prefixed, not resolved against a base: a path such as `//x` would otherwise be read as a host.
  const url = new URL(`http://console${request.url ?? '/'}`);
  const file = STATIC[url.pathname];
  if (file !== undefined && request.method === 'GET') return serveFile(response, new URL(file, UI_ROOT));
  if (url.pathname.startsWith('/vendor/') && request.method === 'GET') {
    const name = VENDOR[url.pathname.slice('/vendor/'.length)];
    if (name !== undefined) return serveFile(response, new URL(import.meta.resolve(name)));
  }
  if (!url.pathname.startsWith('/api/')) return send(response, problem(404, 'Not found'));
  if (expected !== undefined) {
    const given = Buffer.from(request.headers.authorization ?? '');
    if (given.length !== expected.length || !timingSafeEqual(given, expected)) {
      return send(response, problem(401, 'A valid bearer token is required'));
    }
  }
  if (request.method === 'POST') {
    if (!options.allowActions) return send(response, problem(403, 'Read-only console', 'start the console with --allow-actions to release or redrive'));
    if (!(request.headers['content-type'] ?? '').startsWith('application/json')) return send(response, problem(415, 'Send application/json'));
    const body = await readJson(request);
    if (body === undefined) return send(response, problem(400, 'The body must be a JSON object'));
    return send(response, await act(options, url.pathname, body));
  }
  if (request.method !== 'GET') return send(response, problem(405, 'Method not allowed'));
  if (url.pathname === '/api/trends') return send(response, new Answer(200, { intervalMs: trends.intervalMs, samples: trends.samples() }));
  return send(response, await read(options, url));
}

async function read(options: ConsoleOptions, url: URL): Promise<Answer> {
  const q = url.searchParams;
  switch (url.pathname) {
    case '/api/info':
      return new Answer(200, {
        store: options.storeName,
        allowActions: options.allowActions,
        keys: options.store.listRecords !== undefined,
        inbox: options.inbox !== undefined,
        outbox: options.outbox !== undefined,
        sessions: options.sessions === undefined ? null : { location: options.sessions.location },
        metrics: options.metricsUrl !== undefined,
      });
    case '/api/keys': {
      const { store } = options;
      if (store.listRecords === undefined) return problem(501, 'This store cannot list its keys');
      const state = q.get('state') ?? '';
      if (!isKeysState(state)) return problem(400, 'state must be in_progress, completed, stuck or indeterminate');
      const afterScope = q.get('afterScope');
      const scope = nonEmpty(q.get('scope'));
      const keyPrefix = nonEmpty(q.get('key'));
      const now = Date.now();
      const page = await pageOf(
        (query) => store.listRecords?.(query) ?? Promise.resolve([]),
        state,
        {
          ...(scope !== undefined && { scope }),
          ...(keyPrefix !== undefined && { keyPrefix }),
          ...(afterScope !== null && { after: { scope: afterScope, key: q.get('afterKey') ?? '' } }),
        },
        Math.min(MAX_PAGE, positive(q.get('limit')) ?? 50),
        now,
      );
      return new Answer(200, { records: page.records.map((record) => summary(record, now)), ...(page.next !== undefined && { next: page.next }) });
    }
    case '/api/key': {
      const key = q.get('key');
      if (key === null) return problem(400, 'key is required');
      const record = await options.store.get(q.get('scope') ?? '', key);
      return record === undefined ? problem(404, 'No such record') : new Answer(200, detail(record, Date.now()));
    }
    case '/api/inbox/dead-letters': {
      if (options.inbox === undefined) return problem(501, 'No inbox tables in this store');
      const consumer = nonEmpty(q.get('consumer'));
      const letters = await options.inbox.deadLetters({ limit: Math.min(MAX_PAGE, positive(q.get('limit')) ?? 50), ...(consumer !== undefined && { consumer }) });
      return new Answer(200, {
        deadLetters: letters.map((letter) => ({
          consumer: letter.consumer,
          messageId: letter.messageId,
          attempts: letter.attempts,
          error: letter.error ?? null,
          deadLetteredAt: letter.deadLetteredAt === undefined ? null : new Date(letter.deadLetteredAt).toISOString(),
          redriveRequestedAt: letter.redriveRequestedAt === undefined ? null : new Date(letter.redriveRequestedAt).toISOString(),
          size: letter.body.byteLength,
        })),
      });
    }
    case '/api/outbox': {
      if (options.outbox === undefined) return problem(501, 'No outbox table in this store');
      const { outbox, db } = options.outbox;
      const [status, letters] = await Promise.all([outbox.status(db), outbox.deadLetters(db, 50)]);
      return new Answer(200, {
        status,
        deadLetters: letters.map((letter) => ({
          id: letter.id,
          topic: letter.topic,
          key: letter.key,
          attempts: letter.attempts,
          error: letter.error ?? null,
          deadLetteredAt: new Date(letter.deadLetteredAt).toISOString(),
        })),
      });
    }
    case '/api/sessions': {
      if (options.sessions === undefined) return problem(501, 'No client sessions in this store');
      const limit = Math.min(MAX_PAGE, positive(q.get('limit')) ?? 50);
      const prefix = nonEmpty(q.get('client'));
      const after = q.get('after');
      const sessions = await options.sessions.store.listSessions({
        limit: limit + 1,
        ...(prefix !== undefined && { clientIdPrefix: prefix }),
        ...(after !== null && { after }),
      });
      const page = sessions.slice(0, limit);
      const last = page[page.length - 1];
      return new Answer(200, {
        sessions: page.map((session) => sessionView(session, Date.now())),
        ...(sessions.length > limit && last !== undefined && { next: last.clientId }),
      });
    }
    default:
      return problem(404, 'Not found');
  }
}

async function act(options: ConsoleOptions, path: string, body: Record<string, unknown>): Promise<Answer> {
  switch (path) {
    case '/api/key/release': {
      const { scope, key, leaseToken } = body;
      if (typeof scope !== 'string' || typeof key !== 'string' || typeof leaseToken !== 'string') {
        return problem(400, 'scope, key and leaseToken are required strings');
      }
      // Fenced by the token the operator saw: a record completed or claimed again since stays as it is.
      const released = await options.store.release({ scope, key, leaseToken, fingerprint: '', leaseExpiresAt: 0, takeover: false });
      return released ? new Answer(200, { released: true }) : problem(409, 'Not released', 'the record is no longer in progress under that lease token');
    }
    case '/api/indeterminate/resolve': {
      const answer = await resolveHeld(options.store, body);
      return answer.resolved === undefined ? problem(answer.status, answer.title, answer.detail) : new Answer(200, { resolved: answer.resolved });
    }
    case '/api/inbox/redrive': {
      if (options.inbox === undefined) return problem(501, 'No inbox tables in this store');
      const { consumer, messageId } = body;
      if (typeof consumer !== 'string' || typeof messageId !== 'string') return problem(400, 'consumer and messageId are required strings');
      return (await options.inbox.redrive(consumer, messageId))
        ? new Answer(200, { redriven: true })
        : problem(404, 'No such dead letter', 'the message is not dead-lettered (any more): its redrive is pending already, or it was processed');
    }
    case '/api/outbox/redrive': {
      if (options.outbox === undefined) return problem(501, 'No outbox table in this store');
      const { id } = body;
      if (typeof id !== 'string') return problem(400, 'id is a required string');
      return (await options.outbox.outbox.redrive(options.outbox.db, id)) ? new Answer(200, { redriven: true }) : problem(404, 'No such dead letter', 'the row is not dead-lettered (any more): redriven or reaped meanwhile');
    }
    default:
      return problem(404, 'Not found');
  }
}

function sessionView(session: SessionSummary, now: number): Record<string, unknown> {
  return {
    clientId: session.clientId,
    state: session.state,
    // A live session past its lease is expired in all but name: the next access marks it so.
    leaseEnded: session.state === 'live' && session.leaseExpiresAt <= now,
    lowWaterMark: session.lowWaterMark,
    highestRequestNumber: session.highestRequestNumber ?? null,
    storedResponses: session.storedResponses,
    inProgress: session.inProgress,
    leaseExpiresAt: new Date(session.leaseExpiresAt).toISOString(),
  };
}

async function serveFile(response: ServerResponse, file: URL): Promise<void> {
  const path = fileURLToPath(file);
  const text = await readFile(path);
  response.writeHead(200, { 'content-type': TYPES[path.slice(path.lastIndexOf('.') + 1)] ?? 'application/octet-stream', 'cache-control': 'no-cache' });
  response.end(text);
}

function send(response: ServerResponse, answer: Answer): void {
  const json = answer.status >= 400;
  response.writeHead(answer.status, { 'content-type': json ? 'application/problem+json' : 'application/json', 'cache-control': 'no-store' });
  response.end(JSON.stringify(answer.body));
}

async function readJson(request: IncomingMessage): Promise<Record<string, unknown> | undefined> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of request as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > 64 * 1024) return undefined;
    chunks.push(chunk);
  }
  try {
    const value: unknown = JSON.parse(Buffer.concat(chunks).toString('utf8'));
    return typeof value === 'object' && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

function positive(text: string | null): number | undefined {
  if (text === null || !/^\d+$/.test(text)) return undefined;
  const value = Number(text);
  return value > 0 ? value : undefined;
}

function nonEmpty(text: string | null): string | undefined {
  return text === null || text === '' ? undefined : text;
}
