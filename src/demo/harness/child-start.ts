/**
 * Starting a demo child process (the payments server, the gateway) and waiting, with a watchdog, for it to say
 * whether it started.
 *
 * @module
 */
import { spawn, type ChildProcess, type StdioOptions } from 'node:child_process';

/**
 * Spawns `entry` under this Node.js with this process's loader flags (tsx under tests), without an inspector
 * flag, which would clash on its port. The child runs in a process group of its own, so a terminal's Ctrl-C
 * reaches the demo alone, which stops its children in order and removes what the run wrote.
 */
export function spawnNode(entry: string, args: readonly string[], stdio: StdioOptions): ChildProcess {
  const execArgv = process.execArgv.filter((flag) => !flag.startsWith('--inspect'));
  return spawn(process.execPath, [...execArgv, entry, ...args], { stdio, detached: true });
}

/**
 * The first outcome `watch` reports for `child`'s start (`settle` takes effect once); after `timeoutMs`
 * milliseconds without one, `child` is SIGKILLed and the outcome is `no answer in <timeoutMs> ms`.
 */
export function startOutcome(child: ChildProcess, timeoutMs: number, watch: (settle: (outcome: string) => void) => void): Promise<string> {
  return new Promise((resolve) => {
    let settled = false;
    const settle = (outcome: string): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      resolve(outcome);
    };
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      settle(`no answer in ${timeoutMs} ms`);
    }, timeoutMs);
    watch(settle);
  });
}
