/**
 * The CLI's own failures: what went wrong in one line, and the exit code. `main.ts` prints
 * `retrysafe: <message>` and exits with the code; no stack trace reaches the user.
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

/**
 * `url` with its password replaced by `***`, for messages; a value that is not a URL is returned as is.
 *
 * @example
 * ```ts
 * redactUrl('postgres://app:secret@db:5432/app'); // 'postgres://app:***@db:5432/app'
 * ```
 */
export function redactUrl(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password === '') return url;
    parsed.password = '***';
    return parsed.toString();
  } catch {
    return url;
  }
}

/** Error codes of a server that could not be reached at all. */
const CONNECTION_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'ENOTFOUND', 'EAI_AGAIN', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH']);

/**
 * The store at `url` failed: `cannot reach the store at URL: …` when it did not answer (connection
 * refused, unknown host, timed out), `the store at URL refused: …` otherwise (bad credentials, no such
 * database, permission denied).
 *
 * @param url - the `--store` value; its password is redacted in the message
 */
export function unreachable(url: string, cause: unknown): CliFailure {
  const reason = cause instanceof Error ? firstLine(cause.message) || connectionCode(cause) || cause.name : String(cause);
  const what = connectionCode(cause) === undefined ? `the store at ${redactUrl(url)} refused` : `cannot reach the store at ${redactUrl(url)}`;
  return new CliFailure(`${what}: ${reason}`, EXIT_USAGE, { cause });
}

/** The connection error code of `error`, or of the first of an `AggregateError`'s errors (Node tries every address). */
function connectionCode(error: unknown): string | undefined {
  if (error instanceof AggregateError) return connectionCode(error.errors[0]);
  const code = (error as { code?: unknown } | undefined)?.code;
  if (typeof code === 'string' && CONNECTION_CODES.has(code)) return code;
  const cause = (error as { cause?: unknown } | undefined)?.cause;
  return cause === undefined ? undefined : connectionCode(cause);
}

function firstLine(text: string): string {
  return text.split('\n', 1)[0]?.trim() ?? '';
}
