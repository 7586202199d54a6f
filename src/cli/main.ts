#!/usr/bin/env node
/**
 * The `retrysafe` command line. Each command lives in its own file under `src/cli/` and exports
 * `register(program: Command): void`, which adds it with `program.command(name)` (so it inherits the exit
 * and output handling below); adding a command is one import and one entry in {@link COMMANDS}. A command
 * imports its drivers only when it runs (see `peer.ts`), so this file loads none of them.
 *
 * Exit codes: 0 success, 1 the command failed (for `demo`: a payment was charged twice or lost),
 * 2 usage error (unknown option, bad `--store`, bad number) or an environment the command cannot run in
 * (store unreachable, schema or file missing, driver package not installed), reported in one line.
 *
 * @module
 */
import { readFileSync } from 'node:fs';
import { Command, CommanderError } from 'commander';
import { register as registerCompensation } from './compensation.js';
import { register as registerComplete } from './complete.js';
import { register as registerConsole } from './console.js';
import { register as registerDemo } from './demo.js';
import { CliFailure, EXIT_USAGE } from './failure.js';
import { register as registerGateway } from './gateway.js';
import { register as registerInbox } from './inbox.js';
import { register as registerInspect } from './inspect.js';
import { register as registerMigrate } from './migrate.js';
import { register as registerOutbox } from './outbox.js';
import { register as registerReap } from './reap.js';
import { StoreOpenError } from '../store-url.js';

const COMMANDS: readonly ((program: Command) => void)[] = [registerDemo, registerMigrate, registerReap, registerInspect, registerComplete, registerCompensation, registerInbox, registerOutbox, registerConsole, registerGateway];

// The same relative path from src/cli/ (under tsx) and dist/cli/ (installed) reaches the package's manifest.
const { version } = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string };

const program = new Command('retrysafe')
  .description('Idempotency keys, idempotent stores and effectively-once HTTP, from the command line.')
  .version(version, '-V, --version', 'print the version of retrysafe')
  .configureOutput({
    // Commander's usage errors ("error: unknown option '--x'") become one line in the CLI's own voice.
    outputError: (text, write) => write(`retrysafe: ${text.trim().replace(/^error: /, '').replace(/^retrysafe: /, '')} (see --help)\n`),
  })
  .exitOverride();
for (const register of COMMANDS) register(program);

try {
  await program.parseAsync(process.argv);
} catch (error) {
  if (error instanceof CommanderError) {
    // Commander already printed the message (or the help, or the version); only the exit code is ours.
    process.exitCode = error.exitCode === 0 ? 0 : EXIT_USAGE;
  } else if (error instanceof CliFailure || error instanceof StoreOpenError) {
    process.stderr.write(`retrysafe: ${error.message}\n`);
    process.exitCode = error instanceof CliFailure ? error.exitCode : EXIT_USAGE;
  } else {
    process.stderr.write(`retrysafe: ${error instanceof Error ? error.message : String(error)}\n`);
    process.exitCode = 1;
  }
}
