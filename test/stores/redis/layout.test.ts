/**
 * The record value: values packed by the Redis server's own Lua `struct` library, through the scripts'
 * shared `pack` helpers, decoded by the store; and refusals of values the scripts never write.
 */
import { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { decodeHead, decodeRecord, encodeNewHead, encodeTail, HEAD_READ_BYTES } from '../../../src/stores/redis/layout.js';
import { packHeadLua, packTailLua } from '../../../src/stores/redis/scripts/record.lua.js';
import { REDIS_URL, serviceAvailable } from '../../support/services.js';

const client = new Redis(REDIS_URL, { lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 1 });

/** A record's head as the scripts are given it: state 1 (in progress) or 2 (completed), times in ms, texts. */
interface Head {
  state: number;
  lease: number;
  created: number;
  expires: number;
  completed: number;
  fp: string;
  token: string;
  rp: string | null;
  scope: string;
  key: string;
}

/** The value the scripts write for `head`, followed by the tail of `response` when given: packed by Redis. */
async function pack(head: Head, response?: [status: number, headers: string, body: Buffer]): Promise<Buffer> {
  const script = `local n = function(i) return tonumber(ARGV[i]) end
    local rp = nil
    if ARGV[8] == '+' then rp = ARGV[9] end
    local v = ${packHeadLua({ state: 'n(1)', lease: 'n(2)', created: 'n(3)', expires: 'n(4)', completed: 'n(5)', fp: 'ARGV[6]', token: 'ARGV[7]', rp: 'rp', scope: 'ARGV[10]', key: 'ARGV[11]' })}
    if ARGV[12] then v = v .. ${packTailLua('n(12)', 'ARGV[13]', 'ARGV[14]')} end
    return v`;
  const { state, lease, created, expires, completed, fp, token, rp, scope, key } = head;
  // ARGV[8] marks whether a recovery point is set ('+') or not ('-'), since nil cannot be sent.
  const args = [state, lease, created, expires, completed, fp, token, rp === null ? '-' : '+', rp ?? '', scope, key, ...(response ?? [])];
  return (await client.callBuffer('EVAL', script, 0, ...args)) as Buffer;
}

const base: Head = { state: 1, lease: 1000, created: 900, expires: 5000, completed: 0, fp: 'f'.repeat(64), token: 't-1', rp: null, scope: 'tenant', key: 'k' };

if (await serviceAvailable('Redis', () => client.connect())) {
  afterAll(async () => {
    await client.quit();
  });

  describe('decodeRecord', () => {
    it('decodes a record in progress, with its recovery point only when one is set (an empty one included)', async () => {
      expect(decodeRecord(await pack(base))).toEqual({
        scope: 'tenant',
        key: 'k',
        fingerprint: 'f'.repeat(64),
        state: 'in_progress',
        leaseToken: 't-1',
        leaseExpiresAt: 1000,
        createdAt: 900,
        expiresAt: 5000,
      });
      expect(decodeRecord(await pack({ ...base, rp: 'charged' })).recoveryPoint).toBe('charged');
      expect(decodeRecord(await pack({ ...base, rp: '' })).recoveryPoint).toBe('');
    });

    it('decodes a completed record with its response byte for byte, times past 2^32 ms exact, the body its own copy', async () => {
      const body = Buffer.from([0, 255, 7, 0x80]);
      const value = await pack({ ...base, state: 2, lease: 1_764_000_000_001, created: 1_764_000_000_000, expires: 1_764_086_400_123, completed: 1_764_000_000_050, key: 'ключ' }, [
        201,
        '{"content-type":"application/json"}',
        body,
      ]);
      const record = decodeRecord(value);
      expect(record).toMatchObject({
        state: 'completed',
        key: 'ключ',
        leaseExpiresAt: 1_764_000_000_001,
        createdAt: 1_764_000_000_000,
        expiresAt: 1_764_086_400_123,
        completedAt: 1_764_000_000_050,
      });
      expect(record.response?.status).toBe(201);
      expect(record.response?.headers).toEqual({ 'content-type': 'application/json' });
      expect(Buffer.from(record.response?.body ?? [])).toEqual(body);
      value.fill(0);
      expect(Buffer.from(record.response?.body ?? [])).toEqual(body);
    });

    it('refuses values the scripts never write: too short, cut short, trailing bytes, an unknown state byte', async () => {
      const value = await pack({ ...base, rp: 'rp' });
      expect(() => decodeRecord(Buffer.alloc(3))).toThrow('the Redis record value is malformed: 3 bytes');
      expect(() => decodeRecord(value.subarray(0, value.length - 1))).toThrow('it ends inside the head');
      expect(() => decodeRecord(Buffer.concat([value, Buffer.from([0])]))).toThrow('bytes after the head of a record in progress');
      const unknown = Buffer.from(value);
      unknown[0] = 3;
      expect(() => decodeRecord(unknown)).toThrow('unknown state byte 3');
      const completed = await pack({ ...base, state: 2 }, [200, '{}', Buffer.from('body')]);
      expect(() => decodeRecord(completed.subarray(0, completed.length - 2))).toThrow('it ends inside the response');
      expect(() => decodeRecord(Buffer.concat([completed, Buffer.from('x')]))).toThrow('bytes after the response');
    });
  });

  describe('encodeTail', () => {
    it('packs a response byte for byte as Redis packs the tail, UTF-8 headers and a body that is a view included', async () => {
      const headers = { 'content-type': 'text/plain; charset=utf-8', 'x-note': 'naïve ключ' };
      const backing = Buffer.from([9, 9, 0, 255, 1, 128, 9]);
      const body = new Uint8Array(backing.buffer, backing.byteOffset + 2, 4);
      const lua = await pack({ ...base, state: 2 }, [201, JSON.stringify(headers), Buffer.from(body)]);
      const head = await pack({ ...base, state: 2 });
      const tail = encodeTail({ status: 201, headers, body });
      expect(Buffer.concat([head, tail])).toEqual(lua);
      expect(decodeRecord(Buffer.concat([head, encodeTail({ status: 204, headers: {}, body: new Uint8Array(0) })])).response).toEqual({
        status: 204,
        headers: {},
        body: Buffer.alloc(0),
      });
    });
  });

  describe('encodeNewHead', () => {
    it('packs a new record in progress byte for byte as the claim script packs one, UTF-8 texts and times past 2^32 ms included', async () => {
      const head = { lease: 1_700_000_030_000, created: 1_700_000_000_000, expires: 1_700_003_600_000, fp: 'f'.repeat(64), token: 'tøken', scope: 'tenant ключ', key: 'k€y' };
      const lua = await pack({ ...head, state: 1, completed: 0, rp: null });
      const encoded = encodeNewHead({
        scope: head.scope,
        key: head.key,
        fingerprint: head.fp,
        leaseToken: head.token,
        leaseExpiresAt: head.lease,
        createdAt: head.created,
        expiresAt: head.expires,
      });
      expect(encoded).toEqual(lua);
      expect(decodeRecord(encoded)).toEqual({
        scope: head.scope,
        key: head.key,
        fingerprint: head.fp,
        state: 'in_progress',
        leaseToken: head.token,
        leaseExpiresAt: head.lease,
        createdAt: head.created,
        expiresAt: head.expires,
      });
      expect(encodeNewHead({ scope: '', key: '', fingerprint: '', leaseToken: '', leaseExpiresAt: 0, createdAt: 0, expiresAt: 0 })).toEqual(
        await pack({ ...base, state: 1, lease: 0, created: 0, expires: 0, completed: 0, fp: '', token: '', rp: null, scope: '', key: '' }),
      );
    });
  });

  describe('decodeHead', () => {
    it('reads the head from the first bytes of a completed record, and answers undefined when they end before it', async () => {
      const value = await pack({ ...base, state: 2, lease: 1, created: 2, expires: 3, completed: 4, fp: 'f', token: 't', rp: 'point', scope: 's' }, [200, '{}', Buffer.alloc(2000, 1)]);
      expect(decodeHead(value.subarray(0, HEAD_READ_BYTES))).toEqual({
        scope: 's',
        key: 'k',
        fingerprint: 'f',
        state: 'completed',
        leaseToken: 't',
        leaseExpiresAt: 1,
        createdAt: 2,
        expiresAt: 3,
        recoveryPoint: 'point',
      });
      const long = await pack({ ...base, key: 'k'.repeat(600) });
      expect(decodeHead(long.subarray(0, HEAD_READ_BYTES))).toBeUndefined();
      expect(decodeHead(long)?.key).toBe('k'.repeat(600));
      expect(() => decodeHead(Buffer.from([9]))).toThrow('unknown state byte 9');
    });
  });
}
