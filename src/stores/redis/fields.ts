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

/** The byte `:` that ends each item's length in a packed reply. */
const COLON = 0x3a;
/** The byte `-` that stands for an absent field in a packed reply. */
const ABSENT = 0x2d;

/**
 * Splits the claim script's packed reply — one item per field of {@link HASH_FIELDS}, written one after
 * another as `<byte length in decimal>:<bytes>`, or `-` for a field the hash lacks — back into the values
 * {@link decodeRecord} reads. The values are views into `packed`, not copies.
 *
 * @throws Error when `packed` is not a whole number of well-formed items
 */
export function unpackValues(packed: Buffer): (Buffer | null)[] {
  const items: (Buffer | null)[] = [];
  let at = 0;
  while (at < packed.length) {
    if (packed[at] === ABSENT) {
      items.push(null);
      at++;
      continue;
    }
    let length = 0;
    let digits = 0;
    for (let byte = packed[at]; byte !== COLON; byte = packed[at]) {
      if (byte === undefined || byte < 0x30 || byte > 0x39 || digits === 15) {
        throw new Error(`retrysafe: malformed packed Redis reply at byte ${at}`);
      }
      length = length * 10 + (byte - 0x30);
      digits++;
      at++;
    }
    const start = at + 1;
    if (digits === 0 || start + length > packed.length) throw new Error(`retrysafe: malformed packed Redis reply at byte ${at}`);
    items.push(packed.subarray(start, start + length));
    at = start + length;
  }
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
