/**
 * The runtime SQL of the SQLite store, prepared once per store, and the mapping of rows to records.
 * Parameters are named (`@now`, `@scope` …); every time is integer milliseconds since the epoch.
 *
 * @module
 */
import type { Database, Statement } from 'better-sqlite3';
import type { IdempotencyRecord, RecordDraft } from '../../core/record.js';
import { quoteIdentifier } from './open.js';

// Hot path: docs/hot-path.md#sqlite-statements
/**
 * The select list of a record without its (scope, key): the columns of the record table in the order of
 * {@link FieldValues}. With {@link RECORD_COLUMNS}, the one place the table's column names meet the record's
 * fields; every statement reads a record through one of the two, in raw mode (an array per row: building
 * an object with named properties for each row cost the driver more than the read itself, and each column
 * costs the driver a property store, so a read by primary key does not read back the key it was given).
 */
const FIELD_COLUMNS =
  'fingerprint, state, lease_token, lease_expires_at, recovery_point, response_status, response_headers, response_body, ' +
  'created_at, completed_at, expires_at, replay';

/** The select list of a record with its (scope, key), in the order of {@link RecordValues}. */
const RECORD_COLUMNS = `scope, idempotency_key, ${FIELD_COLUMNS}`;

/** A row of {@link FIELD_COLUMNS} as the driver returns it in raw mode. */
type FieldValues = readonly [
  fingerprint: string,
  state: 'in_progress' | 'completed',
  leaseToken: string,
  leaseExpiresAt: number,
  recoveryPoint: string | null,
  status: number | null,
  headers: string | null,
  body: Buffer | null,
  createdAt: number,
  completedAt: number | null,
  expiresAt: number,
  replay: string | null,
];

/** A row of {@link RECORD_COLUMNS} as the driver returns it in raw mode: the scope, the key, then {@link FieldValues}. */
type RecordValues = readonly [scope: string, key: string, ...fields: FieldValues];

/**
 * A record as {@link RECORD_COLUMNS} reads it; `headers` is JSON text. A record completed since schema step
 * 4 has its status, headers and completion time in `replay` only (see {@link toRecord}).
 */
export interface RecordRow {
  readonly scope: string;
  readonly key: string;
  readonly fingerprint: string;
  readonly state: 'in_progress' | 'completed';
  readonly leaseToken: string;
  readonly leaseExpiresAt: number;
  readonly recoveryPoint: string | null;
  readonly status: number | null;
  readonly headers: string | null;
  readonly body: Buffer | null;
  readonly createdAt: number;
  readonly completedAt: number | null;
  readonly expiresAt: number;
  readonly replay: string | null;
}

/** The prepared statements of one store. */
export interface Statements {
  /** Reads the record of (scope, key), if any. */
  readonly get: (scope: string, key: string) => RecordRow | undefined;
  /**
   * Reads the record of (scope, key) from its replay text and body (schema step 4): the completed
   * record; `null` when the record has no replay text (in progress, or completed before step 4: read it
   * with {@link Statements.get}); `undefined` when there is no record.
   */
  readonly replay: (scope: string, key: string) => IdempotencyRecord | null | undefined;
  /**
   * Completes the caller's in_progress record, fenced on its lease token. Returns whether it did (one row
   * changed). Parameters bound by position (cheaper than by name): see {@link CompleteParams}.
   */
  readonly complete: (params: CompleteParams) => boolean;
  /** Deletes the caller's in_progress record, fenced on its lease token. Parameters: scope, key, token. */
  readonly release: Statement<[string, string, string]>;
  /**
   * Deletes at most @limit records whose retention ended at @now, sparing any still under a live lease.
   * Parameters: @now, @limit.
   */
  readonly reap: Statement<[{ now: number; limit: number }]>;
  /**
   * Records a recovery point and renews the lease of the caller's in_progress record, fenced on its lease
   * token; stretches the retention to cover the new lease. Parameters: @scope, @key, @token, @point,
   * @leaseExpiresAt.
   */
  readonly checkpoint: Statement<[CheckpointParams]>;
  /**
   * Renews the lease of the caller's in_progress record, fenced on its lease token, keeping its recovery
   * point; stretches the retention to cover the new lease. Parameters: @scope, @key, @token, @leaseExpiresAt.
   */
  readonly renew: Statement<[RenewParams]>;
  /**
   * Whether the record of (scope, key) is completed under the token: a completion run again. Parameters:
   * scope, key, token. A row when it is.
   */
  readonly completedBy: Statement<[string, string, string], unknown>;
  /**
   * At most @limit in_progress records with a recovery point whose lease ended by @now and whose retention
   * has not, oldest lease expiry first. Parameters: @now, @limit.
   */
  readonly listAbandoned: (params: { now: number; limit: number }) => RecordRow[];
  /**
   * How many in_progress records (at most @limit) have a lease that ended by @now and a retention that
   * has not. Parameters: @now, @limit. Returns one row `{ n }`.
   */
  readonly countExpiredLeases: Statement<[{ now: number; limit: number }], { n: number }>;
  /**
   * One page of records in primary-key (scope, key) order, each filter skipped when its parameter is null.
   * Parameters: @state, @scope, @prefix (key prefix), @afterScope and @afterKey (start after), @limit.
   */
  readonly listRecords: (params: ListRecordsParams) => RecordRow[];
}

interface ListRecordsParams {
  state: string | null;
  scope: string | null;
  prefix: string | null;
  afterScope: string | null;
  afterKey: string | null;
  limit: number;
}

interface RenewParams {
  scope: string;
  key: string;
  token: string;
  leaseExpiresAt: number;
}

interface CheckpointParams {
  scope: string;
  key: string;
  token: string;
  point: string;
  leaseExpiresAt: number;
}

/** What {@link Statements.complete} writes: `headers` is JSON text, `body` the BLOB, times in ms. */
interface CompleteParams {
  scope: string;
  key: string;
  token: string;
  status: number;
  headers: string;
  body: Buffer;
  now: number;
  expiresAt: number;
}

/** Prepares the statements against `table` (already validated and migrated). */
export function prepareStatements(database: Database, table: string): Statements {
  const t = quoteIdentifier(table);
  // Integers stay numbers even on a connection that defaults to BigInt.
  const prepare = <P extends unknown[], R>(sql: string): Statement<P, R> =>
    (database.prepare<P, R>(sql) as Statement<P, R>).safeIntegers(false);
  const records = <P extends unknown[]>(sql: string): Statement<P, RecordValues> => prepare<P, RecordValues>(sql).raw(true);
  const get = prepare<[string, string], FieldValues>(`SELECT ${FIELD_COLUMNS} FROM ${t} WHERE scope = ? AND idempotency_key = ?`).raw(true);
  // Hot path: docs/hot-path.md#sqlite-replay-read
  const replay = prepare<[string, string], [text: string | null, body: Buffer | null]>(
    `SELECT replay, response_body FROM ${t} WHERE scope = ? AND idempotency_key = ?`,
  ).raw(true);
  // The status, headers and completion time go to the replay text only (see replayedRecord): written
  // twice, they cost every completion about 2,000 instructions more.
  const complete = prepare<[Buffer, number, string, string, string, string], unknown>(`
      UPDATE ${t} SET
        state = 'completed',
        response_body = ?,
        expires_at = ?,
        replay = ? || json_array(lease_expires_at, created_at, fingerprint, lease_token, recovery_point)
      WHERE scope = ? AND idempotency_key = ? AND state = 'in_progress' AND lease_token = ?`);
  const listAbandoned = records<[{ now: number; limit: number }]>(`
      SELECT ${RECORD_COLUMNS} FROM ${t}
      WHERE state = 'in_progress' AND recovery_point IS NOT NULL AND lease_expires_at <= @now AND expires_at > @now
      ORDER BY lease_expires_at
      LIMIT @limit`);
  const listRecords = records<[ListRecordsParams]>(`
      SELECT ${RECORD_COLUMNS} FROM ${t}
      WHERE (@state IS NULL OR state = @state)
        AND (@scope IS NULL OR scope = @scope)
        AND (@prefix IS NULL OR substr(idempotency_key, 1, length(@prefix)) = @prefix)
        AND (@afterScope IS NULL OR (scope, idempotency_key) > (@afterScope, @afterKey))
      ORDER BY scope, idempotency_key
      LIMIT @limit`);
  return {
    get: (scope, key) => {
      const values = get.get(scope, key);
      return values && fieldsOf(scope, key, values);
    },
    replay: (scope, key) => {
      const values = replay.get(scope, key);
      if (values === undefined) return undefined;
      return values[0] === null ? null : replayedRecord(scope, key, values[0], values[1]);
    },
    complete: (p) =>
      complete.run(p.body, p.expiresAt, `${p.status},${p.now},${p.expiresAt},${p.headers.length},${p.headers}`, p.scope, p.key, p.token).changes > 0,
    listAbandoned: (params) => listAbandoned.all(params).map(rowOf),
    listRecords: (params) => listRecords.all(params).map(rowOf),
    release: prepare<[string, string, string], unknown>(
      `DELETE FROM ${t} WHERE scope = ? AND idempotency_key = ? AND state = 'in_progress' AND lease_token = ?`,
    ),
    reap: prepare<[{ now: number; limit: number }], unknown>(`
      DELETE FROM ${t} WHERE rowid IN (
        SELECT rowid FROM ${t}
        WHERE expires_at <= @now AND NOT (state = 'in_progress' AND lease_expires_at > @now)
        LIMIT @limit)`),
    checkpoint: prepare<[CheckpointParams], unknown>(`
      UPDATE ${t} SET
        recovery_point = @point,
        lease_expires_at = @leaseExpiresAt,
        expires_at = MAX(expires_at, @leaseExpiresAt)
      WHERE scope = @scope AND idempotency_key = @key AND state = 'in_progress' AND lease_token = @token`),
    renew: prepare<[RenewParams], unknown>(`
      UPDATE ${t} SET
        lease_expires_at = @leaseExpiresAt,
        expires_at = MAX(expires_at, @leaseExpiresAt)
      WHERE scope = @scope AND idempotency_key = @key AND state = 'in_progress' AND lease_token = @token`),
    completedBy: prepare<[string, string, string], unknown>(
      `SELECT 1 FROM ${t} WHERE scope = ? AND idempotency_key = ? AND state = 'completed' AND lease_token = ?`,
    ),
    countExpiredLeases: prepare<[{ now: number; limit: number }], { n: number }>(`
      SELECT count(*) AS n FROM (
        SELECT 1 FROM ${t}
        WHERE state = 'in_progress' AND lease_expires_at <= @now AND expires_at > @now
        LIMIT @limit)`),
  };
}

/** Names the values of a raw record row (lists only: the copy of the fields costs a read nothing). */
function rowOf(v: RecordValues): RecordRow {
  const [scope, key, ...fields] = v;
  return fieldsOf(scope, key, fields);
}

/** The record of (scope, key) with the values `f`. */
function fieldsOf(scope: string, key: string, f: FieldValues): RecordRow {
  return {
    scope,
    key,
    fingerprint: f[0],
    state: f[1],
    leaseToken: f[2],
    leaseExpiresAt: f[3],
    recoveryPoint: f[4],
    status: f[5],
    headers: f[6],
    body: f[7],
    createdAt: f[8],
    completedAt: f[9],
    expiresAt: f[10],
    replay: f[11],
  };
}

/**
 * Turns a row into a record (from its replay text when it has one); the body becomes a plain `Uint8Array` over the bytes the driver copied out of
 * SQLite for this row (a buffer of their own, never a slice of a shared pool), so nothing is copied again.
 */
export function toRecord(row: RecordRow): IdempotencyRecord {
  if (row.replay !== null) return replayedRecord(row.scope, row.key, row.replay, row.body);
  // One object, its optional fields assigned in place: in V8 11 (Node.js 20) conditional spreads send
  // every record down the slow object-cloning path.
  const record: RecordDraft = {
    scope: row.scope,
    key: row.key,
    fingerprint: row.fingerprint,
    state: row.state,
    leaseToken: row.leaseToken,
    leaseExpiresAt: row.leaseExpiresAt,
    createdAt: row.createdAt,
    expiresAt: row.expiresAt,
  };
  if (row.recoveryPoint !== null) record.recoveryPoint = row.recoveryPoint;
  if (row.completedAt !== null) record.completedAt = row.completedAt;
  if (row.state === 'completed' && row.status !== null) {
    record.response = {
      status: row.status,
      headers: headersOf(row.headers ?? '{}'),
      body: row.body === null ? new Uint8Array() : bytesOf(row.body),
    };
  }
  return record;
}

/**
 * The completed record of (scope, key) from its replay text (schema step 4) and body:
 * `<status>,<completed at>,<expires at>,<n>,<headers JSON of n characters>` then SQLite's JSON array
 * `[<lease expiry>,<created at>,"<fingerprint>","<lease token>",<recovery point or null>]`. The array is
 * scanned without a JSON parser when it holds no backslash (its strings then hold no escape, so each ends
 * at the next quote); JSON.parse reads it otherwise.
 */
function replayedRecord(scope: string, key: string, text: string, body: Buffer | null): IdempotencyRecord {
  const c1 = text.indexOf(',');
  const c2 = text.indexOf(',', c1 + 1);
  const c3 = text.indexOf(',', c2 + 1);
  const c4 = text.indexOf(',', c3 + 1);
  const headersEnd = c4 + 1 + numberAt(text, c3 + 1, c4);
  const held = text.slice(headersEnd);
  const record: RecordDraft =
    held.includes('\\') ? heldParsed(scope, key, held) : heldScanned(scope, key, held);
  record.completedAt = numberAt(text, c1 + 1, c2);
  record.expiresAt = numberAt(text, c2 + 1, c3);
  record.response = {
    status: numberAt(text, 0, c1),
    headers: headersOf(text.slice(c4 + 1, headersEnd)),
    body: body === null ? new Uint8Array() : bytesOf(body),
  };
  return record;
}

/** The record fields of a replay text's JSON array `held` that holds no backslash. */
function heldScanned(scope: string, key: string, held: string): RecordDraft {
  const c1 = held.indexOf(',');
  const c2 = held.indexOf(',', c1 + 1);
  const fingerprintEnd = held.indexOf('"', c2 + 2);
  const tokenEnd = held.indexOf('"', fingerprintEnd + 3);
  const record = draft(scope, key, held.slice(c2 + 2, fingerprintEnd), held.slice(fingerprintEnd + 3, tokenEnd), numberAt(held, 1, c1), numberAt(held, c1 + 1, c2));
  // `,null]` or `,"<recovery point>"]`.
  if (held.charCodeAt(tokenEnd + 2) === 34) record.recoveryPoint = held.slice(tokenEnd + 3, held.length - 2);
  return record;
}

/** The record fields of a replay text's JSON array `held`, parsed. */
function heldParsed(scope: string, key: string, held: string): RecordDraft {
  const [leaseExpiresAt, createdAt, fingerprint, leaseToken, recoveryPoint] = JSON.parse(held) as [number, number, string, string, string | null];
  const record = draft(scope, key, fingerprint, leaseToken, leaseExpiresAt, createdAt);
  if (recoveryPoint !== null) record.recoveryPoint = recoveryPoint;
  return record;
}

/** A completed record's fields in the order every record is built in (one object shape); times set after. */
function draft(scope: string, key: string, fingerprint: string, leaseToken: string, leaseExpiresAt: number, createdAt: number): RecordDraft {
  return { scope, key, fingerprint, state: 'completed', leaseToken, leaseExpiresAt, createdAt, expiresAt: 0 };
}

/**
 * The number written at `text[start, end)`: read digit by digit when it is a plain integer below 2^53 (no
 * sign, fraction or exponent; `Number` of a string costs a call into the runtime), by `Number` otherwise.
 */
function numberAt(text: string, start: number, end: number): number {
  if (end - start > 15) return Number(text.slice(start, end));
  let value = 0;
  for (let at = start; at < end; at++) {
    const digit = text.charCodeAt(at) - 48;
    if (digit < 0 || digit > 9) return Number(text.slice(start, end));
    value = value * 10 + digit;
  }
  return end > start ? value : Number(text.slice(start, end));
}

/** The last headers JSON parsed, and what it parsed to (frozen): most responses of a route carry the same. */
let lastHeaders: { readonly text: string; readonly headers: Readonly<Record<string, string>> } = { text: '{}', headers: Object.freeze({}) };

/** The headers object of a stored headers JSON text, frozen; parsed once for a text seen last time too. */
function headersOf(text: string): Readonly<Record<string, string>> {
  if (text === lastHeaders.text) return lastHeaders.headers;
  const headers = Object.freeze(JSON.parse(text) as Record<string, string>);
  lastHeaders = { text, headers };
  return headers;
}

/** A plain `Uint8Array` view of `buffer` when it owns its memory; a copy otherwise. */
function bytesOf(buffer: Buffer): Uint8Array {
  return buffer.byteOffset === 0 && buffer.byteLength === buffer.buffer.byteLength
    ? new Uint8Array(buffer.buffer, 0, buffer.byteLength)
    : new Uint8Array(buffer);
}
