/**
 * Runs a simulation for a number of seeds (fast-check `check`, not `assert`, so a failure comes back as
 * data: the seed, the shrunk history and the path that replays it).
 */
import fc from 'fast-check';
import type { Simulation } from './simulations.js';

export interface SimOptions {
  /** fast-check seed; the same seed (and path) runs the same histories. */
  readonly seed: number;
  /** How many histories to run. */
  readonly numRuns: number;
  /** A counterexample path printed by an earlier failure: replays that history only. */
  readonly path?: string;
  /** fast-check's trace of the shrunk commands, printed with a failure; needed with `path` to replay it. */
  readonly replayPath?: string;
  /** The longest history. @defaultValue the simulation's own: 40 steps for a store, 80 for messaging */
  readonly maxCommands?: number;
}

export interface SimFailure {
  readonly seed: number;
  readonly path: string;
  readonly replayPath: string;
  /** The invariant broken, as the shrunk history broke it. */
  readonly message: string;
  /** The shrunk history: the commands that ran, in order. */
  readonly history: string[];
  /** The `maxCommands` the run was given, which a replay needs too (undefined: the default). */
  readonly maxCommands: number | undefined;
}

export interface SimReport {
  readonly store: string;
  /** Histories run before the first failure (all of them when none failed). */
  readonly runs: number;
  /** Wall time in milliseconds, shrinking included. */
  readonly ms: number;
  readonly failure?: SimFailure;
}

export async function simulate(simulation: Simulation, options: SimOptions): Promise<SimReport> {
  const started = performance.now();
  const property = fc.asyncProperty(simulation.commands(options.maxCommands, options.replayPath), (commands) => simulation.run(commands));
  const details = await fc.check(property, {
    seed: options.seed,
    numRuns: options.numRuns,
    ...(options.path === undefined ? {} : { path: options.path }),
  });
  const ms = performance.now() - started;
  if (!details.failed) return { store: simulation.name, runs: details.numRuns, ms };
  const [commands] = details.counterexample ?? [];
  // fast-check's commands iterable prints the commands that ran, then its replay data.
  const printed = commands === undefined ? '' : (commands as unknown as { toString(): string }).toString();
  const error = details.errorInstance;
  return {
    store: simulation.name,
    runs: details.numRuns,
    ms,
    failure: {
      seed: details.seed,
      path: details.counterexamplePath ?? '',
      replayPath: /replayPath="([^"]*)"/.exec(printed)?.[1] ?? '',
      message: error instanceof Error ? error.message : String(error),
      // Commands are joined with "," and never hold ",": anything after " /*" is fast-check's replay data.
      history: printed.replace(/ \/\*.*$/s, '').split(/,(?! )/).filter((step) => step.length > 0),
      maxCommands: options.maxCommands,
    },
  };
}

/** The report of a failure, as the CLI and the tests print it. */
export function describeFailure(report: SimReport): string {
  const { failure } = report;
  if (!failure) return `${report.store}: ok`;
  return [
    `${report.store}: INVARIANT BROKEN after ${report.runs} histories`,
    `  ${failure.message}`,
    `  seed ${failure.seed}, path ${failure.path}`,
    `  replay: npm run sim -- --store ${report.store} --seed ${failure.seed} --path ${failure.path} --replay-path '${failure.replayPath}'${
      failure.maxCommands === undefined ? '' : ` --max-commands ${failure.maxCommands}`
    }`,
    '  shrunk history:',
    ...failure.history.map((step, i) => `    ${String(i + 1).padStart(2)}. ${step}`),
  ].join('\n');
}
