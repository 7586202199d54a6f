/**
 * Every simulation `npm run sim` knows, by name: the claim / lease store simulation on each store (and on
 * the servers' clocks), and the outbox + inbox simulation with the inbox on each of its stores.
 */
import type fc from 'fast-check';
import { openHarness, SIM_STORES, type HarnessOptions, type SimHarness, type SimStoreName } from './harness.js';
import { MESSAGING_SIMS, openMessagingHarness, type MessagingHarness, type MessagingHarnessOptions, type MessagingSimName } from './messaging-harness.js';
import { messagingCommands, runMessagingHistory } from './messaging-model.js';
import { runHistory, storeCommands } from './store-model.js';
import { engineCommands, runEngineHistory, type EngineDefect } from './engine-model.js';
import { runSagaHistory, sagaCommands, type SagaDefect } from './saga-model.js';

/** The saga simulation on each store with atomic phases (plain mode). */
export const SAGA_SIMS = ['saga-memory', 'saga-sqlite', 'saga-postgres', 'saga-redis'] as const;
export type SagaSimName = (typeof SAGA_SIMS)[number];

/** The engine simulation (plain mode: keep-alive, completion retry, batches) on each store with an injected clock. */
export const ENGINE_SIMS = ['engine-memory', 'engine-sqlite', 'engine-postgres', 'engine-redis'] as const;
export type EngineSimName = (typeof ENGINE_SIMS)[number];

export const SIMULATIONS = [...SIM_STORES, ...MESSAGING_SIMS, ...SAGA_SIMS, ...ENGINE_SIMS] as const;
export type SimulationName = SimStoreName | MessagingSimName | SagaSimName | EngineSimName;

/** One simulation over its opened harness: the histories it draws, how one runs, and its teardown. */
export interface Simulation {
  readonly name: string;
  /** Histories of at most `maxCommands` steps; `replayPath` replays a shrunk one. */
  commands(maxCommands: number | undefined, replayPath: string | undefined): fc.Arbitrary<Iterable<unknown>>;
  /** Runs one history (from a reset harness) and its end-of-run invariants; throws on a broken one. */
  run(commands: Iterable<unknown>): Promise<void>;
  close(): Promise<void>;
}

/** The claim / lease simulation over a store harness. */
export function storeSimulation(harness: SimHarness): Simulation {
  return {
    name: harness.name,
    commands: (maxCommands, replayPath) => storeCommands(maxCommands, replayPath, harness.serverClock),
    run: (commands) => runHistory(harness, commands as Parameters<typeof runHistory>[1]),
    close: () => harness.close(),
  };
}

/** The outbox + inbox simulation over a messaging harness. */
export function messagingSimulation(harness: MessagingHarness): Simulation {
  return {
    name: harness.name,
    commands: (maxCommands, replayPath) => messagingCommands(maxCommands, replayPath),
    run: (commands) => runMessagingHistory(harness, commands as Parameters<typeof runMessagingHistory>[1]),
    close: () => harness.close(),
  };
}

/** The booking-saga simulation over a store harness; `defect` plants a bug it must catch. */
export function sagaSimulation(harness: SimHarness, defect?: SagaDefect): Simulation {
  return {
    name: `saga-${harness.name}`,
    commands: (maxCommands, replayPath) => sagaCommands(maxCommands, replayPath),
    run: (commands) => runSagaHistory(harness, commands as Parameters<typeof runSagaHistory>[1], defect),
    close: () => harness.close(),
  };
}

/** The engine simulation over a store harness; `defect` plants a bug in the store it must catch. */
export function engineSimulation(harness: SimHarness, defect?: EngineDefect): Simulation {
  return {
    name: `engine-${harness.name}`,
    commands: (maxCommands, replayPath) => engineCommands(maxCommands, replayPath),
    run: (commands) => runEngineHistory(harness, commands as Parameters<typeof runEngineHistory>[1], defect),
    close: () => harness.close(),
  };
}

/** Opens a simulation by name (its servers must be up). */
export async function openSimulation(name: SimulationName, options: HarnessOptions & MessagingHarnessOptions = {}): Promise<Simulation> {
  if ((ENGINE_SIMS as readonly string[]).includes(name)) return engineSimulation(await openHarness(name.slice('engine-'.length) as SimStoreName));
  if ((SAGA_SIMS as readonly string[]).includes(name)) return sagaSimulation(await openHarness(name.slice('saga-'.length) as SimStoreName));
  if ((MESSAGING_SIMS as readonly string[]).includes(name)) return messagingSimulation(await openMessagingHarness(name as MessagingSimName, options));
  return storeSimulation(await openHarness(name as SimStoreName, options));
}
