/**
 * The record value: how one idempotency record is laid out in its etcd key, and how the store reads it
 * back with the key's revisions.
 *
 * @module
 */
import { RESPONSE_NOT_KEPT_HEADER, type IdempotencyRecord, type RecordDraft } from '../../core/record.js';

/** The first byte of every value this store writes; any other is not a record of this layout. */
const FORMAT = 1;

/**
 * The head of a record as JSON, short names to keep each consensus write small: `s` state (1 in progress,
 * 2 completed), `p` fingerprint, `t` lease token, `l` lease end, `c` creation, `e` retention end, `d`
 * completion (completed only), `r` recovery point, `f` fencing token (absent on the claim's own write,
 * whose revision it is), `o` 1 when the claim took the record over, `n` scope, `k` key, `h` status and
 * headers (completed only), `x` the body's length and SHA-256 (hex) when the body is kept in the side
 * store instead of after the head. Times are milliseconds since the epoch.
 */
interface Head {
  readonly s: 1 | 2;
  readonly p: string;
  readonly t: string;
  readonly l: number;
  readonly c: number;
  readonly e: number;
  readonly d?: number;
  readonly r?: string;
  readonly f?: string;
  readonly o?: 1;
  readonly n: string;
  readonly k: string;
  readonly h?: readonly [status: number, headers: Readonly<Record<string, string>>];
  readonly x?: readonly [bytes: number, sha256: string];
}

/** A response body kept in the side store (`responseStore`): its length in bytes and its SHA-256, hex. */
export interface ExternalBody {
  readonly bytes: number;
  readonly sha256: string;
}

/**
 * A record as the store holds it between a read and a write: the record, its fencing token, whether its
 * lease came from a takeover, and the key's `mod_revision` (what a write conditioned on "unchanged since
 * read" compares).
 */
export interface StoredRecord {
  readonly record: IdempotencyRecord;
  /**
   * The fencing token of the claim that holds (or last held) the record: the etcd revision of that claim's
   * write, a decimal string (etcd revisions are 64-bit). For a record created by its claim it is the key's
   * `create_revision`.
   */
  readonly fence: string;
  readonly takeover: boolean;
  readonly modRevision: string;
  /**
   * When the body is in the side store: its length and digest, and the headers as completed (the
   * record's `response` is then the 410 form, without the body and marked with `RESPONSE_NOT_KEPT_HEADER`).
   */
  readonly external?: ExternalBody & { readonly headers: Readonly<Record<string, string>> };
}

/**
 * The value of `record`: the format byte, the head's length (4 bytes, big-endian), the head as JSON, then
 * the body bytes (completed records only). `fence` is left out on the claim's own write (`undefined`): the
 * revision of that write is the token, and the reader takes it from the key's `mod_revision`. With
 * `external`, the body is in the side store and none follows the head.
 */
export function encodeRecord(record: IdempotencyRecord, fence: string | undefined, takeover: boolean, external?: ExternalBody): Buffer {
  const head: Head = {
    s: record.state === 'completed' ? 2 : 1,
    p: record.fingerprint,
    t: record.leaseToken,
    l: record.leaseExpiresAt,
    c: record.createdAt,
    e: record.expiresAt,
    ...(record.completedAt !== undefined && { d: record.completedAt }),
    ...(record.recoveryPoint !== undefined && { r: record.recoveryPoint }),
    ...(fence !== undefined && { f: fence }),
    ...(takeover && { o: 1 as const }),
    n: record.scope,
    k: record.key,
    ...(record.response !== undefined && { h: [record.response.status, record.response.headers] as const }),
    ...(external !== undefined && { x: [external.bytes, external.sha256] as const }),
  };
  const json = Buffer.from(JSON.stringify(head), 'utf8');
  const body = external === undefined ? (record.response?.body ?? new Uint8Array()) : new Uint8Array();
  const value = Buffer.allocUnsafe(5 + json.length + body.byteLength);
  value[0] = FORMAT;
  value.writeUInt32BE(json.length, 1);
  json.copy(value, 5);
  value.set(body, 5 + json.length);
  return value;
}

/**
 * Decodes a value {@link encodeRecord} wrote, read at `modRevision`.
 *
 * @throws Error when `value` is not a record of this layout
 */
export function decodeRecord(value: Buffer, modRevision: string): StoredRecord {
  if (value.length < 5 || value[0] !== FORMAT) throw new Error('retrysafe: the etcd record value is malformed (format byte)');
  const end = 5 + value.readUInt32BE(1);
  if (end > value.length) throw new Error('retrysafe: the etcd record value is malformed (head length)');
  const head = JSON.parse(value.toString('utf8', 5, end)) as Head;
  const record: RecordDraft = {
    scope: head.n,
    key: head.k,
    fingerprint: head.p,
    state: head.s === 2 ? 'completed' : 'in_progress',
    leaseToken: head.t,
    leaseExpiresAt: head.l,
    createdAt: head.c,
    expiresAt: head.e,
  };
  if (head.r !== undefined) record.recoveryPoint = head.r;
  if (head.d !== undefined) record.completedAt = head.d;
  const stored = { record, fence: head.f ?? modRevision, takeover: head.o === 1, modRevision };
  if (head.h === undefined) return stored;
  if (head.x === undefined) {
    record.response = { status: head.h[0], headers: head.h[1], body: Buffer.from(value.subarray(end)) };
    return stored;
  }
  record.response = { status: head.h[0], headers: { ...head.h[1], [RESPONSE_NOT_KEPT_HEADER]: String(head.x[0]) }, body: new Uint8Array(0) };
  return { ...stored, external: { bytes: head.x[0], sha256: head.x[1], headers: head.h[1] } };
}
