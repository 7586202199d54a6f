/**
 * The deterministic simulation of claim / lease / fencing on every store, a few seeds per store in the
 * suite (`npm run sim -- --seeds 10000` runs many), and proof that it catches a store whose completion is
 * not fenced.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Claim, StoredResponse } from '../../src/core/record.js';
import { postgresAvailable, redisAvailable } from '../support/services.js';
import { javaAvailable } from '../support/dynamodb.js';
import { openHarness, SIM_STORES, type SimHarness, type SimStoreName } from './harness.js';
import { describeFailure, simulate } from './simulate.js';
import { storeSimulation } from './simulations.js';

const SEEDS = 25;
/**
 * A fixed amount of work whose time follows the machine's: with the machine loaded about three times over,
 * 25 histories took 19–31 s on the PostgreSQL and Redis stores (one failed a 30 s budget).
 */
const SIM_TIMEOUT_MS = 120_000;
const postgres = await postgresAvailable();
const redis = await redisAvailable();
const java = await javaAvailable();
const available: Record<SimStoreName, boolean> = {
  memory: true,
  sqlite: true,
  postgres,
  redis,
  dynamodb: java,
  'postgres-server-clock': postgres,
  'redis-server-clock': redis,
};

for (const name of SIM_STORES) {
  describe.runIf(available[name])(`simulation: ${name} store`, () => {
    let harness: SimHarness;
    beforeAll(async () => {
      harness = await openHarness(name);
    });
    afterAll(async () => {
      await harness.close();
    });

    it(`keeps every invariant over ${SEEDS} seeded histories`, { timeout: SIM_TIMEOUT_MS }, async () => {
      const report = await simulate(storeSimulation(harness), { seed: 20_261_124, numRuns: SEEDS });
      expect(report.failure, describeFailure(report)).toBeUndefined();
      expect(report.runs).toBe(SEEDS);
    });
  });
}

describe('simulation: a store whose completion ignores the fencing token', () => {
  it('is caught, with the seed and the shrunk history that replay it', async () => {
    const harness = await openHarness('memory');
    // Completes whatever lease is current instead of the caller's: the fencing check removed.
    const broken: SimHarness = {
      name: 'memory',
      realTransactions: false,
      serverClock: false,
      get store() {
        return harness.store;
      },
      now: () => harness.now(),
      advance: (ms) => harness.advance(ms),
      plant: (input, at) => harness.plant(input, at),
      reset: () => harness.reset(),
      commit: async (claim: Claim, response: StoredResponse, retentionMs: number) => {
        const record = await harness.store.get(claim.scope, claim.key);
        if (record?.state !== 'in_progress') return false;
        return harness.commit({ ...claim, leaseToken: record.leaseToken }, response, retentionMs);
      },
      crashAfterEffect: (claim) => harness.crashAfterEffect(claim),
      committedEffects: (scope, key) => harness.committedEffects(scope, key),
      dropConnections: () => harness.dropConnections(),
      close: () => harness.close(),
    };
    try {
      const report = await simulate(storeSimulation(broken), { seed: 7, numRuns: 2_000 });
      expect(report.failure?.seed).toBe(7);
      expect(report.failure?.message).toMatch(/stale fencing token|committed effects/);
      expect(report.failure?.path).toMatch(/^\d+(:\d+)*$/);
      expect(report.failure?.history.length).toBeGreaterThan(0);
      expect(describeFailure(report)).toMatch(/seed 7, path [\d:]+\n.*--seed 7 --path/);
      // The printed seed and path replay the same failure.
      const replay = await simulate(storeSimulation(broken), { seed: 7, numRuns: 1, path: report.failure?.path ?? '', replayPath: report.failure?.replayPath ?? '' });
      expect(replay.failure?.message).toBe(report.failure?.message);
      expect(replay.failure?.history).toEqual(report.failure?.history);
    } finally {
      await harness.close();
    }
  });
});

for (const name of ['postgres-server-clock', 'redis-server-clock'] as const) {
  describe.runIf(available[name])(`simulation: ${name}, with the store on this process's clock instead`, () => {
    it('is caught when the process clock jumps, with the seed and the shrunk history that replay it', async () => {
      const harness = await openHarness(name, { storeOnProcessClock: true });
      try {
        const report = await simulate(storeSimulation(harness), { seed: 11, numRuns: 200 });
        expect(report.failure?.seed).toBe(11);
        expect(report.failure?.message).toMatch(/live lease|over a live record|lease ends at|the lease of|the retention of/);
        expect(report.failure?.history.join('\n')).toMatch(/process clock jumps/);
        expect(describeFailure(report)).toMatch(new RegExp(`--store ${name} --seed 11 --path [\\d:]+`));
      } finally {
        await harness.close();
      }
    });
  });
}
