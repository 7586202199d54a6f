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
import { TextEncoder } from 'node:util';
import { countAfterWarmUp, instructionsPerRequest, warmedUp } from './callgrind.mjs';

const [rootArg = '.', phase = 'new', measuredArg = '6000', warmArg = '20000'] = process.argv.slice(2);
const measured = Number(measuredArg);
if (!['new', 'newc16', 'replay'].includes(phase)) throw new TypeError(`unknown workload ${phase}`);

if (process.env.RETRYSAFE_BENCH_SIGNAL === undefined) {
  const out = await countAfterWarmUp(import.meta.filename, process.argv.slice(2), { signalVariable: 'RETRYSAFE_BENCH_SIGNAL' });
  process.stdout.write(`${JSON.stringify({ root: resolve(rootArg), phase, measured, ...instructionsPerRequest(out, measured) })}\n`);
} else {
  const { createSqliteStore } = await import(pathToFileURL(join(resolve(rootArg), 'dist/stores/sqlite/index.js')).href);
  const store = createSqliteStore({ path: join(mkdtempSync(join(tmpdir(), 'retrysafe-sqlite-instructions-')), 'records.db') });
  const response = { status: 201, headers: { 'content-type': 'application/json' }, body: new TextEncoder().encode('{"id":"pay_1","amount":1000}') };
  const input = (key) => ({ scope: '', key, fingerprint: 'f'.repeat(64), leaseMs: 30_000, retentionMs: 86_400_000 });
  const completed = Array.from({ length: 64 }, (_, i) => `r-${i}`);
  for (const key of completed) {
    const result = await store.claim(input(key));
    await store.complete(result.claim, response, 86_400_000);
  }
  let k = 0;
  const one = async () => {
    if (phase === 'replay') {
      if ((await store.claim(input(completed[k++ & 63]))).acquired) throw new Error('a replay won its claim');
      return;
    }
    const result = await store.claim(input(`n-${k++}`));
    if (!result.acquired) throw new Error('a new key lost its claim');
    await store.complete(result.claim, response, 86_400_000);
  };
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
