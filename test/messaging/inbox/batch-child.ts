/** Runs `fixtures/batch-child.ts` in its own Node process and resolves with the signal it died of. */
import { fileURLToPath } from 'node:url';
import { runCrashingChild } from '../../support/crashing-child.js';

const FIXTURE = fileURLToPath(new URL('./fixtures/batch-child.ts', import.meta.url));

export function runBatchChild(env: Record<string, string>, timeoutMs = 30_000): Promise<NodeJS.Signals | null> {
  return runCrashingChild(FIXTURE, 'batch child', env, timeoutMs);
}
