/**
 * The request body, read before the claim: the fingerprint covers the body, and a claim needs its
 * fingerprint, so the whole body is read (and hashed as it arrives) before anything is claimed; only
 * then is it streamed to the upstream. Up to {@link MEMORY_BYTES} it stays in memory, beyond that it is
 * written to a temporary file, so a 50 MB upload costs the gateway 1 MiB of memory. A body over the
 * route's cap is refused (413) as it streams in, before any claim.
 *
 * @module
 */
import { createHash, hash, type Hash } from 'node:crypto';
import { createReadStream, createWriteStream, type WriteStream } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import type { IncomingMessage } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import { BodyTooLargeError } from '../http/body.js';

/** Bodies up to this many bytes are kept in memory; longer ones go to a temporary file. */
const MEMORY_BYTES = 1_048_576;

/** A request body read to its end. */
interface SpooledBody {
  /** Its length in bytes. */
  readonly length: number;
  /** Hex SHA-256 of its bytes: what the fingerprint covers in its place. */
  readonly digest: string;
  /** The body for the upstream: the bytes, or a stream of the temporary file. */
  body(): Buffer | Readable;
  /** Deletes the temporary file; `undefined` when there is none (the body is in memory). */
  dispose(): Promise<void> | undefined;
}

/** A body held in memory. */
class MemoryBody implements SpooledBody {
  readonly length: number;
  readonly digest: string;
  constructor(private readonly bytes: Buffer) {
    this.length = bytes.byteLength;
    this.digest = hash('sha256', bytes);
  }

  body(): Buffer {
    return this.bytes;
  }

  dispose(): undefined {
    return undefined;
  }
}

/** Where a long body is written, and the file's first write. */
interface SpoolFile {
  readonly dir: string;
  readonly path: string;
  readonly stream: WriteStream;
}

async function openSpool(): Promise<SpoolFile> {
  const dir = await mkdtemp(join(tmpdir(), 'retrysafe-gateway-'));
  const path = join(dir, 'body');
  return { dir, path, stream: createWriteStream(path) };
}

function write(stream: WriteStream, chunk: Buffer): Promise<void> {
  return new Promise((resolve, reject) => {
    stream.write(chunk, (error) => (error ? reject(error) : resolve()));
  });
}

// Hot path: docs/hot-path.md#gateway-request
/**
 * Reads `request`'s body, at most `limit` bytes. A body received whole by the time it is read (the usual
 * small one, which came in the packets of the headers) is taken from the stream's buffer at once, and
 * the body is returned itself rather than a promise; any other is read as it arrives.
 *
 * @throws {@link BodyTooLargeError} when Content-Length announces more than `limit` bytes, or the body
 *   grows past it (the rest is drained, so the 413 reaches the client); thrown at once, or as the rejection
 * @throws the stream's error when the client aborts the upload (as the rejection)
 */
export function spoolBody(request: IncomingMessage, limit: number): SpooledBody | Promise<SpooledBody> {
  const announced = request.headers['content-length'];
  if (announced !== undefined && Number(announced) > limit) {
    request.resume();
    throw new BodyTooLargeError(limit);
  }
  // The whole body is buffered once the parser saw the message's end (`complete`), or once the buffer holds
  // as many bytes as Content-Length says (the usual small body, which came in the packet of the headers,
  // before the message is marked complete). Within the memory bound it is read in one call, and the
  // stream left flowing to its end.
  const buffered = request.readableLength;
  if ((request.complete || (announced !== undefined && buffered === Number(announced))) && !request.readableEnded && buffered <= MEMORY_BYTES) {
    if (buffered > limit) {
      request.resume();
      throw new BodyTooLargeError(limit);
    }
    const bytes = buffered === 0 ? null : (request.read() as Buffer | null);
    request.resume();
    return new MemoryBody(bytes ?? Buffer.alloc(0));
  }
  return streamBody(request, limit);
}

/** {@link spoolBody} for a body still arriving: in memory up to {@link MEMORY_BYTES}, in a temporary file beyond. */
async function streamBody(request: IncomingMessage, limit: number): Promise<SpooledBody> {
  const parts: Buffer[] = [];
  let length = 0;
  let file: { spool: SpoolFile; hash: Hash } | undefined;
  try {
    for await (const chunk of request) {
      const part = chunk as Buffer;
      length += part.byteLength;
      if (length > limit) {
        request.resume();
        throw new BodyTooLargeError(limit);
      }
      if (file === undefined && length <= MEMORY_BYTES) {
        parts.push(part);
        continue;
      }
      if (file === undefined) {
        file = { spool: await openSpool(), hash: createHash('sha256') };
        for (const held of parts) {
          file.hash.update(held);
          await write(file.spool.stream, held);
        }
        parts.length = 0;
      }
      file.hash.update(part);
      await write(file.spool.stream, part);
    }
    if (file !== undefined) await new Promise<void>((resolve, reject) => file?.spool.stream.end((error?: Error | null) => (error ? reject(error) : resolve())));
  } catch (error) {
    if (file !== undefined) await discard(file.spool);
    throw error;
  }
  if (file === undefined) return new MemoryBody(Buffer.concat(parts, length));
  const spooled = file.spool;
  const digest = file.hash.digest('hex');
  return { length, digest, body: () => createReadStream(spooled.path), dispose: () => discard(spooled) };
}

async function discard(file: SpoolFile): Promise<void> {
  file.stream.destroy();
  await rm(file.dir, { recursive: true, force: true });
}
