import { describe, expect, it } from 'vitest';
import { runCli } from '../support/run-cli.js';

describe('--store on the command line', () => {
  it('exits 2 with a clear message for an unknown scheme', async () => {
    const result = await runCli(['demo', '--store', 'mongodb://localhost/x']);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('invalid --store "mongodb://localhost/x": unknown scheme "mongodb:"');
    expect(result.stdout).toBe('');
  });

  it.each([
    ['reap', 'postgresql://db.internal'],
    ['migrate', 'postgres:nohost'],
  ])('%s exits 2 for the malformed --store %s', async (command, url) => {
    const result = await runCli([command, '--store', url]);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain(`invalid --store ${JSON.stringify(url)}`);
  });

  it('migrate exits 2 for a store that is not PostgreSQL', async () => {
    const result = await runCli(['migrate', '--store', 'redis://127.0.0.1:6379']);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('"migrate" only applies to PostgreSQL');
  });
});
