/**
 * A session as one DynamoDB item, and the steps of the session contract as pure functions on it: the
 * DynamoDB session store (`dynamodb.ts`) reads the item, computes the next one here and writes it back
 * conditioned on the version it read.
 *
 * | attribute | type | holds |
 * |---|---|---|
 * | partition key (`pk`) | S | `session#` + prefix + `#` + client id |
 * | sort key (`sk`), when the table has one | S | `session` |
 * | `clientId` | S | the client id as `register()` handed it out |
 * | `state` | S | `live`, or `expired` for a tombstone |
 * | `leaseExpiresAt` | N | when the session's lease ends (ms since the epoch, by the receivers' clocks) |
 * | `lowWaterMark` | N | the highest low-water mark the client reported |
 * | `version` | N | bumped by every write: the condition of the next one |
 * | `requests` | M | request number → `{ state, token, leaseExpiresAt, response? }`, the requests above the mark |
 * | TTL attribute (`ttl`) | N | seconds since the epoch after which DynamoDB may delete the item |
 *
 * @module
 */
import type { AttributeValue } from '@aws-sdk/client-dynamodb';
import type { Item } from '../stores/dynamodb/layout.js';
import type { BeginInput, BeginResult } from './store.js';

/** One request a session holds. */
interface HeldRequest {
  readonly state: 'in_progress' | 'completed';
  readonly token: string;
  /** When the execution lease ends (ms since the epoch); meaningless once completed. */
  readonly leaseExpiresAt: number;
  readonly response?: string;
}

/** A session as the store reads it from its item. */
export interface SessionItem {
  readonly clientId: string;
  readonly state: 'live' | 'expired';
  readonly leaseExpiresAt: number;
  readonly lowWaterMark: number;
  /** The version the item was read at; a write is conditioned on it. */
  readonly version: number;
  readonly requests: ReadonlyMap<number, HeldRequest>;
}

/** A step's answer, and the session to write (`undefined`: nothing changes). */
export interface Step<R> {
  readonly result: R;
  readonly next: SessionItem | undefined;
}

/** The attribute names of a session item, by role (several are reserved words: always `#` placeholders). */
export const SESSION_ATTRIBUTES = Object.freeze({
  clientId: 'clientId',
  state: 'state',
  leaseExpiresAt: 'leaseExpiresAt',
  lowWaterMark: 'lowWaterMark',
  version: 'version',
  requests: 'requests',
});

const A = SESSION_ATTRIBUTES;

function numberOf(value: AttributeValue | undefined, name: string): number {
  if (value?.N === undefined) throw new Error(`retrysafe: DynamoDB session item without the number attribute "${name}"`);
  return Number(value.N);
}

function textOf(value: AttributeValue | undefined, name: string): string {
  if (value?.S === undefined) throw new Error(`retrysafe: DynamoDB session item without the string attribute "${name}"`);
  return value.S;
}

/** The session an item holds. */
export function decodeSession(item: Item): SessionItem {
  const requests = new Map<number, HeldRequest>();
  for (const [number, value] of Object.entries(item[A.requests]?.M ?? {})) {
    const fields = value.M ?? {};
    const response = fields.response?.S;
    requests.set(Number(number), {
      state: textOf(fields.state, 'requests.state') === 'completed' ? 'completed' : 'in_progress',
      token: textOf(fields.token, 'requests.token'),
      leaseExpiresAt: numberOf(fields.leaseExpiresAt, 'requests.leaseExpiresAt'),
      ...(response !== undefined && { response }),
    });
  }
  return {
    clientId: textOf(item[A.clientId], A.clientId),
    state: textOf(item[A.state], A.state) === 'expired' ? 'expired' : 'live',
    leaseExpiresAt: numberOf(item[A.leaseExpiresAt], A.leaseExpiresAt),
    lowWaterMark: numberOf(item[A.lowWaterMark], A.lowWaterMark),
    version: numberOf(item[A.version], A.version),
    requests,
  };
}

/** The attribute value of one held request. */
function encodeRequest(request: HeldRequest): AttributeValue {
  const fields: Item = { state: { S: request.state }, token: { S: request.token }, leaseExpiresAt: { N: String(request.leaseExpiresAt) } };
  if (request.response !== undefined) fields.response = { S: request.response };
  return { M: fields };
}

/** The attributes of `session` but its key and TTL, at its version. */
export function encodeSession(session: SessionItem): Item {
  const requests: Item = {};
  for (const [number, request] of session.requests) requests[String(number)] = encodeRequest(request);
  return {
    [A.clientId]: { S: session.clientId },
    [A.state]: { S: session.state },
    [A.leaseExpiresAt]: { N: String(session.leaseExpiresAt) },
    [A.lowWaterMark]: { N: String(session.lowWaterMark) },
    [A.version]: { N: String(session.version) },
    [A.requests]: { M: requests },
  };
}

/** A new live session with the lease `leaseExpiresAt`, at version 0. */
export function newSession(clientId: string, leaseExpiresAt: number): SessionItem {
  return { clientId, state: 'live', leaseExpiresAt, lowWaterMark: 0, version: 0, requests: new Map() };
}


/**
 * Refuses an unknown session (`undefined`) or a tombstone; turns a session whose lease ended at or before
 * `now` into a tombstone (its requests dropped), to be written; otherwise `'live'`.
 */
function liveness(session: SessionItem | undefined, now: number): Step<'unknown' | 'expired'> | 'live' {
  if (session === undefined) return { result: 'unknown', next: undefined };
  if (session.state === 'expired') return { result: 'expired', next: undefined };
  if (session.leaseExpiresAt <= now) {
    return { result: 'expired', next: { ...session, state: 'expired', requests: new Map(), version: session.version + 1 } };
  }
  return 'live';
}

/**
 * `session` with its low-water mark raised to `max(stored, lowWaterMark)` (requests at or below it
 * dropped), its lease raised to `max(stored, leaseExpiresAt)`, and `requests` given, at the next version.
 */
function advance(session: SessionItem, lowWaterMark: number, leaseExpiresAt: number, requests = new Map(session.requests)): SessionItem {
  const mark = Math.max(session.lowWaterMark, lowWaterMark);
  for (const number of requests.keys()) if (number <= mark) requests.delete(number);
  return {
    ...session,
    lowWaterMark: mark,
    leaseExpiresAt: Math.max(session.leaseExpiresAt, leaseExpiresAt),
    version: session.version + 1,
    requests,
  };
}

/** The `begin` step of the contract (see `SessionStore`) on the session as read. */
export function beginStep(session: SessionItem | undefined, input: BeginInput): Step<BeginResult> {
  const refused = liveness(session, input.now);
  if (refused !== 'live') return { result: { outcome: refused.result }, next: refused.next };
  const live = session as SessionItem;
  if (input.requestNumber <= live.lowWaterMark) return { result: { outcome: 'stale', lowWaterMark: live.lowWaterMark }, next: undefined };
  const requests = new Map(live.requests);
  const held = requests.get(input.requestNumber);
  let result: BeginResult;
  if (held?.state === 'completed') result = { outcome: 'replay', response: held.response ?? '' };
  else if (held !== undefined && held.leaseExpiresAt > input.now) result = { outcome: 'in_flight' };
  else {
    requests.set(input.requestNumber, { state: 'in_progress', token: input.token, leaseExpiresAt: input.now + input.executionLeaseMs });
    result = { outcome: 'execute', takeover: held !== undefined };
  }
  return { result, next: advance(live, input.lowWaterMark, input.now + input.sessionLeaseMs, requests) };
}

/** The `keepAlive` step of the contract on the session as read. */
export function keepAliveStep(session: SessionItem | undefined, lowWaterMark: number, now: number, leaseMs: number): Step<'ok' | 'unknown' | 'expired'> {
  const refused = liveness(session, now);
  if (refused !== 'live') return refused;
  return { result: 'ok', next: advance(session as SessionItem, lowWaterMark, now + leaseMs) };
}
