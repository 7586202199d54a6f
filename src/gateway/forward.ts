/**
 * One request sent to the upstream under a won claim. A response within the route's `maxResponse` is
 * read whole and held: the client is sent it once its record is saved (as the middleware does), so a
 * gateway killed between the two leaves a client without an answer, whose retry is answered from the
 * record or the reconcile hook, never a client with an answer and a record left in progress. A larger
 * response is streamed to the client from the byte that crossed the cap, and its record is saved without
 * the body (a replay answers 410 `idempotency-response-not-kept`). A failure before anything was sent
 * releases the key; a failure after the request went out holds the record as indeterminate.
 *
 * @module
 */
import type { ServerResponse } from 'node:http';
import { performance } from 'node:perf_hooks';
import type { Readable } from 'node:stream';
import { RESPONSE_NOT_KEPT_HEADER, type Claim, type StoredResponse } from '../core/record.js';
import type { RouteConfig } from './config.js';
import { clientHeaders, replayedHeaders } from './headers.js';
import { type HoldingStore, markFor, type IndeterminateCause } from './indeterminate.js';
import type { GatewayMetrics } from './metrics.js';
import { OutcomeUnknownError, UpstreamUnreachableError } from './problems.js';
import { endUpstreamSpan, startUpstreamSpan } from './tracing.js';
import { failedBeforeSending, indeterminateCauseOf, type Upstream } from './upstream.js';

/** What one forwarded exchange needs. */
export interface Forwarding {
  readonly route: RouteConfig;
  readonly upstream: Upstream;
  readonly store: HoldingStore;
  readonly metrics: GatewayMetrics;
  readonly method: string;
  /** Path and query as the client sent them. */
  readonly path: string;
  readonly headers: string[];
  readonly body: () => Buffer | Readable | null;
  readonly response: ServerResponse;
  /** Set once the upstream answered: its status and the time to its headers (ms). */
  upstreamStatus?: number;
  upstreamMs?: number;
  /** The upstream's response within the cap, as the client is to get it once its record is saved. */
  unsent?: UnsentAnswer;
}

/**
 * A response read whole, not yet sent: the upstream's status, the headers for the client (an object of
 * its own, which the sender completes with the body's length), the body.
 */
export interface UnsentAnswer {
  readonly status: number;
  readonly headers: Record<string, string | string[]>;
  readonly body: Buffer;
}

/**
 * Holds `claim`'s record as indeterminate and returns the error the request fails with (the engine's
 * release that follows is refused by the holding store).
 */
export async function holdIndeterminate(forwarding: Forwarding, claim: Claim, cause: IndeterminateCause): Promise<OutcomeUnknownError> {
  forwarding.metrics.indeterminate.add({ route: forwarding.route.name });
  await forwarding.store.hold(claim, cause, forwarding.route.ttlMs);
  return new OutcomeUnknownError(markFor(cause));
}

/** Writes `chunk`, then waits for the client to drain (or go away) when its buffer is full. */
export function writeChunk(response: ServerResponse, chunk: Buffer): Promise<void> | undefined {
  if (response.destroyed || response.writableEnded || response.write(chunk)) return undefined;
  return new Promise((resolve) => {
    const done = (): void => {
      response.removeListener('drain', done);
      response.removeListener('close', done);
      resolve();
    };
    response.on('drain', done);
    response.on('close', done);
  });
}

/**
 * Sends the request to the upstream and reads its response: held in `forwarding.unsent` within the cap,
 * streamed to the client over it; resolves the response as it is saved for replay.
 *
 * @throws {@link UpstreamUnreachableError} when nothing was sent (the engine releases the key)
 * @throws {@link OutcomeUnknownError} when the exchange failed after sending (the record is held)
 */
export async function forward(forwarding: Forwarding, claim: Claim): Promise<StoredResponse> {
  const { route, upstream, metrics, response } = forwarding;
  const started = performance.now();
  const span = startUpstreamSpan(forwarding.method, upstream.origin, forwarding.path, forwarding.headers);
  let answer;
  try {
    answer = await upstream.send({ method: forwarding.method, path: forwarding.path, headers: forwarding.headers, body: forwarding.body(), timeoutMs: route.timeoutMs });
  } catch (error) {
    endUpstreamSpan(span, undefined, error);
    if (failedBeforeSending(error)) {
      metrics.upstreamFailures.add({ upstream: upstream.name, kind: 'unreachable' });
      throw new UpstreamUnreachableError(error);
    }
    const cause = indeterminateCauseOf(error);
    metrics.upstreamFailures.add({ upstream: upstream.name, kind: cause === 'upstream-timeout' ? 'timeout' : 'reset' });
    throw await holdIndeterminate(forwarding, claim, cause);
  }
  forwarding.upstreamMs = performance.now() - started;
  forwarding.upstreamStatus = answer.statusCode;
  metrics.upstreamLatency.observe(upstream.name, forwarding.upstreamMs / 1000);
  metrics.upstreamResponses.add({ upstream: upstream.name, status: `${Math.floor(answer.statusCode / 100)}xx` });
  const headers = clientHeaders(answer.headers);
  let kept: Kept;
  try {
    kept = await keptWithin(answer.body, route.maxResponseBytes);
    if (kept.over) {
      // Over the cap: the record keeps no body, so nothing is held back from here on.
      response.writeHead(answer.statusCode, headers);
      for (const earlier of kept.parts) {
        const full = writeChunk(response, earlier);
        if (full !== undefined) await full;
      }
      for await (const chunk of answer.body) {
        const part = chunk as Buffer;
        kept.length += part.byteLength;
        const full = writeChunk(response, part);
        if (full !== undefined) await full;
      }
    }
  } catch (error) {
    endUpstreamSpan(span, answer.statusCode, error);
    const cause = indeterminateCauseOf(error);
    metrics.upstreamFailures.add({ upstream: upstream.name, kind: cause === 'upstream-timeout' ? 'timeout' : 'reset' });
    throw await holdIndeterminate(forwarding, claim, cause);
  }
  endUpstreamSpan(span, answer.statusCode);
  const saved = replayedHeaders(headers, route.replayHeaders);
  if (!kept.over) {
    const body = Buffer.concat(kept.parts, kept.length);
    forwarding.unsent = { status: answer.statusCode, headers, body };
    return { status: answer.statusCode, headers: saved, body };
  }
  response.end();
  saved[RESPONSE_NOT_KEPT_HEADER] = String(kept.length);
  return { status: answer.statusCode, headers: saved, body: new Uint8Array(0) };
}

/** The start of a response body: its chunks up to the one that crossed the cap (if one did), and their length. */
interface Kept {
  readonly parts: Buffer[];
  length: number;
  /** Whether the body is longer than the cap (the stream is then paused after the chunk that crossed it). */
  readonly over: boolean;
}

// Hot path: docs/hot-path.md#gateway-request
/**
 * Reads `body` through `data`/`end` listeners until it ends, or until a chunk takes it past `cap` bytes
 * (then it is paused there, for the caller to stream the rest). Rejects with the stream's error, or when
 * it closes before its end.
 */
function keptWithin(body: Readable, cap: number): Promise<Kept> {
  return new Promise((resolve, reject) => {
    const parts: Buffer[] = [];
    let length = 0;
    const stop = (): void => {
      body.removeListener('data', onData);
      body.removeListener('end', onEnd);
      body.removeListener('error', onError);
      body.removeListener('close', onClose);
    };
    const onData = (chunk: Buffer): void => {
      parts.push(chunk);
      length += chunk.byteLength;
      if (length <= cap) return;
      stop();
      body.pause();
      resolve({ parts, length, over: true });
    };
    const onEnd = (): void => {
      stop();
      resolve({ parts, length, over: false });
    };
    const onError = (error: Error): void => {
      stop();
      reject(error);
    };
    const onClose = (): void => {
      stop();
      reject(new Error('the upstream response closed before its end'));
    };
    body.on('data', onData);
    body.on('end', onEnd);
    body.on('error', onError);
    body.on('close', onClose);
  });
}
