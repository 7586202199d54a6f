/**
 * One request sent to the upstream under a won claim, and its response teed: every byte goes to the
 * client as it arrives, and up to the route's `maxResponse` into the response saved for replay (over it,
 * the record is saved without its body and replays as 410 `idempotency-response-not-kept`). A failure
 * before anything was sent releases the key; a failure after the request went out holds the record as
 * indeterminate.
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
 * Sends the request to the upstream and streams its response to the client; resolves the response as it
 * is saved for replay.
 *
 * @throws {@link UpstreamUnreachableError} when nothing was sent (the engine releases the key)
 * @throws {@link OutcomeUnknownError} when the exchange failed after sending (the record is held)
 */
export async function forward(forwarding: Forwarding, claim: Claim): Promise<StoredResponse> {
  const { route, upstream, metrics, response } = forwarding;
  const started = performance.now();
  let answer;
  try {
    answer = await upstream.send({ method: forwarding.method, path: forwarding.path, headers: forwarding.headers, body: forwarding.body(), timeoutMs: route.timeoutMs });
  } catch (error) {
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
  response.writeHead(answer.statusCode, headers);
  const kept: Buffer[] = [];
  let length = 0;
  try {
    for await (const chunk of answer.body) {
      const part = chunk as Buffer;
      length += part.byteLength;
      if (length <= route.maxResponseBytes) kept.push(part);
      const full = writeChunk(response, part);
      if (full !== undefined) await full;
    }
  } catch (error) {
    const cause = indeterminateCauseOf(error);
    metrics.upstreamFailures.add({ upstream: upstream.name, kind: cause === 'upstream-timeout' ? 'timeout' : 'reset' });
    throw await holdIndeterminate(forwarding, claim, cause);
  }
  response.end();
  const saved = replayedHeaders(headers, route.replayHeaders);
  if (length <= route.maxResponseBytes) return { status: answer.statusCode, headers: saved, body: Buffer.concat(kept, length) };
  saved[RESPONSE_NOT_KEPT_HEADER] = String(length);
  return { status: answer.statusCode, headers: saved, body: new Uint8Array(0) };
}
