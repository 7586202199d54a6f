// Instructions per operation of the SQLite store alone (no engine, no HTTP), counted by callgrind after a
// warm-up: `new` claims and completes new keys one after another, `newc16` the same with 16 in flight (so
// their writes commit in groups), `replay` claims one of 64 completed keys. User space only; the line also
// gives the count without V8's optimising compilers and without its GC.
//
//   node bench/sqlite-store-instructions.mjs <checkout with a built dist/> <new|newc16|replay> [measured] [warm-up]
//
// Defaults: 6,000 measured operations after 20,000. Needs valgrind and callgrind_annotate.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import process from 'node:process';
import { pathToFileURL } from 'node:url';
import { countAfterWarmUp, instructionsPerRequest, warmedUp } from './callgrind.mjs';
import { benchResponse, storeWorkload } from './store-workload.mjs';

const [rootArg = '.', phase = 'new', measuredArg = '6000', warmArg = '20000'] = process.argv.slice(2);
const measured = Number(measuredArg);
if (!['new', 'newc16', 'replay'].includes(phase)) throw new TypeError(`unknown workload ${phase}`);

if (process.env.RETRYSAFE_BENCH_SIGNAL === undefined) {
  const out = await countAfterWarmUp(import.meta.filename, process.argv.slice(2), { signalVariable: 'RETRYSAFE_BENCH_SIGNAL' });
  process.stdout.write(`${JSON.stringify({ root: resolve(rootArg), phase, measured, ...instructionsPerRequest(out, measured) })}\n`);
} else {
  const { createSqliteStore } = await import(pathToFileURL(join(resolve(rootArg), 'dist/stores/sqlite/index.js')).href);
  const store = createSqliteStore({ path: join(mkdtempSync(join(tmpdir(), 'retrysafe-sqlite-instructions-')), 'records.db') });
  const one = await storeWorkload(store, phase, { completedKeys: 64, response: benchResponse() });
  const loop = async (count) => {
    let left = count;
    await Promise.all(Array.from({ length: phase === 'newc16' ? 16 : 1 }, async () => {
      while (left-- > 0) await one();
    }));
  };
  await loop(Number(warmArg));
  await warmedUp(process.env.RETRYSAFE_BENCH_SIGNAL);
  await loop(measured);
  process.exit(0);
}
