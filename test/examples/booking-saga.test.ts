/**
 * examples/booking-saga runs and prints what its README shows: the first booking completed and replayed,
 * the declined one compensated (its seat released) and its 402 replayed.
 */
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

describe('examples/booking-saga', () => {
  it('prints the README output', async () => {
    const stdout = await new Promise<string>((resolve, reject) => {
      execFile(process.execPath, ['--import', 'tsx', 'examples/booking-saga/booking.ts'], { cwd: ROOT, timeout: 60_000 }, (error, out, stderr) =>
        error ? reject(new Error(`${error.message}\n${stderr}`)) : resolve(out),
      );
    });
    const readme = readFileSync(new URL('../../examples/booking-saga/README.md', import.meta.url), 'utf8');
    const shown = /```text\n([\s\S]*?)```/.exec(readme)?.[1];
    expect(shown).toBeDefined();
    expect(stdout).toBe(shown);
  });
});
