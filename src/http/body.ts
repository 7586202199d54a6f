/**
 * Reading a request body for the fingerprint, shared by the HTTP adapters:
 * - {@link canonicalBody}: the body a parser mounted before the middleware already read;
 * - {@link readBody}: a body stream read to its end (Hono; Fastify when the payload is not the request);
 * - {@link peekBody}: a Node request (Express, NestJS, Fastify) read without consuming it: its bytes are
 *   pushed back onto the stream with `readable.unshift` (Node's stream API for handing on data a reader
 *   pulled out), so a body parser mounted after the middleware reads the request as if nothing had;
 * - {@link nodeRequestBody}: the one rule of the Express and NestJS adapters, choosing among the three.
 *
 * Each refuses a body over its limit with {@link BodyTooLargeError} (413) before anything is claimed.
 * No module of Node's is imported here: Hono runs elsewhere too (only {@link nodeRequestBody}, which runs on
 * Node alone, uses the global `Buffer`).
 *
 * @module
 */
import { IdempotencyError } from '../core/errors.js';

const encoder = new TextEncoder();

/**
 * The fingerprint body of a request whose raw bytes are gone because a parser consumed them: a Buffer or
 * string body as is, anything else as JSON with object keys sorted (so key order does not change the
 * fingerprint); `undefined` and `null` as the empty body.
 */
export function canonicalBody(body: unknown): Uint8Array | string {
  if (body === undefined || body === null) return '';
  if (body instanceof Uint8Array || typeof body === 'string') return body;
  return JSON.stringify(sortKeys(body)) ?? '';
}

function sortKeys(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(sortKeys);
  if (value === null || typeof value !== 'object' || value instanceof Date) return value;
  const out: Record<string, unknown> = {};
  for (const name of Object.keys(value).sort()) out[name] = sortKeys((value as Record<string, unknown>)[name]);
  return out;
}

/**
 * Thrown by {@link readBody} and {@link peekBody} when a body exceeds its limit (code
 * `idempotency-request-too-large`); the pipeline answers it with a 413 problem before any claim.
 */
export class BodyTooLargeError extends IdempotencyError {
  override readonly name = 'BodyTooLargeError';
  /** HTTP status for error handlers that read `status` (Express) or `statusCode` (Fastify), should one reach them. */
  readonly status = 413;
  readonly statusCode = 413;
  /** Lets Express's and http-errors' handlers show the message. */
  readonly expose = true;
  /** @param limit - the limit in bytes */
  constructor(readonly limit: number) {
    super('idempotency-request-too-large', `The request body is larger than ${limit} bytes.`);
  }
}

/**
 * Reads a request body of at most `limit` bytes: refuses at once when `contentLength` announces more, and
 * stops collecting as soon as the chunks pass it.
 *
 * @param chunks - the body stream (a Node `Readable`, a web `ReadableStream`, …); string chunks are UTF-8
 * @param contentLength - the Content-Length header, if any
 * @throws {@link BodyTooLargeError} when the body is longer than `limit` bytes
 * @throws the stream's own error; `ERR_STREAM_PREMATURE_CLOSE` when a Node stream closes before it ends
 */
export async function readBody(chunks: AsyncIterable<unknown>, limit: number, contentLength?: string | null): Promise<Uint8Array> {
  if (contentLength !== undefined && contentLength !== null && Number(contentLength) > limit) throw new BodyTooLargeError(limit);
  if (isNodeStream(chunks)) return readNodeStream(chunks, limit);
  const parts: Uint8Array[] = [];
  let length = 0;
  for await (const chunk of chunks) {
    const part = typeof chunk === 'string' ? encoder.encode(chunk) : (chunk as Uint8Array);
    length += part.byteLength;
    if (length > limit) throw new BodyTooLargeError(limit);
    parts.push(part);
  }
  return concat(parts, length);
}

/** The part of a Node `Readable` that {@link readBody} and {@link peekBody} use. */
interface NodeStream {
  readonly readableEnded: boolean;
  readonly destroyed: boolean;
  on(event: string, listener: (...args: never[]) => void): unknown;
  removeListener(event: string, listener: (...args: never[]) => void): unknown;
}

/** The part of a Node `IncomingMessage` that {@link peekBody} uses. */
interface NodeRequest extends NodeStream {
  /** `true` once the whole message, body included, has been received (`message.complete`). */
  readonly complete: boolean;
  readonly readableLength: number;
  read(size: number): Uint8Array | string | null;
  unshift(chunk: Uint8Array): void;
  resume(): unknown;
}

function isNodeStream(value: object): value is NodeStream {
  return typeof (value as Partial<NodeStream>).on === 'function' && typeof (value as Partial<NodeStream>).readableEnded === 'boolean';
}

// Hot path: docs/hot-path.md#node-stream-body
/**
 * The body of a Node stream through plain `data`/`end` listeners: an async iterator over a stream costs a
 * promise per chunk and per end. Same outcome as `for await`: an ended stream reads as empty, a destroyed
 * one fails as a premature close.
 */
function readNodeStream(stream: NodeStream, limit: number): Promise<Uint8Array> {
  if (stream.readableEnded) return Promise.resolve(new Uint8Array(0));
  if (stream.destroyed) return Promise.reject(prematureClose());
  const parts: Uint8Array[] = [];
  let length = 0;
  return settleOn(
    stream,
    'data',
    (settle) => (chunk: Uint8Array | string) => {
      const part = typeof chunk === 'string' ? encoder.encode(chunk) : chunk;
      length += part.byteLength;
      // Left flowing without a listener, the rest drains, so the 413 still reaches the client.
      if (length > limit) return settle.fail(new BodyTooLargeError(limit));
      parts.push(part);
    },
    () => concat(parts, length),
  );
}

/**
 * Reads a Node request's body of at most `limit` bytes without consuming it: the bytes are collected in
 * paused mode until the message is complete (or, given its Content-Length, until that many are buffered),
 * then pushed back onto the stream (`readable.unshift`) before its `end` event, so whoever reads the
 * request next — `express.json()`, `express.urlencoded()`, any body parser mounted after the middleware,
 * Fastify's own parser — gets the same bytes, under its own options. Nothing is read when the stream has
 * ended already (a parser consumed it): that reads as empty.
 *
 * @param contentLength - the Content-Length header, if any
 * @throws {@link BodyTooLargeError} (as a rejection) when the body is longer than `limit` bytes; the rest
 *   of the body is then drained, so the 413 still reaches the client
 * @throws the stream's own error; `ERR_STREAM_PREMATURE_CLOSE` when it closes before the message is complete
 */
function peekBody(req: NodeRequest, limit: number, contentLength?: string): Promise<Uint8Array> {
  return new Promise((resolve, reject) => {
    peekBodyThen(req, limit, contentLength, (error, body) => {
      if (error === null) resolve(body);
      else reject(error);
    });
  });
}

/** How {@link peekBodyThen} ends: with an error, or with the body. */
export type PeekCallback = (...result: [error: Error, body: undefined] | [error: null, body: Uint8Array]) => void;

// Hot path: docs/hot-path.md#fastify-body-peek
/**
 * {@link peekBody} for a caller that takes callbacks (Fastify's hooks): `done` is called once, with the
 * error `peekBody` would reject with, or with the body. It costs no promise, and never throws itself.
 */
export function peekBodyThen(req: NodeRequest, limit: number, contentLength: string | undefined, done: PeekCallback): void {
  if (contentLength !== undefined && Number(contentLength) > limit) {
    done(new BodyTooLargeError(limit), undefined);
    return;
  }
  if (contentLength !== undefined && Number(contentLength) === 0) {
    done(null, new Uint8Array(0));
    return;
  }
  // The `request` event is emitted while Node's HTTP parser is still in the packet that carried the
  // headers; one turn later, a body that came in that packet is buffered (the message may not be marked
  // complete yet).
  queueMicrotask(() => {
    peekBuffered(req, limit, contentLength, done);
  });
}

/** The rest of {@link peekBodyThen}, once what came with the headers is buffered. */
function peekBuffered(req: NodeRequest, limit: number, contentLength: string | undefined, done: PeekCallback): void {
  if (req.readableEnded) {
    done(null, new Uint8Array(0));
    return;
  }
  if (req.destroyed) {
    done(prematureClose(), undefined);
    return;
  }
  // An empty body, all received: adding a `readable` listener would read the end and emit `end`, after
  // which a later parser finds a drained stream (body-parser 1 fails it with a 500).
  if (req.complete && req.readableLength === 0) {
    done(null, new Uint8Array(0));
    return;
  }
  const parts: Uint8Array[] = [];
  // All received and buffered (the usual small body): taken at once, without listeners or waiting for a
  // `readable` event. A buffer as long as the Content-Length is the whole body (counted in characters when
  // the stream decodes text, never more than its bytes), though `complete` may not be set yet.
  if (req.complete || (contentLength !== undefined && req.readableLength === Number(contentLength))) {
    const length = readBuffered(req, parts, 0, limit);
    if (length < 0) {
      done(new BodyTooLargeError(limit), undefined);
      return;
    }
    const body = concat(parts, length);
    if (body.byteLength > 0) req.unshift(body);
    done(null, body);
    return;
  }
  let length = 0;
  settleOn(
    req,
    'readable',
    (settle) => () => {
      length = readBuffered(req, parts, length, limit);
      if (length < 0) {
        settle.fail(new BodyTooLargeError(limit));
        req.resume();
        return;
      }
      if (!req.complete) return;
      const body = concat(parts, length);
      settle.done(body);
      if (body.byteLength > 0) req.unshift(body);
    },
    // Not an `IncomingMessage` after all (`complete` never set): the body is read, but cannot be handed on.
    () => concat(parts, length),
  ).then(
    (body) => done(null, body),
    (error: unknown) => done(error as Error, undefined),
  );
}

/**
 * Reads what `req` holds buffered onto `parts`, `length` bytes long so far; returns their new length, or -1
 * once it passes `limit`. Only what is buffered: a read of an empty, ended buffer would emit `end`, after
 * which nothing can be pushed back.
 */
function readBuffered(req: NodeRequest, parts: Uint8Array[], length: number, limit: number): number {
  while (req.readableLength > 0) {
    const chunk = req.read(req.readableLength);
    if (chunk === null) break;
    const part = typeof chunk === 'string' ? encoder.encode(chunk) : chunk;
    length += part.byteLength;
    if (length > limit) return -1;
    parts.push(part);
  }
  return length;
}

/** Ends a {@link settleOn}: removes its listeners, then resolves or rejects. */
interface Settle {
  done(body: Uint8Array): void;
  fail(error: Error): void;
}

/**
 * The listener plumbing of {@link readNodeStream} and {@link peekBody}: listens to `stream` on `event` with
 * the listener `reader` makes, until it settles through its `Settle`, or `end` resolves with `onEnd()`, or
 * `error` rejects with the stream's error, or `close` comes first (a premature close). Each way removes the
 * four listeners first.
 */
function settleOn(
  stream: NodeStream,
  event: 'data' | 'readable',
  reader: (settle: Settle) => (chunk: Uint8Array | string) => void,
  onEnd: () => Uint8Array,
): Promise<Uint8Array> {
  return new Promise((resolve, reject) => {
    const stop = (): void => {
      stream.removeListener(event, onEvent);
      stream.removeListener('end', onEndEvent);
      stream.removeListener('error', onError);
      stream.removeListener('close', onClose);
    };
    const settle: Settle = {
      done(body) {
        stop();
        resolve(body);
      },
      fail(error) {
        stop();
        reject(error);
      },
    };
    const onEvent = reader(settle);
    const onEndEvent = (): void => settle.done(onEnd());
    const onError = (error: Error): void => settle.fail(error);
    const onClose = (): void => settle.fail(prematureClose());
    stream.on(event, onEvent);
    stream.on('end', onEndEvent);
    stream.on('error', onError);
    stream.on('close', onClose);
  });
}

/** The part of an Express or NestJS request that {@link nodeRequestBody} reads and sets. */
interface ParsedNodeRequest {
  readonly headers: {
    readonly 'content-length'?: string | undefined;
    readonly 'content-type'?: string | undefined;
    readonly 'transfer-encoding'?: string | undefined;
  };
  /** What a body parser made of the body; set here when this reads the body itself. */
  body?: unknown;
  /** The raw body bytes, when a parser (`verify`, Nest's `rawBody: true`) or this kept them. */
  rawBody?: Buffer;
}

/**
 * The fingerprint body of a Node request, the one rule of the Express middleware and the NestJS
 * interceptor, in order:
 * 1. a Content-Length over `limit` is refused before anything is read;
 * 2. a body stream no parser read yet is peeked ({@link peekBody}: a parser mounted after the middleware
 *    still reads it, under its own options), kept as `req.rawBody`, and handed on as `req.body`: parsed
 *    JSON for `application/json` and `*+json` (invalid JSON is a `SyntaxError` with status 400, as
 *    `express.json()` answers it), text for `text/*`, else the Buffer;
 * 3. otherwise `req.rawBody` (kept by a parser's `verify`, or by Nest's `rawBody: true`) as is, or else
 *    the parsed `req.body` as {@link canonicalBody} (a parser consumed the stream);
 *    either is refused when longer than `limit` bytes: the limit holds whoever read the body.
 *
 * @param req - the framework's request (its headers, `body`, `rawBody`)
 * @param node - the Node `IncomingMessage` carrying the body: `req` itself on Express, `request.raw` on
 *   Nest's Fastify platform
 * @param limit - the longest body, in bytes
 * @throws {@link BodyTooLargeError} (as a rejection) when the body is longer than `limit` bytes
 * @throws a `SyntaxError` with `status` and `statusCode` 400 when a JSON body it read does not parse
 * @throws the stream's own error; `ERR_STREAM_PREMATURE_CLOSE` when it closes before the message is complete
 */
export async function nodeRequestBody(req: ParsedNodeRequest, node: NodeRequest, limit: number): Promise<Uint8Array | string> {
  const contentLength = req.headers['content-length'];
  if (!(req.rawBody instanceof Uint8Array) && !node.readableEnded && hasBody(req)) {
    // peekBody refuses an announced length over the limit itself.
    const bytes = await peekBody(node, limit, contentLength);
    const raw = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    req.rawBody = raw;
    req.body = parsedBody(req.headers['content-type'], raw);
    return raw;
  }
  if (contentLength !== undefined && Number(contentLength) > limit) throw new BodyTooLargeError(limit);
  const body = req.rawBody instanceof Uint8Array ? req.rawBody : canonicalBody(req.body);
  if ((typeof body === 'string' ? Buffer.byteLength(body) : body.byteLength) > limit) throw new BodyTooLargeError(limit);
  return body;
}

/**
 * Throws when the body {@link nodeRequestBody} pushed back onto `req`'s stream can no longer reach a parser
 * mounted after the middleware: the client left while the request waited (for a claim, say), so Node
 * destroyed the stream with those bytes unread. body-parser 2 then skips the request (`req.body` stays
 * what `nodeRequestBody` set: a Buffer for a form) and body-parser 1 fails it; either way the handler would
 * not see the body the fingerprint hashed. Called before the handler runs; the throw makes the receiver
 * release the claim, so nothing is saved and a retry runs the handler with its body.
 *
 * @throws an `Error` with code `ERR_STREAM_PREMATURE_CLOSE`, as a disconnect while the body is read does
 */
export function requireBodyHandedOn(req: ParsedNodeRequest & NodeStream): void {
  if (req.destroyed && !req.readableEnded && req.rawBody !== undefined && req.rawBody.byteLength > 0) throw prematureClose();
}

/** `req.body` for bytes {@link nodeRequestBody} read itself, by the request's Content-Type. */
function parsedBody(contentType: string | undefined, raw: Buffer): unknown {
  const type = (contentType ?? '').split(';')[0]?.trim().toLowerCase() ?? '';
  if (type === 'application/json' || type.endsWith('+json')) {
    try {
      return raw.byteLength === 0 ? undefined : (JSON.parse(raw.toString('utf8')) as unknown);
    } catch (error) {
      throw Object.assign(new SyntaxError(`Invalid JSON body: ${(error as Error).message}`), { status: 400, statusCode: 400, expose: true });
    }
  }
  if (type.startsWith('text/')) return raw.toString('utf8');
  return raw;
}

/** As the `type-is` package decides: a body is announced by Transfer-Encoding or Content-Length. */
function hasBody(req: { readonly headers: Readonly<Record<string, unknown>> }): boolean {
  return req.headers['transfer-encoding'] !== undefined || req.headers['content-length'] !== undefined;
}

function prematureClose(): Error {
  return Object.assign(new Error('Premature close'), { code: 'ERR_STREAM_PREMATURE_CLOSE' });
}

function concat(parts: readonly Uint8Array[], length: number): Uint8Array {
  if (parts.length === 1 && parts[0]) return parts[0];
  const body = new Uint8Array(length);
  let offset = 0;
  for (const part of parts) {
    body.set(part, offset);
    offset += part.byteLength;
  }
  return body;
}
