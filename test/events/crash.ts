/**
 * Runs `fixtures/append-child.ts` and kills it: the crash-before-commit test of both event stores.
 */
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const CHILD = fileURLToPath(new URL('./fixtures/append-child.ts', import.meta.url));

/** Runs the child with `args`; resolves its stdout lines once it exits (it must exit 0). */
export function runChild(args: readonly string[]): Promise<string[]> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', CHILD, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (err += chunk.toString()));
    child.once('exit', (code) => (code === 0 ? resolve(out.split('\n').filter(Boolean)) : reject(new Error(`child exited ${String(code)}: ${err}`))));
  });
}

/** Starts the child's crash mode and SIGKILLs it once it reports `before-commit`; resolves after it died. */
export function crashBeforeCommit(backend: 'postgres' | 'sqlite', target: string, name: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', CHILD, 'crash', backend, target, name], { stdio: ['ignore', 'pipe', 'pipe'] });
    let err = '';
    child.stderr.on('data', (chunk: Buffer) => (err += chunk.toString()));
    let reached = false;
    child.stdout.on('data', (chunk: Buffer) => {
      if (!reached && chunk.toString().includes('before-commit')) {
        reached = true;
        child.kill('SIGKILL');
      }
    });
    child.once('exit', (_code, signal) => (reached && signal === 'SIGKILL' ? resolve() : reject(new Error(`the child exited before its COMMIT: ${err}`))));
  });
}
