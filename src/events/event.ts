/**
 * Events, their appends and their derived ids: what the PostgreSQL and SQLite event stores share.
 *
 * @module
 */
import { createHash } from 'node:crypto';
import { describe, requireNonEmptyString } from '../core/validate.js';
import { EventConflictError, WrongExpectedVersionError } from './errors.js';

/** An event to append: its type and JSON data (and optional JSON metadata). */
export interface EventInput {
  readonly type: string;
  /** Any JSON value. */
  readonly data: unknown;
  /** Any JSON value. @defaultValue null */
  readonly metadata?: unknown;
}

/**
 * The version a stream must be at for an append to apply (optimistic concurrency): `'any'`, `'no_stream'`
 * (no event yet), `'stream_exists'` (at least one), or the version of its last event (from 0).
 */
export type ExpectedVersion = number | 'any' | 'no_stream' | 'stream_exists';

/** Options of `appendOnce`. */
export interface AppendOptions {
  readonly expectedVersion: ExpectedVersion;
  /**
   * The key of the command the events come from; the id of event `i` is derived from (stream, key, `i`), so
   * sending the same append again appends nothing.
   */
  readonly idempotencyKey: string;
}

/** One event of an append's answer. */
export interface AppendedEvent {
  readonly eventId: string;
  /** Position within the stream, from 0. */
  readonly version: number;
  /** Position among all events of the store, increasing with each append (gaps possible). */
  readonly position: number;
  /** `already_appended` when an earlier append with the same key wrote it, with the positions it got then. */
  readonly status: 'appended' | 'already_appended';
}

/** The answer of `appendOnce`: one entry per event, in order. */
export interface AppendResult {
  readonly stream: string;
  readonly events: readonly AppendedEvent[];
}

/** An event as read back. */
export interface RecordedEvent {
  readonly stream: string;
  readonly eventId: string;
  readonly version: number;
  readonly position: number;
  readonly type: string;
  readonly data: unknown;
  readonly metadata: unknown;
  /** When it was appended (ms since the epoch). */
  readonly appendedAt: number;
}

/**
 * An event store whose appends are idempotent: the same append sent twice (the first one's reply lost)
 * writes its events once.
 */
export interface EventStore {
  /**
   * Appends `events` to `stream` atomically, all or none, in one transaction: the same idempotency key
   * again answers `already_appended` for every event, with the positions the first append gave them,
   * whatever the stream's version now (a retry carries a stale `expectedVersion`).
   *
   * @throws {@link EventConflictError} when the key was used on the stream for other events
   * @throws {@link WrongExpectedVersionError} when the stream is not at `expectedVersion`
   * @throws TypeError when an argument is malformed (no events, a type that is not a non-empty string, …)
   */
  appendOnce(stream: string, events: readonly EventInput[], options: AppendOptions): Promise<AppendResult>;
  /** Up to `limit` events of `stream` from version `fromVersion` on, in order. */
  read(stream: string, options?: { readonly fromVersion?: number; readonly limit?: number }): Promise<RecordedEvent[]>;
  /** Releases what the store opened itself (a pool, a file); a caller's connection stays open. */
  close(): Promise<void>;
}

/** Domain separator of event ids, so an id never equals a hash made of the same fields for another purpose. */
const DOMAIN = 'retrysafe/event-id/v1';

/**
 * The id of event `index` of the append under `idempotencyKey` to `stream`: a UUID (RFC 9562 version 8,
 * section 5.8) holding the first 122 bits of the SHA-256 of the length-prefixed fields
 * `retrysafe/event-id/v1`, stream, key and index. The content is left out on purpose: the same key with
 * other content derives the same id, which is how a reused key is caught as a conflict.
 */
export function eventIdOf(stream: string, idempotencyKey: string, index: number): string {
  const hash = createHash('sha256');
  for (const field of [DOMAIN, stream, idempotencyKey, String(index)]) hash.update(`${Buffer.byteLength(field)}:`).update(field);
  const bytes = hash.digest().subarray(0, 16);
  bytes[6] = ((bytes[6] as number) & 0x0f) | 0x80;
  bytes[8] = ((bytes[8] as number) & 0x3f) | 0x80;
  const hex = bytes.toString('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/** JSON with object keys sorted, so content that differs only in key order compares equal. */
function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    const entries = Object.entries(value as Record<string, unknown>).filter(([, v]) => v !== undefined);
    entries.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(',')}}`;
  }
  const text = JSON.stringify(value);
  if (text === undefined) throw new TypeError(`retrysafe: event data and metadata must be JSON values, got ${describe(value)}`);
  return text;
}

/** An event ready to insert: its id, the JSON text of its data and metadata, and the hash of its content. */
interface PreparedEvent {
  readonly eventId: string;
  readonly type: string;
  readonly data: string;
  readonly metadata: string;
  /** SHA-256 (hex) of the type and the canonical JSON of data and metadata. */
  readonly contentHash: string;
}

/**
 * Checks an append's arguments and prepares its events.
 *
 * @throws TypeError naming what is malformed
 */
export function prepareAppend(stream: string, events: readonly EventInput[], options: AppendOptions): PreparedEvent[] {
  requireNonEmptyString('stream', stream);
  if (typeof options !== 'object' || options === null) throw new TypeError(`retrysafe: appendOnce options must be an object, got ${describe(options)}`);
  requireNonEmptyString('idempotencyKey', options.idempotencyKey);
  const expected = options.expectedVersion;
  if (!(expected === 'any' || expected === 'no_stream' || expected === 'stream_exists' || (Number.isSafeInteger(expected) && expected >= 0))) {
    throw new TypeError(`retrysafe: option "expectedVersion" must be a version (an integer from 0), 'any', 'no_stream' or 'stream_exists', got ${describe(expected)}`);
  }
  // Counted apart: narrowing `events` itself with Array.isArray would make its elements `any`.
  const count = Array.isArray(events) ? events.length : 0;
  if (count === 0) throw new TypeError(`retrysafe: appendOnce needs at least one event, got ${describe(events)}`);
  return events.map((event, index) => {
    requireNonEmptyString(`events[${index}].type`, event.type);
    const data = canonicalJson(event.data);
    const metadata = canonicalJson(event.metadata ?? null);
    const contentHash = createHash('sha256').update(`${Buffer.byteLength(event.type)}:${event.type}${data.length}:${data}${metadata}`).digest('hex');
    return { eventId: eventIdOf(stream, options.idempotencyKey, index), type: event.type, data, metadata, contentHash };
  });
}

/** The ids an append looks up: its events', and the one the next index would get (see {@link decideAppend}). */
export function lookupIds(stream: string, prepared: readonly PreparedEvent[], idempotencyKey: string): string[] {
  return [...prepared.map((event) => event.eventId), eventIdOf(stream, idempotencyKey, prepared.length)];
}

/** A stored event as the decision needs it: where it is and what its content hashed to. */
export interface StoredEventHead {
  readonly eventId: string;
  readonly version: number;
  readonly position: number;
  readonly contentHash: string;
}

/**
 * The outcome of an append given what the stream already holds of the append's ids (`existing`) and the
 * version of its last event (`current`, -1 for none) — the lookup covers the prepared ids and the one after
 * them ({@link lookupIds}) — : the earlier append's answer when every id is there
 * with the same content; else the versions to insert at.
 *
 * @throws {@link EventConflictError} when some id is there with other content, or only some ids are (the
 *   earlier append under the key had another number of events)
 * @throws {@link WrongExpectedVersionError} when no id is there and the stream is not at `expected`
 */
export function decideAppend(
  stream: string,
  prepared: readonly PreparedEvent[],
  existing: readonly StoredEventHead[],
  current: number,
  expected: ExpectedVersion,
): { readonly already: AppendResult } | { readonly firstVersion: number } {
  if (existing.length > 0) {
    const byId = new Map(existing.map((head) => [head.eventId, head]));
    // The id after the last one (the lookup includes it): an earlier append under the key had more events.
    const extra = existing.find((head) => !prepared.some((event) => event.eventId === head.eventId));
    if (extra !== undefined) throw new EventConflictError(stream, extra.eventId);
    const events = prepared.map((event) => {
      const head = byId.get(event.eventId);
      if (head === undefined || head.contentHash !== event.contentHash) throw new EventConflictError(stream, event.eventId);
      return { eventId: event.eventId, version: head.version, position: head.position, status: 'already_appended' as const };
    });
    return { already: { stream, events } };
  }
  const fits =
    expected === 'any' ||
    (expected === 'no_stream' && current === -1) ||
    (expected === 'stream_exists' && current >= 0) ||
    expected === current;
  if (!fits) throw new WrongExpectedVersionError(stream, expected, current);
  return { firstVersion: current + 1 };
}
