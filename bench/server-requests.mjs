// What the per-request server benches share: starting one `npm run bench` server (`.bench-build/bench/server.js`)
// in a child process, and sending it a fixed number of requests (not a time window) from this process.
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import process from 'node:process';
import { createInterface } from 'node:readline';
import { Pool } from 'undici';

/** The compiled bench server; exits the process with a hint when it has not been built. */
export function benchServerScript() {
  const script = join(import.meta.dirname, '..', '.bench-build', 'bench', 'server.js');
  if (!existsSync(script)) {
    process.stderr.write(`${script} is missing: build it with npx tsc -p tsconfig.bench.json\n`);
    process.exit(2);
  }
  return script;
}

/** Spawns `command args` (a bench server, possibly under a tool) and resolves with it once its server listens, and its port. */
export async function startBenchServer(command, args, label) {
  const child = spawn(command, args, { stdio: ['ignore', 'pipe', 'ignore'] });
  const exited = new Promise((done) => child.once('exit', done));
  let port;
  for await (const line of createInterface({ input: child.stdout })) {
    port = JSON.parse(line).port;
    break;
  }
  if (port === undefined) throw new Error(`the ${label} server exited before listening`);
  return { child, exited, port };
}

/**
 * A sender of POST /payments requests to `port` over `connections` undici connections: `new` sends a new
 * key each time (`<prefix>-<n>`), `replay` cycles through `replayKeys` keys (`<prefix>-<n mod replayKeys>`),
 * `no-key` sends none. The prefix is the scenario's name unless given; `replayKeys` is 64 unless given.
 * `send(count)` sends `count` requests, `connections` at a time, request numbers going on from the previous
 * call's; any status of 300 or more throws. `prime()` completes the replay pool's keys once (for `replay`;
 * nothing for the other scenarios), before a warm-up.
 */
export function requestSender(port, scenario, connections, { replayKeys = 64, prefix = scenario } = {}) {
  const body = JSON.stringify({ amount: 1250, currency: 'EUR', customer: 'cus_42' });
  const pool = new Pool(`http://127.0.0.1:${port}`, { connections, pipelining: 1 });
  let sent = 0;
  const keyFor = (n) => (scenario === 'new' ? `${prefix}-${n}` : scenario === 'replay' ? `${prefix}-${n % replayKeys}` : undefined);
  const send = async (count) => {
    const last = sent + count;
    const worker = async () => {
      while (sent < last) {
        const key = keyFor(sent++);
        const headers = { 'content-type': 'application/json', ...(key !== undefined && { 'idempotency-key': key }) };
        const res = await pool.request({ method: 'POST', path: '/payments', headers, body });
        await res.body.dump();
        if (res.statusCode >= 300) throw new Error(`unexpected status ${res.statusCode}`);
      }
    };
    await Promise.all(Array.from({ length: connections }, worker));
  };
  const prime = () => (scenario === 'replay' ? send(replayKeys) : Promise.resolve());
  return { send, prime, close: () => pool.close() };
}
