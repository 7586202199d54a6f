/**
 * The booking-saga simulation on every store with atomic phases, a few seeds per store in the suite
 * (`npm run sim -- --seeds 10000 --store saga-memory,saga-sqlite,saga-postgres,saga-redis` runs many), and
 * proof that it catches a compensation that sends a new idempotency key on every attempt.
 */
import { describe, expect, it } from 'vitest';
import { postgresAvailable, redisAvailable } from '../support/services.js';
import { openHarness } from './harness.js';
import { describeFailure, simulate } from './simulate.js';
import { openSimulation, SAGA_SIMS, sagaSimulation, type SagaSimName } from './simulations.js';

const SEEDS = 40;
const available: Record<SagaSimName, boolean> = {
  'saga-memory': true,
  'saga-sqlite': true,
  'saga-postgres': await postgresAvailable(),
  'saga-redis': await redisAvailable(),
};

describe('saga simulation', () => {
  for (const name of SAGA_SIMS) {
    it.runIf(available[name])(`${name}: keeps every invariant over ${SEEDS} seeded histories`, { timeout: 120_000 }, async () => {
      const simulation = await openSimulation(name);
      try {
        const report = await simulate(simulation, { seed: 20_261_202, numRuns: SEEDS });
        expect(report.failure, describeFailure(report)).toBeUndefined();
        expect(report.runs).toBe(SEEDS);
      } finally {
        await simulation.close();
      }
    });
  }

  it('catches a refund sent under a new key on every attempt, with the seed and the shrunk history', { timeout: 120_000 }, async () => {
    const simulation = sagaSimulation(await openHarness('memory'), 'refund-new-key');
    try {
      const report = await simulate(simulation, { seed: 7, numRuns: 500 });
      expect(report.failure?.seed).toBe(7);
      expect(report.failure?.message).toMatch(/booking \d: refund applied 2 times/);
      expect(report.failure?.history.length).toBeGreaterThan(0);
      const replay = await simulate(simulation, { seed: 7, numRuns: 1, path: report.failure?.path ?? '', replayPath: report.failure?.replayPath ?? '' });
      expect(replay.failure?.message).toBe(report.failure?.message);
    } finally {
      await simulation.close();
    }
  });
});
