/**
 * `npm run sim -- [--seeds N] [--seed S] [--path P --replay-path R] [--store memory,sqlite,postgres,redis] [--max-commands N]`
 *
 * Runs N seeded histories per store (default 1000, every store), prints histories per second per store,
 * and on a broken invariant the seed, the shrunk history and the command that replays it; exits 1 then.
 */
import { parseArgs } from 'node:util';
import { openHarness, SIM_STORES, type SimStoreName } from './harness.js';
import { describeFailure, simulate } from './simulate.js';

const { values } = parseArgs({
  options: {
    seeds: { type: 'string', default: '1000' },
    seed: { type: 'string' },
    path: { type: 'string' },
    'replay-path': { type: 'string' },
    store: { type: 'string', default: SIM_STORES.join(',') },
    'max-commands': { type: 'string', default: '40' },
  },
});

const stores = values.store.split(',').map((name) => {
  if (!(SIM_STORES as readonly string[]).includes(name)) throw new TypeError(`--store: unknown store ${JSON.stringify(name)} (known: ${SIM_STORES.join(', ')})`);
  return name as SimStoreName;
});
const seed = values.seed === undefined ? Date.now() % 2 ** 31 : Number(values.seed);
const numRuns = values.path === undefined ? Number(values.seeds) : 1;
let failed = false;
for (const name of stores) {
  const harness = await openHarness(name);
  try {
    const report = await simulate(harness, { seed, numRuns, maxCommands: Number(values['max-commands']), ...(values.path === undefined ? {} : { path: values.path }), ...(values['replay-path'] === undefined ? {} : { replayPath: values['replay-path'] }) });
    const rate = (report.runs / report.ms) * 1000;
    console.log(`${name}: ${report.runs} histories, seed ${seed}, ${(report.ms / 1000).toFixed(1)} s, ${rate.toFixed(1)} histories/s`);
    if (report.failure) {
      failed = true;
      console.log(describeFailure(report));
    }
  } finally {
    await harness.close();
  }
}
process.exitCode = failed ? 1 : 0;
