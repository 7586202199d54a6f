/** Decoding a Redis record hash (an `HMGET` reply, or the claim script's packed reply) into a record: every field, and refusals of foreign hashes. */
import { describe, expect, it } from 'vitest';
import { decodeRecord, HASH_FIELDS, type HashField, unpackValues } from '../../../src/stores/redis/fields.js';

/** The `HMGET` reply of a hash holding `fields`: one value per field of HASH_FIELDS, null where absent. */
const values = (fields: Partial<Record<HashField, string | Buffer>>): (Buffer | null)[] =>
  HASH_FIELDS.map((name) => {
    const value = fields[name];
    return value === undefined ? null : Buffer.isBuffer(value) ? value : Buffer.from(value);
  });

/** What the claim script packs: `<length>:<bytes>` per value, `-` per absent one. */
const pack = (items: readonly (Buffer | null)[]): Buffer =>
  Buffer.concat(items.flatMap((item) => (item === null ? [Buffer.from('-')] : [Buffer.from(`${item.length}:`), item])));

const base = { scope: 'tenant', key: 'k', fp: 'f'.repeat(64), token: 't-1', lease: '1000', created: '900', expires: '5000' };

describe('decodeRecord', () => {
  it('reads nothing when every field is absent (no such key)', () => {
    expect(decodeRecord(values({}))).toBeUndefined();
  });

  it('decodes an in-progress record, with its recovery point when one is set', () => {
    expect(decodeRecord(values({ ...base, state: 'in_progress' }))).toEqual({
      scope: 'tenant',
      key: 'k',
      fingerprint: 'f'.repeat(64),
      state: 'in_progress',
      leaseToken: 't-1',
      leaseExpiresAt: 1000,
      createdAt: 900,
      expiresAt: 5000,
    });
    expect(decodeRecord(values({ ...base, state: 'in_progress', rp: 'charged' }))?.recoveryPoint).toBe('charged');
  });

  it('decodes a completed record with its response, the body as its own copy of the bytes', () => {
    const body = Buffer.from([0, 255, 7]);
    const record = decodeRecord(
      values({ ...base, state: 'completed', completed: '950', status: '201', headers: '{"content-type":"application/json"}', body }),
    );
    expect(record).toMatchObject({ state: 'completed', completedAt: 950, response: { status: 201, headers: { 'content-type': 'application/json' } } });
    expect(Array.from(record?.response?.body ?? [])).toEqual([0, 255, 7]);
    body[0] = 9;
    expect(record?.response?.body[0]).toBe(0);
  });

  it('refuses a hash that lacks a field or holds an unknown state', () => {
    expect(() => decodeRecord(values({ ...base, state: 'completed', completed: '950', status: '201', headers: '{}' }))).toThrow(
      'lacks the field "body"',
    );
    const withoutToken: Partial<Record<HashField, string>> = { ...base, state: 'in_progress' };
    delete withoutToken.token;
    expect(() => decodeRecord(values(withoutToken))).toThrow('lacks the field "token"');
    expect(() => decodeRecord(values({ ...base }))).toThrow('lacks the field "state"');
    expect(() => decodeRecord(values({ ...base, state: 'gone' }))).toThrow('unknown state "gone"');
  });
});

describe('unpackValues', () => {
  it('splits length-prefixed items back into values, binary, empty and absent ones included', () => {
    const body = Buffer.from([58, 45, 0, 255, 49, 58]);
    const items = [Buffer.from('completed'), null, body, Buffer.alloc(0), Buffer.from('ü:1'), null];
    expect(unpackValues(pack(items))).toEqual(items);
    expect(unpackValues(Buffer.alloc(0))).toEqual([]);
  });

  it('feeds decodeRecord the same record an HMGET reply gives', () => {
    const fields = values({ ...base, state: 'completed', completed: '950', status: '201', headers: '{}', body: Buffer.from([1, 2]) });
    expect(decodeRecord(unpackValues(pack(fields)))).toEqual(decodeRecord(fields));
  });

  it('refuses a reply that is cut short or not length-prefixed', () => {
    expect(() => unpackValues(Buffer.from('5:abc'))).toThrow('malformed packed Redis reply');
    expect(() => unpackValues(Buffer.from('abc'))).toThrow('malformed packed Redis reply');
    expect(() => unpackValues(Buffer.from(':abc'))).toThrow('malformed packed Redis reply');
    expect(() => unpackValues(Buffer.from('3:abc4'))).toThrow('malformed packed Redis reply');
  });
});
