// What the callgrind-based benches share: reading a callgrind output file into instructions per request.
import { execFileSync } from 'node:child_process';
import { rmSync } from 'node:fs';

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
