/**
 * Loading a command's drivers when it runs. The drivers (`pg`, `ioredis`, `express`, `amqplib`, …) are
 * optional peer dependencies: a command imports the modules that need them through {@link loadPeer}, so
 * `--help`, `--version` and the commands on other stores work without them, and a command whose driver is
 * missing says which package to install.
 *
 * @module
 */
import { CliFailure, EXIT_USAGE } from './failure.js';

/**
 * Runs `load` (a dynamic `import()` of a module that imports a driver) and resolves with what it loaded.
 *
 * @throws {@link CliFailure} (exit 2) `this command needs the package "pg": npm i pg` when a package the
 *   module imports is not installed
 * @throws the import's error otherwise
 * @example
 * ```ts
 * const { migrate } = await loadPeer(() => import('../postgres.js'));
 * ```
 */
export async function loadPeer<T>(load: () => Promise<T>): Promise<T> {
  try {
    return await load();
  } catch (error) {
    const name = missingPackage(error);
    if (name === undefined) throw error;
    throw new CliFailure(`this command needs the package "${name}": npm i ${name}`, EXIT_USAGE, { cause: error });
  }
}

/** The package an `import()` could not find (Node's `ERR_MODULE_NOT_FOUND` for a bare name), if that is the error. */
function missingPackage(error: unknown): string | undefined {
  if (!(error instanceof Error) || (error as NodeJS.ErrnoException).code !== 'ERR_MODULE_NOT_FOUND') return undefined;
  return /^Cannot find package '((?:@[^/']+\/)?[^/']+)/.exec(error.message)?.[1];
}
