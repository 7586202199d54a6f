/**
 * The Quint model of the claim / lease / fencing protocol (spec/lease.qnt), run with Quint's own
 * simulator (its TypeScript backend, offline): the protocol keeps every invariant over the sampled
 * traces, and the variant without fencing produces the double-execution counterexample.
 */
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const QUINT = fileURLToPath(new URL('../../node_modules/.bin/quint', import.meta.url));

interface Outcome {
  readonly code: number;
  readonly output: string;
}

function quint(...args: string[]): Promise<Outcome> {
  return new Promise((resolve) => {
    execFile(QUINT, [...args, '--backend=typescript'], { cwd: ROOT, timeout: 120_000 }, (error, stdout, stderr) => {
      const code = error === null ? 0 : typeof error.code === 'number' ? error.code : -1;
      resolve({ code, output: `${stdout}${stderr}` });
    });
  });
}

// The simulator samples random traces; a fixed seed makes each run the same.
const RUN = ['run', 'spec/lease.qnt', '--seed=1', '--max-steps=20'];

// Concurrent: each quint process spends most of its time starting up.
describe.concurrent('Quint model of the lease protocol (spec/lease.qnt)', () => {
  it('keeps every invariant with fencing over 500 sampled traces of 20 steps', async () => {
    const { code, output } = await quint(...RUN, '--main=fenced', '--invariant=safety', '--max-samples=500');
    expect(output).toContain('[ok] No violation found');
    expect(code).toBe(0);
  }, 120_000);

  it('finds the double execution without fencing: two committed effects for one key', async () => {
    const { code, output } = await quint(...RUN, '--main=unfenced', '--invariant=atMostOneEffect', '--max-samples=20000');
    expect(output).toContain('[violation] Found an issue');
    expect(output).toMatch(/unfenced::lease::effects: 2/);
    expect(code).not.toBe(0);
  }, 120_000);

  it('replays the stale holder scenario: rolled back with fencing, a second effect without', async () => {
    const fenced = await quint('test', 'spec/lease.qnt', '--main=fenced');
    expect(fenced.output).toMatch(/ok fenced::lease::staleHolderCommitsAfterTakeoverTest passed/);
    expect(fenced.code).toBe(0);
    const unfenced = await quint('test', 'spec/lease.qnt', '--main=unfenced');
    expect(unfenced.output).toMatch(/staleHolderCommitsAfterTakeoverTest/);
    expect(unfenced.output).toContain('Tests failed');
    expect(unfenced.code).not.toBe(0);
  }, 120_000);
});
