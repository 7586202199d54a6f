/**
 * Reading a record hash back: the field names the scripts write, decoded into an {@link IdempotencyRecord}.
 *
 * @module
 */
import type { IdempotencyRecord, RecordState } from '../../core/record.js';

/**
 * Decodes a flat `HGETALL` reply (`[field, value, …]`, values as Buffers) into a record, or `undefined` for
 * an empty reply (no such key).
 *
 * Fields: `scope`, `key`, `fp`, `state`, `token`, `lease`, `created`, `expires` (times in ms since the
 * epoch), `rp` (the recovery point, once a checkpoint set one), and once completed `completed`, `status`,
 * `headers` (a JSON object) and `body` (raw bytes).
 *
 * @throws Error when the hash lacks a field or holds an unknown state (not a record this store wrote)
 */
export function decodeRecord(reply: readonly Buffer[]): IdempotencyRecord | undefined {
  if (reply.length === 0) return undefined;
  // One pass over the reply into locals: this runs on every replay, and a Map plus closures per call
  // showed up in the replay profile.
  let scope, key, fp, state, token, lease, created, expires, rp, completed, status, headers, body: Buffer | undefined;
  for (let i = 0; i + 1 < reply.length; i += 2) {
    const value = reply[i + 1] as Buffer;
    switch (String(reply[i])) {
      case 'scope': scope = value; break;
      case 'key': key = value; break;
      case 'fp': fp = value; break;
      case 'state': state = value; break;
      case 'token': token = value; break;
      case 'lease': lease = value; break;
      case 'created': created = value; break;
      case 'expires': expires = value; break;
      case 'rp': rp = value; break;
      case 'completed': completed = value; break;
      case 'status': status = value; break;
      case 'headers': headers = value; break;
      case 'body': body = value; break;
      default: break;
    }
  }
  const kind = text('state', state);
  if (kind !== 'in_progress' && kind !== 'completed') {
    throw new Error(`retrysafe: Redis record hash holds the unknown state ${JSON.stringify(kind)}`);
  }
  const record: { -readonly [K in keyof IdempotencyRecord]: IdempotencyRecord[K] } = {
    scope: text('scope', scope),
    key: text('key', key),
    fingerprint: text('fp', fp),
    state: kind satisfies RecordState,
    leaseToken: text('token', token),
    leaseExpiresAt: Number(text('lease', lease)),
    createdAt: Number(text('created', created)),
    expiresAt: Number(text('expires', expires)),
  };
  if (rp !== undefined) record.recoveryPoint = rp.toString('utf8');
  if (kind === 'in_progress') return record;
  record.completedAt = Number(text('completed', completed));
  record.response = {
    status: Number(text('status', status)),
    headers: JSON.parse(text('headers', headers)) as Record<string, string>,
    body: new Uint8Array(present('body', body)),
  };
  return record;
}

function present(name: string, value: Buffer | undefined): Buffer {
  if (value === undefined) throw new Error(`retrysafe: Redis record hash lacks the field "${name}"`);
  return value;
}

function text(name: string, value: Buffer | undefined): string {
  return present(name, value).toString('utf8');
}
