/** Runs a fixture in its own Node process (under tsx) that is expected to die by a signal. */
import { spawn } from 'node:child_process';

/**
 * Starts `fixture` with `env` added; resolves with the signal it died of, rejects when it exits with a code or
 * is still alive after `timeoutMs` milliseconds (then it is SIGKILLed). `name` labels the errors.
 */
export function runCrashingChild(fixture: string, name: string, env: Record<string, string>, timeoutMs: number): Promise<NodeJS.Signals | null> {
  const child = spawn(process.execPath, ['--import', 'tsx', fixture], { env: { ...process.env, ...env }, stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`${name} did not crash within ${timeoutMs} ms; stderr: ${stderr}`));
    }, timeoutMs);
    child.on('exit', (code, signal) => {
      clearTimeout(timer);
      if (signal === null) reject(new Error(`${name} exited with code ${code}; stderr: ${stderr}`));
      else resolve(signal);
    });
  });
}
