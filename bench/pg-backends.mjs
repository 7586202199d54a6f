// The PostgreSQL benchmarks' view of their server backends: a pool whose connections' backend pids and
// statements are counted, and the CPU those backends used (read from /proc, so on this host only).
import { existsSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import process from 'node:process';
import { setTimeout as sleep } from 'node:timers/promises';

/** CPU time (µs) the backends `pids` used so far; 0 for a backend this host cannot see. */
export function serverCpu(pids) {
  let total = 0;
  for (const pid of pids) {
    try {
      const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
      total += ((Number(fields[11]) + Number(fields[12])) * 1e6) / 100;
    } catch {
      // Gone, or on another host: not counted.
    }
  }
  return total;
}

/**
 * A pool of `pg` (the module, as the caller resolved it) of `max` connections to `url` that records each connection's backend pid in `pids` and counts
 * the statements sent through it in `counter.statements`.
 */
export function countingPool(pg, url, max) {
  const pool = new pg.Pool({ connectionString: url, max });
  const pids = new Set();
  const counter = { statements: 0 };
  pool.on('connect', (client) => {
    pids.add(client.processID);
    const query = client.query.bind(client);
    client.query = (...args) => {
      counter.statements++;
      return query(...args);
    };
  });
  return { pool, pids, counter };
}

/**
 * The instruction total callgrind wrote for the backend `pid` into `dir` (`cg.<pid>`, once the backend has
 * exited), waiting up to 60 s for it; the file is removed unless `keep`, then its path goes to stderr.
 */
export async function backendInstructions(dir, pid, keep = false) {
  const file = join(dir, `cg.${pid}`);
  for (let waited = 0; !existsSync(file) || !/\ntotals: /.test(readFileSync(file, 'utf8')); waited++) {
    if (waited > 600) throw new Error(`no callgrind output ${file}: is the server running under callgrind?`);
    await sleep(100);
  }
  const total = Number(/\ntotals: (\d+)/.exec(readFileSync(file, 'utf8'))[1]);
  if (keep) process.stderr.write(`${file}\n`);
  else rmSync(file);
  return total;
}
