/**
 * `npm run sim -- [--seeds N] [--seed S] [--path P --replay-path R] [--store NAME,…] [--max-commands N]`
 * (`--max-commands`: the longest history; default 40 steps for the store simulations, 80 for messaging, 14 for sagas)
 *
 * Runs N seeded histories per simulation (default 1000; every simulation: the store simulation on memory,
 * sqlite, postgres, redis, postgres-server-clock and redis-server-clock, and the outbox + inbox
 * simulation messaging-postgres and messaging-sqlite, and the booking-saga simulation saga-memory,
 * saga-sqlite, saga-postgres and saga-redis), one simulation after another. Prints histories per
 * second per simulation, and on a broken invariant the seed, the shrunk history and the command that
 * replays it; exits 1 then.
 */
import { parseArgs } from 'node:util';
import { describeFailure, simulate } from './simulate.js';
import { openSimulation, SIMULATIONS, type SimulationName } from './simulations.js';

const { values } = parseArgs({
  options: {
    seeds: { type: 'string', default: '1000' },
    seed: { type: 'string' },
    path: { type: 'string' },
    'replay-path': { type: 'string' },
    store: { type: 'string', default: SIMULATIONS.join(',') },
    'max-commands': { type: 'string' },
  },
});

const names = values.store.split(',').map((name) => {
  if (!(SIMULATIONS as readonly string[]).includes(name)) throw new TypeError(`--store: unknown simulation ${JSON.stringify(name)} (known: ${SIMULATIONS.join(', ')})`);
  return name as SimulationName;
});
const seed = values.seed === undefined ? Date.now() % 2 ** 31 : Number(values.seed);
const numRuns = values.path === undefined ? Number(values.seeds) : 1;
let failed = false;
for (const name of names) {
  const simulation = await openSimulation(name);
  try {
    const report = await simulate(simulation, {
      seed,
      numRuns,
      ...(values['max-commands'] === undefined ? {} : { maxCommands: Number(values['max-commands']) }),
      ...(values.path === undefined ? {} : { path: values.path }),
      ...(values['replay-path'] === undefined ? {} : { replayPath: values['replay-path'] }),
    });
    const rate = (report.runs / report.ms) * 1000;
    console.log(`${name}: ${report.runs} histories, seed ${seed}, ${(report.ms / 1000).toFixed(1)} s, ${rate.toFixed(1)} histories/s`);
    if (report.failure) {
      failed = true;
      console.log(describeFailure(report));
    }
  } finally {
    await simulation.close();
  }
}
process.exitCode = failed ? 1 : 0;
