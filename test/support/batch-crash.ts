/**
 * Runs `test/core/fixtures/batch-child.ts` and waits for it to die by SIGKILL halfway through its batch.
 */
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const CHILD = fileURLToPath(new URL('../core/fixtures/batch-child.ts', import.meta.url));
const ROOT = fileURLToPath(new URL('../..', import.meta.url));

/** Runs the child on `kind` at `where` with `count` items, crashing at `crashAt`; resolves the signal that ended it. */
export function crashBatchChild(kind: 'sqlite' | 'postgres' | 'redis', where: string, count: number, crashAt: number): Promise<{ signal: string | null; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', CHILD, kind, where, String(count), String(crashAt)], { cwd: ROOT });
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    child.on('error', reject);
    child.on('exit', (_code, signal) => resolve({ signal, stderr }));
  });
}
