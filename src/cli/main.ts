#!/usr/bin/env node
/**
 * The `retrysafe` command line. Each command lives in its own file under `src/cli/` and exports
 * `register(program: Command): void`, which adds it with `program.command(name)` (so it inherits the exit
 * handling below); adding a command is one import and one entry in {@link COMMANDS}.
 *
 * Exit codes: 0 success, 1 the command failed (for `demo`: a payment was charged twice or lost),
 * 2 usage error (unknown option, bad `--store`, bad number).
 *
 * @module
 */
import { Command, CommanderError } from 'commander';
import { register as registerDemo } from './demo.js';
import { register as registerMigrate } from './migrate.js';
import { register as registerReap } from './reap.js';
import { register as registerInspect } from './inspect.js';
import { register as registerComplete } from './complete.js';
import { register as registerOutbox } from './outbox.js';
import { register as registerInbox } from './inbox.js';

/** Exit code of a usage error (bad flag or value). */
export const EXIT_USAGE = 2;

const COMMANDS: readonly ((program: Command) => void)[] = [registerDemo, registerMigrate, registerReap, registerInspect, registerComplete, registerInbox, registerOutbox];

const program = new Command('retrysafe')
  .description('Idempotency keys, idempotent stores and effectively-once HTTP, from the command line.')
  .showHelpAfterError('(run with --help for usage)')
  .exitOverride();
for (const register of COMMANDS) register(program);

try {
  await program.parseAsync(process.argv);
} catch (error) {
  if (error instanceof CommanderError) {
    // Commander already printed the message (or the help); only the exit code is ours.
    process.exitCode = error.exitCode === 0 ? 0 : EXIT_USAGE;
  } else {
    process.stderr.write(`retrysafe: ${error instanceof Error ? error.message : String(error)}\n`);
    process.exitCode = 1;
  }
}
