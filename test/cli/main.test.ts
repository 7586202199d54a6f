import { describe, expect, it } from 'vitest';
import { runCli } from '../support/run-cli.js';

describe('retrysafe (main)', () => {
  it('--help lists the commands and exits 0', async () => {
    const result = await runCli(['--help']);
    expect(result.code).toBe(0);
    expect(result.stdout).toMatch(/^Usage: retrysafe \[options\] \[command\]/);
    expect(result.stdout).toMatch(/\n\s+demo \[options\]\s+Run a payments API/);
  });

  it('demo --help documents every flag and the exit codes', async () => {
    const result = await runCli(['demo', '--help']);
    expect(result.code).toBe(0);
    for (const flag of ['--payments <n>', '--concurrency <n>', '--seed <n>', '--store <url>', '--json', '--unsafe', '--scenario <name>', '--orders <n>', '--broker <name>', '--amqp <url>']) {
      expect(result.stdout).toContain(flag);
    }
    expect(result.stdout).toMatch(/--broker <name>\s+orders scenario: rabbitmq, or kafka/);
    expect(result.stdout).toMatch(/\(default: "rabbitmq"\)/);
    expect(result.stdout).toContain('Exit codes: 0 passed, 1 a payment was charged twice or lost');
  });

  it.each([
    [['demo', '--payments', '5'], '--payments must be an integer from 10 to 1000000.'],
    [['demo', '--payments', 'many'], '--payments must be an integer from 10 to 1000000.'],
    [['demo', '--concurrency', '0'], '--concurrency must be an integer from 1 to 256.'],
    [['demo', '--seed', '-1'], '--seed must be an integer from 0 to 4294967295.'],
    [['demo', '--bogus'], "unknown option '--bogus'"],
    [['nope'], "unknown command 'nope'"],
  ])('exits 2 on the usage error %j', async (args, message) => {
    const result = await runCli(args);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain(message);
  });
});
