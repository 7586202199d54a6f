/** Runs `fixtures/batch-child.ts` in its own Node process and resolves with the signal it died of. */
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const FIXTURE = fileURLToPath(new URL('./fixtures/batch-child.ts', import.meta.url));

export function runBatchChild(env: Record<string, string>, timeoutMs = 30_000): Promise<NodeJS.Signals | null> {
  const child = spawn(process.execPath, ['--import', 'tsx', FIXTURE], { env: { ...process.env, ...env }, stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`batch child did not crash within ${timeoutMs} ms; stderr: ${stderr}`));
    }, timeoutMs);
    child.on('exit', (code, signal) => {
      clearTimeout(timer);
      if (signal === null) reject(new Error(`batch child exited with code ${code}; stderr: ${stderr}`));
      else resolve(signal);
    });
  });
}
