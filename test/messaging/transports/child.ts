/** Runs `fixtures/consumer-child.ts` in its own Node process and resolves with how it ended. */
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const FIXTURE = fileURLToPath(new URL('./fixtures/consumer-child.ts', import.meta.url));

/** Starts the child with `env` added and resolves with its exit signal once it dies (or rejects after `timeoutMs`). */
export function runChild(env: Record<string, string>, timeoutMs = 20_000): Promise<NodeJS.Signals | null> {
  const child = spawn(process.execPath, ['--import', 'tsx', FIXTURE], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stderr = '';
  child.stderr.on('data', (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`consumer child did not crash within ${timeoutMs} ms; stderr: ${stderr}`));
    }, timeoutMs);
    child.on('exit', (code, signal) => {
      clearTimeout(timer);
      if (signal === null) reject(new Error(`consumer child exited with code ${code}; stderr: ${stderr}`));
      else resolve(signal);
    });
  });
}
