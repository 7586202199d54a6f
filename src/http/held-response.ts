/**
 * Holding a Node `ServerResponse` back until the receiver has saved it: the Express middleware and the
 * NestJS interceptor (on Express and on Fastify, whose replies end in the same Node response) capture
 * what the handler writes — whether through `writeHead`, `write` or `end` — then send it, or something
 * else in its place, once the idempotency record is settled.
 *
 * @module
 */
import type { OutgoingHttpHeader, OutgoingHttpHeaders, ServerResponse } from 'node:http';
import type { CapturedResponse, OutgoingResponse } from './pipeline.js';

type Callback = (error?: Error | null) => void;

/** The writers a hold replaces on the response object, in the order it replaces them. */
const WRITER_NAMES = ['writeHead', 'flushHeaders', 'write', 'end'] as const;
type WriterName = (typeof WRITER_NAMES)[number];
type Writer = Record<WriterName, (...args: unknown[]) => unknown>;

/** What a hold replaced: the real writers, and which of them were the response's own properties. */
interface Replaced {
  readonly writers: Writer;
  /**
   * Bit `i` set when `WRITER_NAMES[i]` was set on this response object (by an earlier middleware) rather
   * than inherited from its prototype.
   */
  readonly own: number;
  /** Set once the handler has called `end()`: until then it may still write, after an answer went out. */
  ended: boolean;
}

/** The real `writeHead`/`write`/`end`/`flushHeaders` of a response whose output is being held. */
const heldWriters = new WeakMap<ServerResponse, Replaced>();

/**
 * Holds back what is written to `res` from now on and resolves it once `end()` is called: `writeHead`,
 * `write` and `end` are replaced on this response object (writes after `end` are dropped, as Node drops
 * them) until {@link sendHeld} or {@link sendFresh} restores them to send a response.
 */
export function holdResponse(res: ServerResponse): Promise<CapturedResponse> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let ended = false;
    const collect = (chunk: unknown, encoding: unknown): void => {
      if (chunk === undefined || chunk === null || typeof chunk === 'function') return;
      if (typeof chunk === 'string') chunks.push(Buffer.from(chunk, typeof encoding === 'string' ? (encoding as BufferEncoding) : 'utf8'));
      else if (chunk instanceof Uint8Array) chunks.push(Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength));
    };
    const callbackOf = (args: unknown[]): Callback | undefined => {
      const last = args[args.length - 1];
      return typeof last === 'function' ? (last as Callback) : undefined;
    };
    const replaced = replaceWriters(res, {
      writeHead: (status: unknown, ...rest: unknown[]) => {
        // A late second reply (Fastify re-sends when a route's promise settles before the response has ended) must not alter the captured one.
        if (ended) return res;
        res.statusCode = Number(status);
        if (typeof rest[0] === 'string') res.statusMessage = rest.shift() as string;
        applyHeaders(res, rest[0]);
        return res;
      },
      flushHeaders: () => undefined,
      write: (chunk: unknown, ...rest: unknown[]) => {
        if (!ended) collect(chunk, rest[0]);
        const callback = callbackOf(rest);
        if (callback) process.nextTick(callback);
        return true;
      },
      end: (chunk?: unknown, ...rest: unknown[]) => {
        if (ended) return res;
        ended = true;
        replaced.ended = true;
        collect(chunk, rest[0]);
        const callback = typeof chunk === 'function' ? (chunk as Callback) : callbackOf(rest);
        if (callback) res.once('finish', callback);
        resolve({ status: res.statusCode, headers: snapshotHeaders(res.getHeaders()), body: Buffer.concat(chunks) });
        return res;
      },
    });
  });
}

/**
 * Sets `standIns` on `res`, in the order of {@link WRITER_NAMES}, and keeps what they replace for
 * {@link restoreWriters}.
 */
function replaceWriters(res: ServerResponse, standIns: Writer): Replaced {
  const target = res as unknown as Writer;
  const writers = {} as Writer;
  let own = 0;
  for (const [i, name] of WRITER_NAMES.entries()) {
    writers[name] = target[name];
    if (Object.hasOwn(res, name)) own |= 1 << i;
  }
  const replaced: Replaced = { writers, own, ended: false };
  heldWriters.set(res, replaced);
  for (const name of WRITER_NAMES) target[name] = standIns[name];
  return replaced;
}

/** `writeHead`'s headers argument: an object, or a flat `[name, value, name, value, …]` array. */
function applyHeaders(res: ServerResponse, headers: unknown): void {
  if (Array.isArray(headers)) {
    for (let i = 0; i + 1 < headers.length; i += 2) res.setHeader(String(headers[i]), headers[i + 1] as OutgoingHttpHeader);
  } else if (typeof headers === 'object' && headers !== null) {
    for (const [name, value] of Object.entries(headers as OutgoingHttpHeaders)) {
      if (value !== undefined) res.setHeader(name, value);
    }
  }
}

function snapshotHeaders(headers: OutgoingHttpHeaders): Record<string, string> {
  const out: Record<string, string> = {};
  for (const name in headers) {
    const value = headers[name];
    if (value !== undefined) out[name.toLowerCase()] = Array.isArray(value) ? value.join(', ') : String(value);
  }
  return out;
}

/** Sends the handler's held response: its status and headers are still set on `res`. */
export function sendHeld(res: ServerResponse, response: CapturedResponse): void {
  res.statusCode = response.status;
  finish(res, response.body);
}

/**
 * Sends a replay or a problem. Headers set by earlier middleware stay; when the handler did run (its
 * result was fenced off), its headers go, so nothing of an unsaved response leaks into the problem.
 *
 * A handler still running (a lease-lost 409 answered while it works) writes later on a response that has
 * been sent, where Node's `setHeader` throws `ERR_HTTP_HEADERS_SENT` (Express's `res.json` and Nest's reply
 * call it), and that throw would reach the app's error handler. So once the answer is sent, the response's
 * writers and header setters are replaced by ones that drop what they are given: whatever the handler writes
 * from then on goes nowhere and throws nothing.
 */
export function sendFresh(res: ServerResponse, response: OutgoingResponse): void {
  const replaced = heldWriters.get(res);
  if (replaced) for (const name of res.getHeaderNames()) res.removeHeader(name);
  res.statusCode = response.status;
  for (const [name, value] of Object.entries(response.headers)) res.setHeader(name, value);
  finish(res, response.body);
  if (replaced !== undefined && !replaced.ended) dropLateWrites(res);
}

/**
 * Lets go of the hold on `res` when the outcome failed after the handler ran (the pipeline rejected), so
 * the error answer written next (by the app's error handler) leaves: the real writers are back, and the
 * status (back to 200) and every header set so far (the handler's among them) are gone, so nothing of the
 * handler's response leaks into the error answer. A handler that has not ended its response yet may still
 * write: the first response ended from then on is the one sent, and whatever is written after it is
 * dropped, as after {@link sendFresh}. Nothing when `res` is not held.
 */
export function releaseHeld(res: ServerResponse): void {
  const replaced = heldWriters.get(res);
  if (replaced === undefined) return;
  heldWriters.delete(res);
  restoreWriters(res, replaced);
  for (const name of res.getHeaderNames()) res.removeHeader(name);
  res.statusCode = 200;
  if (replaced.ended) return;
  const target = res as unknown as Writer;
  const end = target.end;
  target.end = function endOnce(this: ServerResponse, ...args: unknown[]): ServerResponse {
    end.apply(this, args);
    dropLateWrites(this);
    return this;
  };
}

/** Replaces the writers and header setters of `res`, which has been sent, by ones that drop what they are given. */
function dropLateWrites(res: ServerResponse): void {
  const target = res as unknown as Record<string, unknown>;
  for (const name of LATE_WRITERS) target[name] = name === 'write' ? dropWrite : returnThis;
}

/** What throws, or would write, on a response already sent; dropped on one answered while its handler ran. */
const LATE_WRITERS = [...WRITER_NAMES, 'setHeader', 'setHeaders', 'appendHeader', 'removeHeader'] as const;

function returnThis(this: ServerResponse): ServerResponse {
  return this;
}

/** A dropped `write`: its callback still runs, as a handler waiting on it expects. */
function dropWrite(...args: unknown[]): boolean {
  const last = args[args.length - 1];
  if (typeof last === 'function') process.nextTick(last);
  return true;
}

// Hot path: docs/hot-path.md#express-held-response
/**
 * Puts the real writers back, in the reverse of {@link replaceWriters}'s order. One the response inherited (the usual case: Node's own methods) is restored
 * by deleting the stand-in, last added first, so V8 returns the object to the shape it had before the hold
 * rather than giving it four own properties; one it had of its own (an earlier middleware's) is assigned
 * back.
 */
function restoreWriters(res: ServerResponse, { writers, own }: Replaced): void {
  const target = res as unknown as Partial<Record<WriterName, unknown>>;
  for (let i = WRITER_NAMES.length - 1; i >= 0; i--) {
    const name = WRITER_NAMES[i] as WriterName;
    if (own & (1 << i)) target[name] = writers[name];
    else delete target[name];
  }
}

function finish(res: ServerResponse, body: Uint8Array): void {
  const replaced = heldWriters.get(res);
  if (replaced) {
    heldWriters.delete(res);
    restoreWriters(res, replaced);
  }
  // The body is sent in one piece, so its length is known; a handler's own Content-Length or
  // Transfer-Encoding described its own chunks and may not match what was collected.
  res.removeHeader('transfer-encoding');
  if (res.statusCode === 204 || res.statusCode === 304 || res.statusCode < 200) {
    res.removeHeader('content-length');
    res.end();
    return;
  }
  res.setHeader('content-length', body.byteLength);
  res.end(Buffer.from(body.buffer, body.byteOffset, body.byteLength));
}
