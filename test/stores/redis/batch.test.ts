/**
 * `Receiver.runBatch` on the Redis store: the batch suite, the batch claimed in one script call, and a
 * process killed (SIGKILL) after half its batch completed.
 */
import { Redis } from 'ioredis';
import { afterAll, describe, expect, it, vi } from 'vitest';
import { createReceiver } from '../../../src/receiver.js';
import { createRedisStore } from '../../../src/stores/redis/index.js';
import { batchItems, batchSuite, statusCounts } from '../../support/batch.js';
import { crashBatchChild } from '../../support/batch-crash.js';
import { deleteUnder, redisContractFixtures } from '../../support/redis.js';
import { REDIS_URL, redisAvailable, uniqueName } from '../../support/services.js';

const FILE_PREFIX = uniqueName('rs_batch');
const available = await redisAvailable();
const range = (from: number, to: number): number[] => Array.from({ length: to - from }, (_, i) => from + i);

describe.runIf(available)('runBatch on Redis', () => {
  const client = new Redis(REDIS_URL);
  afterAll(async () => {
    await deleteUnder(client, FILE_PREFIX);
    client.disconnect();
  });

  batchSuite('redis', redisContractFixtures(client, FILE_PREFIX));

  it('claims the whole batch in one script call', async () => {
    const prefix = `${FILE_PREFIX}:one`;
    // Every command the client sends, framed by the store or named, passes through sendCommand.
    const sent = vi.spyOn(client, 'sendCommand');
    const outcomes = await createReceiver({ store: createRedisStore({ client, prefix }) }).runBatch(batchItems(range(0, 50)), (n) => Promise.resolve(n));
    expect(statusCounts(outcomes)).toEqual({ executed: 50 });
    const evalshas = sent.mock.calls.map(([command]) => command).filter((command) => command.name === 'evalsha');
    // One claim call, then one completion per item.
    expect(evalshas.filter((command) => String(command.args[1]) === '50')).toHaveLength(1);
    expect(evalshas).toHaveLength(51);
    sent.mockRestore();
  });

  it('a process killed after half its batch completed: the retry replays that half and runs the rest once', async () => {
    const prefix = `${FILE_PREFIX}:crash`;
    const ended = await crashBatchChild('redis', prefix, 200, 100);
    expect(ended.signal, ended.stderr).toBe('SIGKILL');
    const receiver = createReceiver({ store: createRedisStore({ client, prefix }) });
    const outcomes = await receiver.runBatch(batchItems(range(0, 200)), async (n) => {
      await client.incr(`${prefix}:effect:${n}`);
      return n;
    }, { concurrency: 8 });
    expect(outcomes.map((o) => o.status)).toEqual(range(0, 200).map((n) => (n < 100 ? 'replayed' : 'executed')));
    const counts = await Promise.all(range(0, 200).map((n) => client.get(`${prefix}:effect:${n}`)));
    expect(counts.every((count) => count === '1')).toBe(true);
  }, 30_000);
});
