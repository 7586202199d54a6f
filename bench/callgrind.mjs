// What the callgrind-based benches share: running a workload under callgrind with counting switched on only
// once its warm-up is over, and reading the output into instructions per request.
//
// The protocol: the parent (`countAfterWarmUp`) runs `node --single-threaded <script> …` under callgrind
// with counting off and the signal path in an environment variable; the workload warms up, then calls
// `warmedUp`, which writes `<signal>.ready` and waits for `<signal>.go`; the parent switches counting on
// (`callgrind_control -i on`), writes `.go`, and waits for the workload to exit.
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import process from 'node:process';
import { setTimeout as sleep } from 'node:timers/promises';

/**
 * Runs `script` with `args` under callgrind, counting from its `warmedUp` call to its exit; resolves with
 * the callgrind output file. `signalVariable` names the environment variable the script reads the signal
 * path from; `env` adds to this process's environment.
 */
export async function countAfterWarmUp(script, args, { signalVariable, env = {} }) {
  const signal = join(tmpdir(), `retrysafe-callgrind-${process.pid}-${Date.now()}`);
  const out = `${signal}.callgrind`;
  const child = spawn(
    'valgrind',
    ['--tool=callgrind', '--instr-atstart=no', `--callgrind-out-file=${out}`, process.execPath, '--single-threaded', script, ...args],
    { env: { ...process.env, ...env, [signalVariable]: signal }, stdio: 'ignore' },
  );
  const exited = new Promise((done) => child.once('exit', done));
  while (!existsSync(`${signal}.ready`)) {
    if (child.exitCode !== null) throw new Error(`${script} ended before its warm-up did`);
    await sleep(200);
  }
  execFileSync('callgrind_control', ['-i', 'on', String(child.pid)], { stdio: 'ignore' });
  writeFileSync(`${signal}.go`, '');
  await exited;
  for (const file of [`${signal}.ready`, `${signal}.go`]) rmSync(file, { force: true });
  return out;
}

/** In the workload: says the warm-up is over (`signal` from `countAfterWarmUp`), and waits until callgrind counts. */
export async function warmedUp(signal) {
  writeFileSync(`${signal}.ready`, '');
  while (!existsSync(`${signal}.go`)) await sleep(50);
}

/**
 * Instructions per request in the callgrind output file `out` (deleted afterwards), over `measured`
 * requests: in all, without what V8's optimising compilers (TurboFan, Maglev) ran, and without those nor
 * its garbage collector. Self cost by function, from `callgrind_annotate`.
 */
export function instructionsPerRequest(out, measured) {
  const annotated = execFileSync('callgrind_annotate', ['--inclusive=no', '--threshold=100', out], { encoding: 'utf8', maxBuffer: 1 << 28 });
  let total = 0;
  let compile = 0;
  let gc = 0;
  for (const line of annotated.split('\n')) {
    const match = /^\s*([\d,]+)\s+\([^)]*\)\s+(.*)$/.exec(line);
    if (!match) continue;
    const count = Number(match[1].replaceAll(',', ''));
    const name = match[2];
    if (name.startsWith('PROGRAM TOTALS')) total = count;
    else if (/compiler::|maglev::/i.test(name)) compile += count;
    else if (/Scavenge|MarkCompact|heap::|Heap::|Sweeper|Marking|Evacuat/.test(name)) gc += count;
  }
  rmSync(out, { force: true });
  const per = (count) => Math.round(count / measured);
  return { instructions: per(total), withoutCompilation: per(total - compile), withoutCompilationOrGc: per(total - compile - gc) };
}
