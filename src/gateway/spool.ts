/**
 * The request body, read before the claim: the fingerprint covers the body, and a claim needs its
 * fingerprint, so the whole body is read (and hashed as it arrives) before anything is claimed; only
 * then is it streamed to the upstream. Up to {@link MEMORY_BYTES} it stays in memory, beyond that it is
 * written to a temporary file, so a 50 MB upload costs the gateway 1 MiB of memory. A body over the
 * route's cap is refused (413) as it streams in, before any claim.
 *
 * @module
 */
import { createHash } from 'node:crypto';
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
  /** Deletes the temporary file, if any. */
  dispose(): Promise<void>;
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

/**
 * Reads `request`'s body, at most `limit` bytes.
 *
 * @throws {@link BodyTooLargeError} when Content-Length announces more than `limit` bytes, or the body
 *   grows past it (the rest is drained, so the 413 reaches the client)
 * @throws the stream's error when the client aborts the upload
 */
export async function spoolBody(request: IncomingMessage, limit: number): Promise<SpooledBody> {
  const announced = request.headers['content-length'];
  if (announced !== undefined && Number(announced) > limit) {
    request.resume();
    throw new BodyTooLargeError(limit);
  }
  const hash = createHash('sha256');
  const parts: Buffer[] = [];
  let length = 0;
  let file: SpoolFile | undefined;
  try {
    for await (const chunk of request) {
      const part = chunk as Buffer;
      length += part.byteLength;
      if (length > limit) {
        request.resume();
        throw new BodyTooLargeError(limit);
      }
      hash.update(part);
      if (file === undefined && length <= MEMORY_BYTES) {
        parts.push(part);
        continue;
      }
      if (file === undefined) {
        file = await openSpool();
        for (const held of parts) await write(file.stream, held);
        parts.length = 0;
      }
      await write(file.stream, part);
    }
    if (file !== undefined) await new Promise<void>((resolve, reject) => file?.stream.end((error?: Error | null) => (error ? reject(error) : resolve())));
  } catch (error) {
    if (file !== undefined) await discard(file);
    throw error;
  }
  const digest = hash.digest('hex');
  if (file === undefined) {
    const bytes = Buffer.concat(parts, length);
    return { length, digest, body: () => bytes, dispose: () => Promise.resolve() };
  }
  const spooled = file;
  return { length, digest, body: () => createReadStream(spooled.path), dispose: () => discard(spooled) };
}

async function discard(file: SpoolFile): Promise<void> {
  file.stream.destroy();
  await rm(file.dir, { recursive: true, force: true });
}
