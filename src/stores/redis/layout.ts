/**
 * The record value: how one idempotency record is laid out in its Redis string key, and how the store
 * reads it back.
 *
 * @module
 */
import type { IdempotencyRecord } from '../../core/record.js';

/**
 * The record's head, field by field, each with its code in Redis's built-in Lua `struct` library
 * (big-endian): the state byte (1 in progress, 2 completed; any other value is not a record this store
 * wrote); four times as IEEE 754 doubles, in ms since the epoch — the lease end, the creation, the
 * retention end, the completion (0 until completed); the fingerprint and the fencing token; a byte telling
 * whether a recovery point is set (1) or not (0), and the recovery point (empty when not set); the scope
 * and the key. Each text is a 4-byte length and its bytes (`I4c0`). An in-progress record is its head
 * alone. The fields a claim decides by come first, so a script reads only as far as it needs.
 */
export const HEAD_FIELDS = Object.freeze([
  ['state', 'B'],
  ['lease', 'd'],
  ['created', 'd'],
  ['expires', 'd'],
  ['completed', 'd'],
  ['fp', 'I4c0'],
  ['token', 'I4c0'],
  ['has_rp', 'B'],
  ['rp', 'I4c0'],
  ['scope', 'I4c0'],
  ['key', 'I4c0'],
] as const);

/**
 * What follows the head of a completed record, in the same notation: the response status (a double), the
 * response headers as a JSON object (a 4-byte length and UTF-8 text), and the body (a 4-byte length and
 * its raw bytes).
 */
export const TAIL_FORMAT = '>dI4c0I4c0';

/** The state byte of a record in progress. */
const IN_PROGRESS = 1;
/** The state byte of a completed record. */
const COMPLETED = 2;

/** Bytes before the first length-prefixed field: the state byte and four doubles. */
const FIXED_BYTES = 33;

/**
 * The first bytes of a record the listings read (`GETRANGE`) to learn its head: enough for any record whose
 * fingerprint, token, recovery point, scope and key together fit in about 460 bytes; a longer head is read
 * whole.
 */
export const HEAD_READ_BYTES = 512;

/** A record's head: everything but the response. */
export type RecordHead = Omit<IdempotencyRecord, 'completedAt' | 'response'>;

/** Reads a record value field by field; `undefined` from a read means the value ended first. */
class Reader {
  private at = 0;

  constructor(private readonly value: Buffer) {}

  get done(): boolean {
    return this.at === this.value.length;
  }

  byte(): number | undefined {
    if (this.at + 1 > this.value.length) return undefined;
    return this.value[this.at++];
  }

  double(): number | undefined {
    if (this.at + 8 > this.value.length) return undefined;
    const n = this.value.readDoubleBE(this.at);
    this.at += 8;
    return n;
  }

  bytes(): Buffer | undefined {
    if (this.at + 4 > this.value.length) return undefined;
    const length = this.value.readUInt32BE(this.at);
    if (this.at + 4 + length > this.value.length) return undefined;
    this.at += 4 + length;
    return this.value.subarray(this.at - length, this.at);
  }

  text(): string | undefined {
    return this.bytes()?.toString('utf8');
  }
}

/** The error for a value that is not a record this store wrote. */
function malformed(detail: string): Error {
  return new Error(`retrysafe: the Redis record value is malformed: ${detail}`);
}

/** Reads the head from `reader`, or `undefined` when the value ends first. */
function readHead(reader: Reader): { head: RecordHead; completed: boolean; completedAt: number } | undefined {
  const state = reader.byte();
  if (state === undefined) return undefined;
  if (state !== IN_PROGRESS && state !== COMPLETED) throw malformed(`unknown state byte ${state}`);
  const leaseExpiresAt = reader.double();
  const createdAt = reader.double();
  const expiresAt = reader.double();
  const completedAt = reader.double();
  const fingerprint = reader.text();
  const leaseToken = reader.text();
  const hasPoint = reader.byte();
  const point = reader.text();
  const scope = reader.text();
  const key = reader.text();
  if (leaseExpiresAt === undefined || createdAt === undefined || expiresAt === undefined || completedAt === undefined) return undefined;
  if (fingerprint === undefined || leaseToken === undefined || hasPoint === undefined || point === undefined) return undefined;
  if (scope === undefined || key === undefined) return undefined;
  const head: { -readonly [K in keyof RecordHead]: RecordHead[K] } = {
    scope,
    key,
    fingerprint,
    state: state === COMPLETED ? 'completed' : 'in_progress',
    leaseToken,
    leaseExpiresAt,
    createdAt,
    expiresAt,
  };
  if (hasPoint === 1) head.recoveryPoint = point;
  return { head, completed: state === COMPLETED, completedAt };
}

/**
 * Decodes a whole record value ({@link HEAD_FIELDS}, then {@link TAIL_FORMAT} when completed). The body
 * is a copy of its bytes, not a view into `value`.
 *
 * @throws Error when `value` is not exactly one record as the scripts write it
 */
export function decodeRecord(value: Buffer): IdempotencyRecord {
  if (value.length < FIXED_BYTES) throw malformed(`${value.length} bytes`);
  const reader = new Reader(value);
  const read = readHead(reader);
  if (read === undefined) throw malformed('it ends inside the head');
  if (!read.completed) {
    if (!reader.done) throw malformed('bytes after the head of a record in progress');
    return read.head;
  }
  const status = reader.double();
  const headers = reader.text();
  const body = reader.bytes();
  if (status === undefined || headers === undefined || body === undefined) throw malformed('it ends inside the response');
  if (!reader.done) throw malformed('bytes after the response');
  return {
    ...read.head,
    completedAt: read.completedAt,
    response: { status, headers: JSON.parse(headers) as Record<string, string>, body: new Uint8Array(body) },
  };
}

/**
 * Decodes the head of a record from its first bytes (a `GETRANGE` of {@link HEAD_READ_BYTES}, or the whole
 * value): `undefined` when those bytes end before the head does, and the caller reads the value whole.
 *
 * @throws Error when the bytes do not start a record as the scripts write it
 */
export function decodeHead(start: Buffer): RecordHead | undefined {
  return readHead(new Reader(start))?.head;
}
