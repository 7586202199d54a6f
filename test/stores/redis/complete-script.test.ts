/**
 * The completion script, run as it is sent (a private `redis-server`): it fences by the claim's token at a
 * fixed offset of the head (another token, one that merely starts like it, or an absent record changes
 * nothing), answers a second run under the same token as the first, keeps the head's lease, creation time,
 * recovery point, scope and key byte for byte, stamps Redis's `TIME` when sent no times, and publishes only
 * for a record a waiter marked.
 */
import type { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import type { StoredResponse } from '../../../src/core/record.js';
import { claimOn } from '../../../src/stores/redis/claim.js';
import { decodeRecord, encodeCompletionTimes, encodeIdentity, encodeTail } from '../../../src/stores/redis/layout.js';
import { allowingOom, LuaScript } from '../../../src/stores/redis/script.js';
import { transportOf } from '../../../src/stores/redis/transport.js';
import { COMPLETE_LUA } from '../../../src/stores/redis/scripts/complete.lua.js';
import { CHECKPOINT_LUA } from '../../../src/stores/redis/scripts/checkpoint.lua.js';
import { LISTEN_LUA } from '../../../src/stores/redis/scripts/listen.lua.js';
import { recordTtlMs, REDIS_TTL_GRACE_MS } from '../../../src/stores/redis/ttl.js';
import { startPrivateRedis } from '../../support/redis-server.js';

const FP = 'c'.repeat(64);
const LEASE_MS = 30_000;
const RETENTION_MS = 3_600_000;
const OK: StoredResponse = { status: 201, headers: { 'content-type': 'text/plain' }, body: new TextEncoder().encode('ok') };
const COMPLETE = new LuaScript(allowingOom(COMPLETE_LUA));
const CHECKPOINT = new LuaScript(CHECKPOINT_LUA);
const LISTEN = new LuaScript(LISTEN_LUA);

const server = await startPrivateRedis([]);
afterAll(() => server?.stop());

/** Claims `key` with the claim script at `now` (ms), or at Redis's `TIME` when `''`, under `token`; resolves with the record's key. */
async function claimed(client: Redis, key: string, token: string, now: number | ''): Promise<string> {
  const redisKey = `cs:${key}`;
  const result = await claimOn(transportOf(client), redisKey, { scope: 'sc', key, fingerprint: FP, leaseMs: LEASE_MS, retentionMs: RETENTION_MS }, now, token);
  if (!result.acquired) throw new Error(`${key} was not claimed`);
  return redisKey;
}

/** Runs the completion script on `redisKey` for `token`, with `times` packed or `''` (Redis's `TIME`). */
function complete(client: Redis, redisKey: string, token: string, times: Buffer | '', fingerprint = FP): Promise<unknown> {
  return COMPLETE.run(transportOf(client), [redisKey], [encodeIdentity(fingerprint, token), times, recordTtlMs(RETENTION_MS), encodeTail(OK)]);
}

describe.runIf(server !== undefined)('redis store: the completion script', () => {
  it('completes only the record of its own token, and answers a second run as the first', async () => {
    const client = await server!.connect();
    const now = 1_900_000_000_000;
    const redisKey = await claimed(client, 'fence', 'token-a', now);
    const before = await client.getBuffer(redisKey);
    for (const token of ['token-b', 'token-', 'token-aa', '']) {
      expect(await complete(client, redisKey, token, encodeCompletionTimes(now + 5, RETENTION_MS))).toBe(0);
    }
    expect(await complete(client, 'cs:absent', 'token-a', encodeCompletionTimes(now + 5, RETENTION_MS))).toBe(0);
    expect(await client.exists('cs:absent')).toBe(0);
    expect(await client.getBuffer(redisKey)).toEqual(before);
    expect(await complete(client, redisKey, 'token-a', encodeCompletionTimes(now + 5, RETENTION_MS))).toBe(1);
    const completed = await client.getBuffer(redisKey);
    expect(await complete(client, redisKey, 'token-a', encodeCompletionTimes(now + 9, RETENTION_MS))).toBe(1);
    expect(await client.getBuffer(redisKey)).toEqual(completed);
    expect(await complete(client, redisKey, 'token-b', encodeCompletionTimes(now + 9, RETENTION_MS))).toBe(0);
    const record = decodeRecord(completed!);
    expect(record).toMatchObject({ state: 'completed', leaseToken: 'token-a', fingerprint: FP, scope: 'sc', key: 'fence' });
    expect(record).toMatchObject({ createdAt: now, leaseExpiresAt: now + LEASE_MS, completedAt: now + 5, expiresAt: now + 5 + RETENTION_MS });
    expect(record.response).toEqual({ status: 201, headers: OK.headers, body: Buffer.from(OK.body) });
    expect(await client.pttl(redisKey)).toBeGreaterThan(recordTtlMs(RETENTION_MS) - 60_000);
  });

  it('keeps the recovery point and publishes once a waiter marked the record', async () => {
    const client = await server!.connect();
    const now = 1_900_000_000_000;
    const redisKey = await claimed(client, 'marked', 'token-m', now);
    expect(await CHECKPOINT.run(transportOf(client), [redisKey], ['token-m', 'phase-2', now + 1, LEASE_MS, REDIS_TTL_GRACE_MS])).toBeTruthy();
    await LISTEN.run(transportOf(client), [redisKey], []);
    await client.config('RESETSTAT');
    expect(await complete(client, redisKey, 'token-m', encodeCompletionTimes(now + 7, RETENTION_MS))).toBe(1);
    expect(await client.info('commandstats')).toMatch(/cmdstat_publish:calls=1,/);
    expect(decodeRecord((await client.getBuffer(redisKey))!)).toMatchObject({ state: 'completed', recoveryPoint: 'phase-2', completedAt: now + 7 });
  });

  it('stamps the completion by Redis TIME when sent no times, and publishes nothing for an unmarked record', async () => {
    const client = await server!.connect();
    const [seconds] = await client.time();
    const redisKey = await claimed(client, 'untimed', 'token-t', '');
    await client.config('RESETSTAT');
    expect(await complete(client, redisKey, 'token-t', '')).toBe(1);
    expect(await client.info('commandstats')).not.toMatch(/cmdstat_publish/);
    const record = decodeRecord((await client.getBuffer(redisKey))!);
    expect(record.state).toBe('completed');
    expect(record.completedAt).toBeGreaterThanOrEqual(Number(seconds) * 1000);
    expect(record.completedAt).toBeLessThan(Number(seconds) * 1000 + 60_000);
    expect(record.expiresAt).toBe(record.completedAt! + RETENTION_MS);
  });
});
