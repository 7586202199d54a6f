/**
 * The engine simulation (plain-mode requests and batches: keep-alive, completion retry, crashes between the
 * effect and the completion) on every store with an injected clock, a few seeds per store in the suite
 * (`npm run sim -- --seeds 10000 --store engine-memory,engine-sqlite,engine-postgres,engine-redis` runs
 * many), and proof that it catches a store whose renewal does nothing and one whose completion is not
 * idempotent for its token.
 */
import { describe, expect, it } from 'vitest';
import { postgresAvailable, redisAvailable } from '../support/services.js';
import { openHarness } from './harness.js';
import { describeFailure, simulate } from './simulate.js';
import { ENGINE_SIMS, engineSimulation, openSimulation, type EngineSimName } from './simulations.js';

const SEEDS = 30;
const available: Record<EngineSimName, boolean> = {
  'engine-memory': true,
  'engine-sqlite': true,
  'engine-postgres': await postgresAvailable(),
  'engine-redis': await redisAvailable(),
};

describe('engine simulation', () => {
  for (const name of ENGINE_SIMS) {
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

  it('catches a renewal that does not renew, with the seed and the shrunk history that replay it', { timeout: 120_000 }, async () => {
    const simulation = engineSimulation(await openHarness('memory'), 'renew-ignored');
    try {
      const report = await simulate(simulation, { seed: 7, numRuns: 500 });
      expect(report.failure?.seed).toBe(7);
      expect(report.failure?.message).toMatch(/renewed at \d+ ms to|not kept alive|won k\d .* while/);
      expect(report.failure?.history.join('\n')).toMatch(/10000 ms/);
      const replay = await simulate(simulation, { seed: 7, numRuns: 1, path: report.failure?.path ?? '', replayPath: report.failure?.replayPath ?? '' });
      expect(replay.failure?.message).toBe(report.failure?.message);
    } finally {
      await simulation.close();
    }
  });

  it('catches a completion that a second try by the same token calls fenced off', { timeout: 120_000 }, async () => {
    const simulation = engineSimulation(await openHarness('memory'), 'complete-not-idempotent');
    try {
      const report = await simulate(simulation, { seed: 7, numRuns: 500 });
      expect(report.failure?.message).toMatch(/was fenced off/);
      expect(report.failure?.history.join('\n')).toMatch(/reply-lost/);
    } finally {
      await simulation.close();
    }
  });
});
