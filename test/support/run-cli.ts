/**
 * Runs the `retrysafe` CLI from source (`node --import tsx src/cli/main.ts …`) as a child process, as a
 * user would run the compiled one, and collects its exit code and output.
 */
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));

/** What a CLI run produced. */
export interface CliResult {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

/** Runs `retrysafe ...args`; never rejects on a non-zero exit. */
export function runCli(args: readonly string[], timeoutMs = 60_000): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    const child = execFile(
      process.execPath,
      ['--import', 'tsx', 'src/cli/main.ts', ...args],
      { cwd: ROOT, timeout: timeoutMs, maxBuffer: 16 * 1024 * 1024 },
      (error, stdout, stderr) => {
        if (error && typeof error.code !== 'number') {
          reject(new Error(`${error.message}\n${stderr}`, { cause: error }));
          return;
        }
        resolve({ code: child.exitCode, stdout, stderr });
      },
    );
  });
}
