/**
 * The record value: how one idempotency record is laid out in its Redis string key, and how the store
 * reads it back.
 *
 * @module
 */
import type { IdempotencyRecord, RecordDraft, StoredResponse } from '../../core/record.js';

/**
 * The record's head, field by field, each with its code in Redis's built-in Lua `struct` library
 * (big-endian): the state byte (1 in progress, 2 completed; any other value is not a record this store
 * wrote); four times as IEEE 754 doubles, in ms since the epoch — the lease end, the creation, the
 * retention end, the completion (until completed: 0, or 1 once a `waitFor` listens for the completion,
 * so the completion script publishes only then); the fingerprint and the fencing token; a byte telling
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

/** How many of the head's fields come before its first length-prefixed one: the state byte and the four times. */
export const FIXED_FIELDS = HEAD_FIELDS.findIndex(([, code]) => code === 'I4c0');

/** Bytes those fields take: a byte (`B`) is 1, a double (`d`) 8. */
export const FIXED_BYTES = HEAD_FIELDS.slice(0, FIXED_FIELDS).reduce((bytes, [, code]) => bytes + (code === 'B' ? 1 : 8), 0);

/**
 * The first bytes of a record the listings read (`GETRANGE`) to learn its head: enough for any record whose
 * fingerprint, token, recovery point, scope and key together fit in about 460 bytes; a longer head is read
 * whole.
 */
export const HEAD_READ_BYTES = 512;

/** A record's head: everything but the response. */
export type RecordHead = Omit<IdempotencyRecord, 'completedAt' | 'response'>;

/**
 * Reads a record value field by field, in place. Once the value ends before a field does, `short` is set
 * and every read after it returns a placeholder (0, `''`), so a caller checks `short` once at the end.
 */
class Reader {
  private at = 0;
  short = false;

  constructor(private readonly value: Buffer) {}

  get done(): boolean {
    return this.at === this.value.length;
  }

  byte(): number {
    if (this.short || this.at + 1 > this.value.length) return this.end(0);
    return this.value[this.at++] ?? 0;
  }

  double(): number {
    if (this.short || this.at + 8 > this.value.length) return this.end(0);
    const n = this.value.readDoubleBE(this.at);
    this.at += 8;
    return n;
  }

  /** The next length-prefixed field as UTF-8 text, decoded straight from the value. */
  text(): string {
    const start = this.field();
    return this.short ? '' : this.value.toString('utf8', start, this.at);
  }

  /** The next length-prefixed field as a copy of its bytes (a small copy shares Node's buffer pool, as `Buffer.from` does). */
  copy(): Buffer {
    const start = this.field();
    return this.short ? Buffer.alloc(0) : Buffer.from(this.value.subarray(start, this.at));
  }

  /** Moves past the next length-prefixed field; returns where its bytes start (they end at `at`). */
  private field(): number {
    if (this.short || this.at + 4 > this.value.length) return this.end(this.at);
    const start = this.at + 4;
    const end = start + this.value.readUInt32BE(this.at);
    if (end > this.value.length) return this.end(start);
    this.at = end;
    return start;
  }

  private end<T>(placeholder: T): T {
    this.short = true;
    return placeholder;
  }
}

/** The error for a value that is not a record this store wrote. */
function malformed(detail: string): Error {
  return new Error(`retrysafe: the Redis record value is malformed: ${detail}`);
}

/** Reads the head from `reader` (check `reader.short` after: the value may end first). */
function readHead(reader: Reader): { head: RecordDraft; completedAt: number } {
  const state = reader.byte();
  if (!reader.short && state !== IN_PROGRESS && state !== COMPLETED) throw malformed(`unknown state byte ${state}`);
  const leaseExpiresAt = reader.double();
  const createdAt = reader.double();
  const expiresAt = reader.double();
  const completedAt = reader.double();
  const fingerprint = reader.text();
  const leaseToken = reader.text();
  const hasPoint = reader.byte();
  const point = reader.text();
  const head: RecordDraft = {
    scope: reader.text(),
    key: reader.text(),
    fingerprint,
    state: state === COMPLETED ? 'completed' : 'in_progress',
    leaseToken,
    leaseExpiresAt,
    createdAt,
    expiresAt,
  };
  if (hasPoint === 1) head.recoveryPoint = point;
  return { head, completedAt };
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
  const { head, completedAt } = readHead(reader);
  if (reader.short) throw malformed('it ends inside the head');
  if (head.state !== 'completed') {
    if (!reader.done) throw malformed('bytes after the head of a record in progress');
    return head;
  }
  const status = reader.double();
  const headers = reader.text();
  const body = reader.copy();
  if (reader.short) throw malformed('it ends inside the response');
  if (!reader.done) throw malformed('bytes after the response');
  // Hot path: docs/hot-path.md#redis-record-layout
  // Fields added in place: spreading the head into a new object cost about 3.5 µs per record here.
  head.completedAt = completedAt;
  head.response = { status, headers: JSON.parse(headers) as Record<string, string>, body };
  return head;
}

/**
 * Decodes the head of a record from its first bytes (a `GETRANGE` of {@link HEAD_READ_BYTES}, or the whole
 * value): `undefined` when those bytes end before the head does, and the caller reads the value whole.
 *
 * @throws Error when the bytes do not start a record as the scripts write it
 */
export function decodeHead(start: Buffer): RecordHead | undefined {
  const reader = new Reader(start);
  const { head } = readHead(reader);
  return reader.short ? undefined : head;
}

// Hot path: docs/hot-path.md#redis-set-claim
/**
 * The value of a new record in progress with `head`'s fields, laid out as the claim script packs one
 * ({@link HEAD_FIELDS}): no recovery point, the completion field 0 (no waiter has marked it yet), the texts
 * as UTF-8. The store's plain `SET` claim writes it (`claim.ts`), so a record it writes is byte for byte
 * the one the claim script writes for a new key at the same times.
 */
export function encodeNewHead(head: Omit<RecordHead, 'state' | 'recoveryPoint'>): Buffer {
  const { fingerprint, leaseToken, scope, key } = head;
  const fpBytes = Buffer.byteLength(fingerprint);
  const tokenBytes = Buffer.byteLength(leaseToken);
  const scopeBytes = Buffer.byteLength(scope);
  const keyBytes = Buffer.byteLength(key);
  // The fixed fields, five 4-byte lengths, the recovery-point flag byte, and the texts.
  const value = Buffer.allocUnsafe(FIXED_BYTES + 21 + fpBytes + tokenBytes + scopeBytes + keyBytes);
  value[0] = IN_PROGRESS;
  value.writeDoubleBE(head.leaseExpiresAt, 1);
  value.writeDoubleBE(head.createdAt, 9);
  value.writeDoubleBE(head.expiresAt, 17);
  value.writeDoubleBE(0, 25);
  let at = writeText(value, FIXED_BYTES, fingerprint, fpBytes);
  at = writeText(value, at, leaseToken, tokenBytes);
  value[at] = 0;
  at = writeText(value, at + 1, '', 0);
  at = writeText(value, at, scope, scopeBytes);
  writeText(value, at, key, keyBytes);
  return value;
}

// Hot path: docs/hot-path.md#redis-completion-script
/**
 * The fingerprint and fencing token of a claim laid out as a record's head holds them, from its first text
 * on: each a 4-byte length and its UTF-8 bytes. The completion script compares them with the record's
 * bytes there rather than unpacking the head.
 */
export function encodeIdentity(fingerprint: string, leaseToken: string): Buffer {
  const fpBytes = Buffer.byteLength(fingerprint);
  const tokenBytes = Buffer.byteLength(leaseToken);
  const identity = Buffer.allocUnsafe(8 + fpBytes + tokenBytes);
  writeText(identity, writeText(identity, 0, fingerprint, fpBytes), leaseToken, tokenBytes);
  return identity;
}

/**
 * The retention end and completion time of a record completed at `now` (ms since the epoch) and retained
 * `retentionMs` after it, as the head holds them: two big-endian doubles, which the completion script
 * writes in place of the head's third and fourth times.
 */
export function encodeCompletionTimes(now: number, retentionMs: number): Buffer {
  const times = Buffer.allocUnsafe(16);
  times.writeDoubleBE(now + retentionMs, 0);
  times.writeDoubleBE(now, 8);
  return times;
}

/** Writes `text` (`bytes` long in UTF-8) at `at` as a length-prefixed field (`I4c0`); returns where the next field starts. */
function writeText(value: Buffer, at: number, text: string, bytes: number): number {
  value.writeUInt32BE(bytes, at);
  value.write(text, at + 4);
  return at + 4 + bytes;
}

// Hot path: docs/hot-path.md#redis-record-layout
/**
 * The tail of a completed record ({@link TAIL_FORMAT}) for `response`: its status, its headers as a JSON
 * object (a 4-byte length and UTF-8 text) and its body (a 4-byte length and its bytes). The completion
 * script appends it to the head as given, so Redis packs no response field.
 */
export function encodeTail(response: StoredResponse): Buffer {
  const headers = JSON.stringify(response.headers);
  const { body } = response;
  const headerBytes = Buffer.byteLength(headers);
  const tail = Buffer.allocUnsafe(16 + headerBytes + body.byteLength);
  tail.writeDoubleBE(response.status, 0);
  tail.writeUInt32BE(headerBytes, 8);
  tail.write(headers, 12);
  tail.writeUInt32BE(body.byteLength, 12 + headerBytes);
  tail.set(body, 16 + headerBytes);
  return tail;
}
