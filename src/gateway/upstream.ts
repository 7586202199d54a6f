/**
 * One upstream: an undici `Pool` (HTTP/1.1, keep-alive connections reused across requests) to one
 * origin, and how a failed exchange is told apart: refused before anything was sent (the key may be
 * released) or broken after the request went out (the outcome is unknown).
 *
 * @module
 */
import type { Readable } from 'node:stream';
import { Pool, type Dispatcher } from 'undici';
import type { IndeterminateCause } from './indeterminate.js';

/** How the gateway talks to an upstream. Durations in milliseconds. */
export interface UpstreamOptions {
  readonly name: string;
  /** Origin of the upstream, e.g. `http://127.0.0.1:5000` (a path, if any, is ignored). */
  readonly url: string;
  /** Most connections the pool opens. */
  readonly connections: number;
  /** Longest wait for a TCP connection; past it nothing was sent, so the key is released. */
  readonly connectTimeoutMs: number;
  /** How long an idle keep-alive connection is kept (the upstream's `Keep-Alive: timeout` wins when shorter). */
  readonly keepAliveMs: number;
  /** Path `readyz` asks with GET (any answer below 500 is ready); without one, readiness opens a connection only. */
  readonly probePath: string | undefined;
}

/** A request for the upstream. */
interface UpstreamRequest {
  readonly method: string;
  /** Path and query, as the client sent them. */
  readonly path: string;
  /** Flat name, value, name, value, … list. */
  readonly headers: string[];
  readonly body: Buffer | Readable | null;
  /** Longest wait for the response headers, and for each gap in the response body. */
  readonly timeoutMs: number;
}

/** Codes of failures that happen before the request is written: nothing reached the upstream. */
const BEFORE_SENDING = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH', 'UND_ERR_CONNECT_TIMEOUT']);
const TIMEOUTS = new Set(['UND_ERR_HEADERS_TIMEOUT', 'UND_ERR_BODY_TIMEOUT']);

function codeOf(error: unknown): string | undefined {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' ? code : undefined;
}

/** `true` when `error` happened before the request was sent (connect refused, unresolvable, connect timeout). */
export function failedBeforeSending(error: unknown): boolean {
  const code = codeOf(error);
  return code !== undefined && BEFORE_SENDING.has(code);
}

/** Why the outcome of an exchange that failed after sending is unknown. */
export function indeterminateCauseOf(error: unknown): IndeterminateCause {
  const code = codeOf(error);
  return code !== undefined && TIMEOUTS.has(code) ? 'upstream-timeout' : 'upstream-reset';
}

/** An upstream the routes send to. */
export class Upstream {
  readonly name: string;
  readonly origin: string;
  readonly probePath: string | undefined;
  private readonly pool: Pool;

  constructor(options: UpstreamOptions) {
    this.name = options.name;
    this.origin = new URL(options.url).origin;
    this.probePath = options.probePath;
    this.pool = new Pool(this.origin, {
      connections: options.connections,
      connectTimeout: options.connectTimeoutMs,
      keepAliveTimeout: options.keepAliveMs,
      keepAliveMaxTimeout: options.keepAliveMs,
      pipelining: 1,
    });
  }

  /**
   * Sends `request` and resolves once the response headers arrived.
   *
   * @throws undici's error: see {@link failedBeforeSending} and {@link indeterminateCauseOf}
   */
  send(request: UpstreamRequest): Promise<Dispatcher.ResponseData> {
    return this.pool.request({
      method: request.method,
      path: request.path,
      headers: request.headers,
      body: request.body,
      headersTimeout: request.timeoutMs,
      bodyTimeout: request.timeoutMs,
    });
  }

  /** A GET of `path` with its whole body, for the reconcile hook. */
  async fetch(path: string, timeoutMs: number): Promise<{ status: number; headers: Dispatcher.ResponseData['headers']; body: Buffer }> {
    const response = await this.pool.request({ method: 'GET', path, headersTimeout: timeoutMs, bodyTimeout: timeoutMs });
    return { status: response.statusCode, headers: response.headers, body: Buffer.from(await response.body.arrayBuffer()) };
  }

  /**
   * Resolves when the upstream answers the probe (GET `probePath` below 500) or, without a probe path,
   * accepts a connection.
   *
   * @throws when it does not
   */
  async probe(timeoutMs: number): Promise<void> {
    const response = await this.pool.request({ method: this.probePath === undefined ? 'OPTIONS' : 'GET', path: this.probePath ?? '/', headersTimeout: timeoutMs, bodyTimeout: timeoutMs });
    await response.body.dump();
    if (this.probePath !== undefined && response.statusCode >= 500) throw new Error(`upstream ${this.name} answered its probe with ${response.statusCode}`);
  }

  /** Closes the pool once its requests are done. */
  close(): Promise<void> {
    return this.pool.close();
  }
}
