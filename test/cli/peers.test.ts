/**
 * The CLI with none of the optional peers installed: a copy of the sources in a temporary directory whose
 * `node_modules` holds only the package's own dependencies (and tsx to run the sources), so Node's real
 * resolution finds no `pg`, `ioredis`, `express`, `amqplib` or `nats`; and a second copy with the orders
 * scenario's drivers but not the Kafka client.
 */
import { execFile } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createSqliteStore } from '../../src/stores/sqlite/index.js';
import type { CliResult } from '../support/run-cli.js';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
/** What `npm i retrysafe` brings without peers (`dependencies`), and tsx to run the TypeScript sources. */
const INSTALLED = ['commander', 'better-sqlite3', 'undici', 'tsx'];

/** What `demo --scenario orders --broker kafka` needs besides the Kafka client. */
const ORDERS_DRIVERS = ['pg', 'express', '@opentelemetry/api'];

let dir: string;
let withoutKafka: string;

function run(args: readonly string[], cwd = dir): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    const child = execFile(process.execPath, ['--import', 'tsx', 'src/cli/main.ts', ...args], { cwd, timeout: 60_000 }, (error, stdout, stderr) => {
      if (error && typeof error.code !== 'number') reject(new Error(`${error.message}\n${stderr}`, { cause: error }));
      else resolve({ code: child.exitCode, stdout, stderr });
    });
  });
}

/** A copy of the sources whose `node_modules` links only `packages` (their own dependencies resolve from the real one). */
function copyWith(prefix: string, packages: readonly string[]): string {
  const copy = mkdtempSync(join(tmpdir(), prefix));
  cpSync(join(ROOT, 'src'), join(copy, 'src'), { recursive: true });
  cpSync(join(ROOT, 'package.json'), join(copy, 'package.json'));
  cpSync(join(ROOT, 'tsconfig.json'), join(copy, 'tsconfig.json'));
  for (const name of packages) {
    mkdirSync(dirname(join(copy, 'node_modules', name)), { recursive: true });
    symlinkSync(join(ROOT, 'node_modules', name), join(copy, 'node_modules', name), 'dir');
  }
  return copy;
}

beforeAll(() => {
  dir = copyWith('retrysafe-no-peers-', INSTALLED);
  withoutKafka = copyWith('retrysafe-no-kafka-', [...INSTALLED, ...ORDERS_DRIVERS]);
});

afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
  rmSync(withoutKafka, { recursive: true, force: true });
});

describe('retrysafe without the optional peers installed', () => {
  it('really has none of them to find', async () => {
    const probe = await new Promise<string>((resolve) => {
      execFile(process.execPath, ['--input-type=module', '-e', `await import('pg')`], { cwd: dir }, (_error, _stdout, stderr) => resolve(stderr));
    });
    expect(probe).toContain("Cannot find package 'pg'");
  });

  it('--help and --version work', async () => {
    const [help, version] = await Promise.all([run(['--help']), run(['--version'])]);
    expect(help).toMatchObject({ code: 0, stderr: '' });
    expect(help.stdout).toMatch(/^Usage: retrysafe \[options\] \[command\]/);
    expect(version).toMatchObject({ code: 0, stderr: '', stdout: expect.stringMatching(/^\d+\.\d+\.\d+/) as unknown });
  });

  it('reap --store sqlite: works', async () => {
    const path = join(dir, 'records.db');
    await createSqliteStore({ path }).close();
    const reaped = await run(['reap', '--store', `sqlite:${path}`]);
    expect(reaped).toMatchObject({ code: 0, stderr: '' });
    expect(reaped.stdout).toContain('retrysafe: reaped 0 expired records');
  });

  it.each([
    [['inspect', '--store', 'postgres://app@127.0.0.1:5432/app', 'k'], 'pg'],
    [['migrate', '--store', 'postgres://app@127.0.0.1:5432/app'], 'pg'],
    [['outbox', 'status', '--store', 'postgres://app@127.0.0.1:5432/app'], 'pg'],
    [['inbox', 'dead-letters', '--store', 'postgres://app@127.0.0.1:5432/app'], 'pg'],
    [['reap', '--store', 'redis://127.0.0.1:6379'], 'ioredis'],
    [['demo'], 'express'],
    [['demo', '--scenario', 'orders'], 'pg'],
  ])('%j names the missing package in one line and exits 2', async (args, name) => {
    const result = await run(args);
    expect(result).toMatchObject({ code: 2, stdout: '', stderr: `retrysafe: this command needs the package "${name}": npm i ${name}\n` });
  });
});

describe('retrysafe with the orders scenario\'s drivers but without the Kafka client', () => {
  it('demo --scenario orders --broker kafka names @confluentinc/kafka-javascript in one line and exits 2', async () => {
    const result = await run(['demo', '--scenario', 'orders', '--broker', 'kafka'], withoutKafka);
    const name = '@confluentinc/kafka-javascript';
    expect(result).toMatchObject({ code: 2, stdout: '', stderr: `retrysafe: this command needs the package "${name}": npm i ${name}\n` });
  });
});
