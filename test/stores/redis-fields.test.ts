/** Decoding a Redis record hash (`HGETALL` reply) into a record: every field, and refusals of foreign hashes. */
import { describe, expect, it } from 'vitest';
import { decodeRecord } from '../../src/stores/redis/fields.js';

const reply = (fields: Record<string, string | Buffer>): Buffer[] =>
  Object.entries(fields).flatMap(([name, value]) => [Buffer.from(name), Buffer.isBuffer(value) ? value : Buffer.from(value)]);

const base = { scope: 'tenant', key: 'k', fp: 'f'.repeat(64), token: 't-1', lease: '1000', created: '900', expires: '5000' };

describe('decodeRecord', () => {
  it('reads nothing from an empty reply (no such key)', () => {
    expect(decodeRecord([])).toBeUndefined();
  });

  it('decodes an in-progress record, with its recovery point when one is set', () => {
    expect(decodeRecord(reply({ ...base, state: 'in_progress' }))).toEqual({
      scope: 'tenant',
      key: 'k',
      fingerprint: 'f'.repeat(64),
      state: 'in_progress',
      leaseToken: 't-1',
      leaseExpiresAt: 1000,
      createdAt: 900,
      expiresAt: 5000,
    });
    expect(decodeRecord(reply({ ...base, state: 'in_progress', rp: 'charged' }))?.recoveryPoint).toBe('charged');
  });

  it('decodes a completed record with its response, the body as its own copy of the bytes', () => {
    const body = Buffer.from([0, 255, 7]);
    const record = decodeRecord(
      reply({ ...base, state: 'completed', completed: '950', status: '201', headers: '{"content-type":"application/json"}', body }),
    );
    expect(record).toMatchObject({ state: 'completed', completedAt: 950, response: { status: 201, headers: { 'content-type': 'application/json' } } });
    expect(Array.from(record?.response?.body ?? [])).toEqual([0, 255, 7]);
    body[0] = 9;
    expect(record?.response?.body[0]).toBe(0);
  });

  it('refuses a hash that lacks a field or holds an unknown state', () => {
    expect(() => decodeRecord(reply({ ...base, state: 'completed', completed: '950', status: '201', headers: '{}' }))).toThrow(
      'lacks the field "body"',
    );
    const withoutToken: Record<string, string> = { ...base, state: 'in_progress' };
    delete withoutToken['token'];
    expect(() => decodeRecord(reply(withoutToken))).toThrow('lacks the field "token"');
    expect(() => decodeRecord(reply({ ...base, state: 'gone' }))).toThrow('unknown state "gone"');
  });
});
