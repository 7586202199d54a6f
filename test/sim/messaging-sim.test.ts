/**
 * The deterministic simulation of outbox → relay → broker → inbox on the real stores, a few seeds per
 * inbox store in the suite (`npm run sim -- --seeds 10000 --store messaging-postgres,messaging-sqlite`
 * runs many), and proof that it catches an inbox that does not record message ids and a relay that
 * publishes a message again under a new id.
 */
import { describe, expect, it } from 'vitest';
import { postgresAvailable } from '../support/services.js';
import { MESSAGING_SIMS, type MessagingDefect } from './messaging-harness.js';
import { describeFailure, simulate } from './simulate.js';
import { openSimulation } from './simulations.js';

const SEEDS = 12;
const available = await postgresAvailable();

describe.runIf(available)('messaging simulation', () => {
  for (const name of MESSAGING_SIMS) {
    it(`${name}: keeps every invariant over ${SEEDS} seeded histories`, async () => {
      const simulation = await openSimulation(name);
      try {
        const report = await simulate(simulation, { seed: 20_261_125, numRuns: SEEDS });
        expect(report.failure, describeFailure(report)).toBeUndefined();
        expect(report.runs).toBe(SEEDS);
      } finally {
        await simulation.close();
      }
    }, 120_000);
  }

  const defects: readonly [MessagingDefect, RegExp][] = [
    // Without the id, duplicates apply twice, and a failing message's attempts never add up to a dead letter.
    ['inbox-forgets-id', /applied (message|order) \S+ .*\d+ times|retried forever/],
    ['relay-new-id', /published with id \S+, not with the id \S+ it was enqueued with/],
  ];
  for (const [defect, caught] of defects) {
    it(`catches the defect ${defect}, with the seed and the shrunk history that replay it`, async () => {
      const simulation = await openSimulation('messaging-sqlite', { defect });
      try {
        const report = await simulate(simulation, { seed: 5, numRuns: 200 });
        expect(report.failure?.seed).toBe(5);
        expect(report.failure?.message).toMatch(caught);
        expect(report.failure?.history.length).toBeGreaterThan(0);
        expect(describeFailure(report)).toMatch(/seed 5, path [\d:]+\n.*--store messaging-sqlite --seed 5 --path [\d:]+ --replay-path/);
        // The printed seed and path replay the same failure.
        const replay = await simulate(simulation, { seed: 5, numRuns: 1, path: report.failure?.path ?? '', replayPath: report.failure?.replayPath ?? '' });
        expect(replay.failure?.message).toBe(report.failure?.message);
        expect(replay.failure?.history).toEqual(report.failure?.history);
      } finally {
        await simulation.close();
      }
    }, 120_000);
  }
});
