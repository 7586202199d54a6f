/**
 * The CLI's own failures: what went wrong in one line, and the exit code. `main.ts` prints
 * `retrysafe: <message>` and exits with the code; no stack trace reaches the user. A store that cannot be
 * opened (`StoreOpenError`, `retrysafe/store-url`) is reported the same way, with exit code 2.
 *
 * @module
 */

/** Exit code of a usage error or of an environment the command cannot run in (store unreachable, peer missing). */
export const EXIT_USAGE = 2;

/** A failure the CLI reports as one line on stderr, exiting with {@link CliFailure.exitCode}. */
export class CliFailure extends Error {
  override readonly name = 'CliFailure';

  constructor(
    message: string,
    /** The process exit code. @defaultValue 2 */
    readonly exitCode: number = EXIT_USAGE,
    options?: ErrorOptions,
  ) {
    super(message, options);
  }
}
