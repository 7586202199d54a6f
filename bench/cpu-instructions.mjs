// Instructions per request of a bench/cpu.mjs scenario, counted by callgrind (valgrind) after the
// warm-up, so the figure does not move with the machine's load the way CPU time does. User space only:
// system calls are not counted (count them with `strace -c -f node bench/cpu.mjs …`). V8 runs with
// --single-threaded, so its compiler and GC run on the counted thread; the line also gives the count
// without TurboFan/Maglev compilation (a one-off that can still fall in a short window) and without GC.
//
//   node bench/cpu-instructions.mjs <checkout with a built dist/> <scenario> [measured] [concurrency] [warm-up]
//
// Defaults: 3,000 measured requests, concurrency 1, 5,000 warm-up requests. Needs valgrind and
// callgrind_annotate. Environment variables of bench/cpu.mjs (BENCH_POSTGRES_URL, BENCH_SQLITE_SYNCHRONOUS …)
// pass through.
import { join, resolve } from 'node:path';
import process from 'node:process';
import { countAfterWarmUp, instructionsPerRequest } from './callgrind.mjs';

const [rootArg = '.', scenario = 'memory-replay', measuredArg = '3000', concArg = '1', warmArg = '5000'] = process.argv.slice(2);
const measured = Number(measuredArg);
const out = await countAfterWarmUp(join(import.meta.dirname, 'cpu.mjs'), [resolve(rootArg), scenario, String(measured), concArg], {
  signalVariable: 'BENCH_WARM_SIGNAL',
  env: { BENCH_WARMUP: warmArg },
});
process.stdout.write(
  `${JSON.stringify({ root: resolve(rootArg), scenario, measured, conc: Number(concArg), warm: Number(warmArg), ...instructionsPerRequest(out, measured) })}\n`,
);
