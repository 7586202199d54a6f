/**
 * Reading a record hash back: the fields the scripts write, read by position and decoded into an
 * {@link IdempotencyRecord}.
 *
 * @module
 */
import type { IdempotencyRecord, RecordState } from '../../core/record.js';

/**
 * Where each field of a record lives in the record hash: the record's field name (as in
 * {@link IdempotencyRecord}, the one name TypeScript uses) and the shorter field name the scripts write in
 * Redis. The order is the order every read asks for them (`HMGET`, and the claim script's packed reply) and
 * {@link decodeRecord} reads them. Times are in ms since the epoch; `recoveryPoint` is present once a
 * checkpoint set one; `completedAt`, `status`, `headers` (a JSON object) and `body` (raw bytes) once
 * completed.
 */
const HASH_FIELD = {
  scope: 'scope',
  key: 'key',
  fingerprint: 'fp',
  state: 'state',
  leaseToken: 'token',
  leaseExpiresAt: 'lease',
  createdAt: 'created',
  expiresAt: 'expires',
  recoveryPoint: 'rp',
  completedAt: 'completed',
  status: 'status',
  headers: 'headers',
  body: 'body',
} as const;

/** One field of a record, by the record's name for it. */
type RecordField = keyof typeof HASH_FIELD;

/** One field of the record hash, by its name in Redis. */
export type HashField = (typeof HASH_FIELD)[RecordField];

/** The hash's field names in read order: the arguments of every `HMGET` of a record. */
export const HASH_FIELDS: readonly HashField[] = Object.freeze(Object.values(HASH_FIELD));

/** The values of {@link HASH_FIELDS}, position for position; `null` (or `undefined`) for a field the hash lacks. */
type RecordValues = readonly (Buffer | null | undefined)[];

/** Position of each field in {@link HASH_FIELDS}. */
const AT = Object.freeze(Object.fromEntries(Object.keys(HASH_FIELD).map((field, i) => [field, i])) as Record<RecordField, number>);

/** 1-based position of `field` in {@link HASH_FIELDS}, as Lua indexes the `HMGET` reply. */
export function luaIndex(field: RecordField): number {
  return AT[field] + 1;
}

/**
 * Decodes the values of {@link HASH_FIELDS} (an `HMGET` reply, or the claim script's packed reply after
 * {@link unpackValues}) into a record, or `undefined` when the hash does not exist (every value absent).
 *
 * @throws Error when the hash lacks a field or holds an unknown state (not a record this store wrote)
 */
export function decodeRecord(values: RecordValues): IdempotencyRecord | undefined {
  const state = values[AT.state];
  if (state == null && values.every((value) => value == null)) return undefined;
  const kind = text(values, 'state');
  if (kind !== 'in_progress' && kind !== 'completed') {
    throw new Error(`retrysafe: Redis record hash holds the unknown state ${JSON.stringify(kind)}`);
  }
  const record: { -readonly [K in keyof IdempotencyRecord]: IdempotencyRecord[K] } = {
    scope: text(values, 'scope'),
    key: text(values, 'key'),
    fingerprint: text(values, 'fingerprint'),
    state: kind satisfies RecordState,
    leaseToken: text(values, 'leaseToken'),
    leaseExpiresAt: Number(text(values, 'leaseExpiresAt')),
    createdAt: Number(text(values, 'createdAt')),
    expiresAt: Number(text(values, 'expiresAt')),
  };
  const recoveryPoint = values[AT.recoveryPoint];
  if (recoveryPoint != null) record.recoveryPoint = recoveryPoint.toString('utf8');
  if (kind === 'in_progress') return record;
  record.completedAt = Number(text(values, 'completedAt'));
  record.response = {
    status: Number(text(values, 'status')),
    headers: JSON.parse(text(values, 'headers')) as Record<string, string>,
    body: new Uint8Array(present(values, 'body')),
  };
  return record;
}

/** MessagePack's `false`: a field the hash lacks (Lua reads a missing `HMGET` field as `false`). */
const FALSE = 0xc2;

/**
 * Bytes of the length that follows each MessagePack string type byte (str8, str16, str32; an older
 * `cmsgpack`, without str8, wrote str16 for 32 to 255 bytes). A fixstr (0xa0–0xbf) carries its length in the type
 * byte itself.
 */
const LENGTH_BYTES: Readonly<Record<number, number>> = { 0xd9: 1, 0xda: 2, 0xdb: 4 };

/**
 * Splits the claim script's packed reply — one MessagePack array (the MessagePack specification,
 * msgpack.org) as Redis's built-in `cmsgpack.pack` writes it, one item per field of {@link HASH_FIELDS}: a
 * string, or `false` for a field the hash lacks — back into the values {@link decodeRecord} reads. The
 * values are views into `packed`, not copies. Only what `cmsgpack` writes for such a table is read: a
 * fixarray or array16 header, strings of any length, and `false`.
 *
 * @throws Error when `packed` is not exactly one such array (the message gives the offending byte)
 */
export function unpackValues(packed: Buffer): (Buffer | null)[] {
  let at = 0;
  /** The error for the item or header that starts at `start`. */
  const malformed = (start: number): Error => new Error(`retrysafe: malformed packed Redis reply at byte ${start}`);
  /** The next `width`-byte big-endian unsigned integer. */
  const next = (width: number): number => {
    if (at + width > packed.length) throw malformed(at);
    const value = packed.readUIntBE(at, width);
    at += width;
    return value;
  };
  const head = next(1);
  if (head !== 0xdc && (head < 0x90 || head > 0x9f)) throw malformed(0);
  const count = head === 0xdc ? next(2) : head - 0x90;
  const items: (Buffer | null)[] = [];
  for (let i = 0; i < count; i++) {
    const start = at;
    const type = next(1);
    if (type === FALSE) {
      items.push(null);
      continue;
    }
    const width = LENGTH_BYTES[type];
    if (width === undefined && (type < 0xa0 || type > 0xbf)) throw malformed(start);
    const length = width === undefined ? type - 0xa0 : next(width);
    if (at + length > packed.length) throw malformed(at);
    items.push(packed.subarray(at, at + length));
    at += length;
  }
  if (at !== packed.length) throw malformed(at);
  return items;
}

function present(values: RecordValues, field: RecordField): Buffer {
  const value = values[AT[field]];
  if (value == null) throw new Error(`retrysafe: Redis record hash lacks the field "${HASH_FIELD[field]}"`);
  return value;
}

function text(values: RecordValues, field: RecordField): string {
  return present(values, field).toString('utf8');
}
