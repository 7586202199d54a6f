import { Command, Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { frame, framedSender } from '../../../src/stores/redis/ioredis-framing.js';
import { REDIS_URL, serviceAvailable, uniqueName } from '../../support/services.js';
import { deleteUnder } from '../../support/redis.js';

const PREFIX = uniqueName('rs_framing');
/** Every byte value, so a framing that re-encodes a Buffer as text cannot pass. */
const ALL_BYTES = Buffer.from(Array.from({ length: 256 }, (_, i) => i));

/** ioredis's own bytes for `name args`, as its `MixedBuffers` framing writes them. */
function ioredisFrame(name: string, args: (string | number | Buffer)[]): Buffer {
  const written = new Command(name, args).toWritable({});
  return Buffer.isBuffer(written) ? written : Buffer.from(written);
}

describe('ioredis command framing', () => {
  const cases: [string, (string | number | Buffer)[]][] = [
    ['set', ['k', ALL_BYTES, 'PX', 86_400_000, 'NX', 'GET']],
    ['set', ['ключ-🔑', Buffer.from('värde'), 'PX', 1]],
    ['evalsha', ['a'.repeat(40), 1, 'rs:k', Buffer.alloc(0), ALL_BYTES, 'ünïcode', 0, ALL_BYTES.subarray(250)]],
    ['evalsha', [Buffer.from('sha'), 0]],
  ];
  it.each(cases)('frames %s byte for byte as ioredis does', (name, args) => {
    const command = new Command(name, args);
    expect(frame(command.name, command.args as (string | Buffer)[]).equals(ioredisFrame(name, args))).toBe(true);
  });
});

const client = new Redis(REDIS_URL, { lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 1 });
if (await serviceAvailable('Redis', () => client.connect())) {
  const pipelined = new Redis(REDIS_URL, { lazyConnect: true, enableAutoPipelining: true });
  afterAll(async () => {
    await deleteUnder(client, PREFIX);
    await client.quit();
    await pipelined.quit();
  });

  describe('framed commands on a real Redis', () => {
    it('stores and returns every byte value, under a non-ASCII key, with Buffer replies', async () => {
      const send = framedSender(client);
      expect(send).toBeDefined();
      const key = `${PREFIX}:ключ`;
      expect(await send?.('set', [key, ALL_BYTES, 'PX', 60_000, 'NX', 'GET'])).toBeNull();
      const standing = await send?.('set', [key, Buffer.from('other'), 'PX', 60_000, 'NX', 'GET']);
      expect(Buffer.isBuffer(standing) && standing.equals(ALL_BYTES)).toBe(true);
      expect((await client.getBuffer(key))?.equals(ALL_BYTES)).toBe(true);
      const echoed = await send?.('eval', ['return {ARGV[1], #ARGV[2]}', 0, ALL_BYTES, Buffer.alloc(0)]);
      expect(echoed).toEqual([ALL_BYTES, 0]);
    });

    it('prefixes keys as the client is configured to, as the named commands do', async () => {
      const prefixed = new Redis(REDIS_URL, { lazyConnect: true, keyPrefix: `${PREFIX}:p:` });
      await prefixed.connect();
      try {
        await framedSender(prefixed)?.('set', ['k', ALL_BYTES, 'PX', 60_000, 'NX', 'GET']);
        expect((await client.getBuffer(`${PREFIX}:p:k`))?.equals(ALL_BYTES)).toBe(true);
      } finally {
        await prefixed.quit();
      }
    });

    it('leaves a client with enableAutoPipelining to the named commands, which feed its pipelines', () => {
      expect(framedSender(pipelined)).toBeUndefined();
    });
  });
}
