/**
 * Reading a record back from its Redis key: the whole value, or the head alone for listings; a retrysafe
 * 0.1.0 record hash (answering `GET` with `WRONGTYPE`) is rewritten as a record value by the read script
 * first.
 *
 * @module
 */
import type { IdempotencyRecord } from '../../core/record.js';
import { decodeHead, decodeRecord, HEAD_READ_BYTES, type RecordHead } from './layout.js';
import { READ } from './store-scripts.js';
import type { RedisTransport } from './transport.js';

/** The record at the Redis key `key`, or `undefined` when there is none. */
export async function readRecord(transport: RedisTransport, key: string): Promise<IdempotencyRecord | undefined> {
  const value = await transport.get(key).catch((error: unknown) => readOldLayout(transport, key, error));
  return value === null ? undefined : decodeRecord(value);
}

/**
 * The head of the record at the Redis key `key` (everything but the response), from its first
 * {@link HEAD_READ_BYTES} bytes, or from the whole value when the head is longer; `undefined` when there
 * is no record. Listings read heads so a walk over many records does not carry their bodies.
 */
export async function readHead(transport: RedisTransport, key: string): Promise<RecordHead | undefined> {
  const start = await transport.getRange(key, 0, HEAD_READ_BYTES - 1).catch((error: unknown) => readOldLayout(transport, key, error));
  // GETRANGE answers an empty string for a missing key.
  if (start === null || start.length === 0) return undefined;
  return decodeHead(start) ?? (await readRecord(transport, key));
}

/** After a read failed with `error`: the record value the read script makes of a 0.1.0 record hash, if that was the cause. */
async function readOldLayout(transport: RedisTransport, key: string, error: unknown): Promise<Buffer | null> {
  if (!(error instanceof Error) || !error.message.startsWith('WRONGTYPE')) throw error;
  return (await READ.run(transport, [key], [])) as Buffer | null;
}
