/**
 * Decoding a Redis record hash (an `HMGET` reply, or the claim script's packed reply) into a record: every
 * field, and refusals of foreign hashes. The packed replies are written by the Redis server's own
 * `cmsgpack.pack`, as the claim script writes them.
 */
import { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { decodeRecord, HASH_FIELDS, type HashField, unpackValues } from '../../../src/stores/redis/fields.js';
import { REDIS_URL, serviceAvailable } from '../../support/services.js';

/** The `HMGET` reply of a hash holding `fields`: one value per field of HASH_FIELDS, null where absent. */
const values = (fields: Partial<Record<HashField, string | Buffer>>): (Buffer | null)[] =>
  HASH_FIELDS.map((name) => {
    const value = fields[name];
    return value === undefined ? null : Buffer.isBuffer(value) ? value : Buffer.from(value);
  });

const client = new Redis(REDIS_URL, { lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 1 });

/**
 * What the claim script packs, packed by Redis: `cmsgpack.pack` of a Lua table holding each item as a
 * string, or `false` (what `HMGET` gives Lua for a missing field) where the item is null.
 */
async function pack(items: readonly (Buffer | null)[]): Promise<Buffer> {
  const script = `local values = {}
    for i = 1, #ARGV do
      if ARGV[i] == '' and string.sub(KEYS[1], i, i) == '-' then values[i] = false else values[i] = ARGV[i] end
    end
    return cmsgpack.pack(values)`;
  // KEYS[1] marks the absent items ('-') apart from empty strings ('+'); it is no key in use.
  const marks = items.map((item) => (item === null ? '-' : '+')).join('');
  return (await client.callBuffer('EVAL', script, 1, marks, ...items.map((item) => item ?? ''))) as Buffer;
}

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

/** A string of `length` bytes that cycles through every byte value. */
const bytes = (length: number): Buffer => Buffer.from(Array.from({ length }, (_, i) => i % 256));

if (await serviceAvailable('Redis', () => client.connect())) {
  afterAll(() => client.quit());

  describe('unpackValues', () => {
    it('splits the packed array back into values: binary, empty, absent, and every string length header', async () => {
      // fixstr (< 32 bytes), str8 (< 256), str16 (< 65,536) and str32: each length header Redis writes.
      const items = [Buffer.from('completed'), null, bytes(31), bytes(32), Buffer.alloc(0), Buffer.from('ü:1'), bytes(255), bytes(256), null, bytes(65_536)];
      expect(unpackValues(await pack(items))).toEqual(items);
    });

    it('feeds decodeRecord the same record an HMGET reply gives', async () => {
      const fields = values({ ...base, state: 'completed', completed: '950', status: '201', headers: '{}', body: Buffer.from([1, 2]) });
      expect(decodeRecord(unpackValues(await pack(fields)))).toEqual(decodeRecord(fields));
    });

    it('refuses a reply that is cut short, carries bytes after the array, or holds a type no packed field has', async () => {
      const packed = await pack([Buffer.from('abc'), null]);
      expect(unpackValues(packed)).toEqual([Buffer.from('abc'), null]);
      expect(() => unpackValues(packed.subarray(0, packed.length - 2))).toThrow('malformed packed Redis reply');
      expect(() => unpackValues(Buffer.concat([packed, Buffer.from([0xc2])]))).toThrow('malformed packed Redis reply at byte 6');
      expect(() => unpackValues(Buffer.alloc(0))).toThrow('malformed packed Redis reply at byte 0');
      // Not an array; an integer (0x01) where a string belongs.
      expect(() => unpackValues(Buffer.from('abc'))).toThrow('malformed packed Redis reply at byte 0');
      expect(() => unpackValues(Buffer.from([0x92, 0x01, 0xc2]))).toThrow('malformed packed Redis reply at byte 1');
      // A str16 header whose length runs past the end.
      expect(() => unpackValues(Buffer.from([0x91, 0xda, 0x01, 0x00, 0x61]))).toThrow('malformed packed Redis reply at byte 4');
    });
  });
}
