/**
 * What the HTTP adapter tests share: a neutral handler/request/response shape that each framework driver
 * translates, a supertest client over a listening server, and a store wrapper that counts claims and
 * injects faults.
 */
import type { Server } from 'node:http';
import request from 'supertest';
import type { IdempotencyContext, IdempotencyOptions } from '../../src/http/pipeline.js';
import type { IdempotencyStore } from '../../src/core/store.js';

/** What the test handler sees of a request. */
export interface HandlerInput {
  readonly method: string;
  readonly path: string;
  readonly idempotency: IdempotencyContext<unknown> | undefined;
}

/** What the test handler answers; the driver sends it with the framework's own API. */
export interface HandlerReply {
  readonly status: number;
  readonly headers?: Readonly<Record<string, string | readonly string[]>>;
  readonly body?: string | Uint8Array;
  /** Sent instead of `body` as a streamed response, chunk by chunk, with the framework's streaming API. */
  readonly chunks?: readonly Uint8Array[];
}

/** A handler; a rejection is an exception in the framework handler. */
export type TestHandler = (input: HandlerInput) => Promise<HandlerReply>;

export interface TestRequest {
  readonly method: string;
  readonly path: string;
  readonly headers?: Readonly<Record<string, string>>;
  readonly body?: string | Uint8Array;
  /**
   * Milliseconds after which a client over a socket gives up on the answer and closes its connection (the
   * request then rejects), so a server that never answers fails a test quickly. The in-process clients
   * (Fastify's `inject`, Hono's `app.request`) ignore it. @defaultValue no limit
   */
  readonly timeoutMs?: number;
}

export interface TestResponse {
  readonly status: number;
  /** A response header (lower-case name), several values joined with `, `. */
  header(name: string): string | undefined;
  readonly cookies: readonly string[];
  readonly body: Buffer;
}

export interface TestClient {
  request(request: TestRequest): Promise<TestResponse>;
  close(): Promise<void>;
}

/** Adapter options as the shared scenarios give them; the driver adds `scope` from the `x-tenant` header. */
export type ScenarioOptions = Omit<IdempotencyOptions<unknown, unknown>, 'scope' | 'route'>;

/** One framework: builds an app with the middleware in front of `handler`, and a client for it. */
export interface Driver {
  readonly name: string;
  /** Whether the driver can tell a thrown handler from a returned 5xx (Express cannot). */
  readonly detectsThrows: boolean;
  start(options: ScenarioOptions, handler: TestHandler): Promise<TestClient>;
}

/** An {@link IdempotencyStore} wrapper that counts claims and can make them fail. */
export interface InstrumentedStore extends IdempotencyStore {
  /** How many claims were attempted. */
  readonly claims: number;
  /** When `true`, `claim` rejects as an unreachable backend would. */
  failClaims: boolean;
  /** Resolves once `n` claims have been attempted. */
  claimed(n: number): Promise<void>;
}

export function instrument(store: IdempotencyStore): InstrumentedStore {
  let claims = 0;
  const waiters: { n: number; resolve: () => void }[] = [];
  const wrapped: InstrumentedStore = {
    get claims() {
      return claims;
    },
    failClaims: false,
    claimed(n) {
      if (claims >= n) return Promise.resolve();
      return new Promise((resolve) => waiters.push({ n, resolve }));
    },
    async claim(input) {
      claims++;
      for (const waiter of waiters.filter((w) => w.n <= claims)) {
        waiters.splice(waiters.indexOf(waiter), 1);
        waiter.resolve();
      }
      if (wrapped.failClaims) throw new Error('ECONNREFUSED (injected)');
      return store.claim(input);
    },
    complete: (claim, response, retentionMs) => store.complete(claim, response, retentionMs),
    release: (claim) => store.release(claim),
    renew: (claim, leaseMs) => store.renew(claim, leaseMs),
    get: (scope, key) => store.get(scope, key),
    reap: (limit) => store.reap(limit),
    close: () => store.close(),
    ...(store.waitFor && { waitFor: store.waitFor.bind(store) }),
    ...(store.kind !== undefined && { kind: store.kind }),
  };
  return wrapped;
}

/** A promise with its resolver, to hold a handler until the test lets it go. */
export function gate(): { readonly promise: Promise<void>; open(): void } {
  let open!: () => void;
  const promise = new Promise<void>((resolve) => (open = resolve));
  return { promise, open };
}

/** Header values of a reply as the frameworks' `setHeader`/`append` take them. */
export function headerEntries(reply: HandlerReply): [string, string | string[]][] {
  return Object.entries(reply.headers ?? {}).map(([name, value]) => [name, typeof value === 'string' ? value : [...value]]);
}

/** A supertest client over `server`, already listening, reading raw body bytes; `close` shuts the server down. */
export function serverClient(server: Server, close: () => Promise<void>): TestClient {
  return {
    async request(req: TestRequest): Promise<TestResponse> {
      const agent = request(server) as unknown as Record<string, (path: string) => request.Test>;
      const method = agent[req.method.toLowerCase()];
      if (!method) throw new Error(`no supertest method for ${req.method}`);
      let test = method(req.path);
      for (const [name, value] of Object.entries(req.headers ?? {})) test = test.set(name, value);
      if (req.body !== undefined) test = test.send(typeof req.body === 'string' ? req.body : Buffer.from(req.body));
      if (req.timeoutMs !== undefined) test = test.timeout(req.timeoutMs);
      const res = await test.buffer(true).parse((incoming, callback) => {
        const chunks: Buffer[] = [];
        incoming.on('data', (chunk: Buffer) => chunks.push(chunk));
        incoming.on('end', () => callback(null, Buffer.concat(chunks)));
      });
      const headers = res.headers as Record<string, string | string[] | undefined>;
      return {
        status: res.status,
        header: (name) => {
          const value = headers[name];
          return Array.isArray(value) ? value.join(', ') : value;
        },
        cookies: [headers['set-cookie'] ?? []].flat(),
        body: Buffer.isBuffer(res.body) ? res.body : Buffer.alloc(0),
      };
    },
    close,
  };
}
