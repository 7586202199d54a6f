/**
 * The engine simulation: seeded histories of plain-mode requests (`Receiver.execute`) and batches
 * (`Receiver.runBatch`) from two processes, each with an engine of its own, on one real store and virtual
 * time (`sim-processes.ts`). Handlers run at once, within a lease, or for more than three leases (so only
 * the keep-alive keeps them); processes crash at any time, in a handler before or after its effect, and
 * right after the store accepted a completion; the store refuses a process's completions, or loses the
 * replies to them, a few times or for longer than the completion retry lasts.
 *
 * Checked at every store call, after every timer and every step: no claim wins a key while a live process
 * holds it (the keep-alive renews it), a live holder's lease never runs out and its completion is never
 * fenced off, a key whose holders all died is taken over `leaseMs` after the last renewal (never stuck), no
 * effect happens again after a saved completion or while another execution of the key is alive, a replay
 * answers the saved response, a fresh answer is saved unless every try of its completion failed for the
 * retry's whole span (and then the engine says it gave up). At the end, with every live request finished
 * and the leases run out, every key answers: its saved response or a new execution.
 */
import fc from 'fast-check';
import { createEngine } from '../../src/core/engine.js';
import { RequestInProgressError } from '../../src/core/errors.js';
import { SILENT_OBSERVER } from '../../src/core/observer.js';
import type { Execution, Receiver } from '../../src/core/receiver.js';
import type { Claim, StoredResponse } from '../../src/core/record.js';
import type { BatchOutcome } from '../../src/core/batch.js';
import type { ClaimInput, ClaimResult, IdempotencyStore } from '../../src/core/store.js';
import { SIM_EPOCH, type SimHarness } from './harness.js';
import { SimProcess, VirtualTime, type SimContext, type StoreTap } from './sim-processes.js';

const SCOPE = 'sim-engine';
const KEYS = ['k1', 'k2', 'k3'] as const;
const FP = 'e'.repeat(64);
const PROCESSES = 2;
/** The engines' lease (milliseconds): renewed every second while work runs. */
const LEASE_MS = 3_000;
const RETENTION_MS = 86_400_000;
/** How long an engine tries a failed completion again (milliseconds). */
const COMPLETION_RETRY_MS = 2_000;
/** How long a handler works (virtual milliseconds): at once, within a lease, over three leases. */
const DURATIONS = [0, 500, 10_000] as const;
const CRASH_POINTS = ['before-effect', 'after-effect', 'after-completion'] as const;
type CrashPoint = (typeof CRASH_POINTS)[number];
/** A completion the store refuses (nothing written), or one it writes and whose reply is lost. */
type CompletionFault = 'refused' | 'reply-lost';

/** A defect planted in the store the engines see, which the simulation must catch. */
export type EngineDefect = 'renew-ignored' | 'complete-not-idempotent';

/** A won claim: one holder of a key's lease, and what became of it. */
interface Holder {
  readonly token: string;
  readonly key: string;
  readonly context: SimContext;
  /** Where its lease ends, as the store last said (virtual milliseconds). */
  leaseEnd: number;
  effects: number;
  /** A completion by its token took effect on the store; `body` is the response saved. */
  accepted: boolean;
  body?: string;
  /** The engine no longer holds it: completed, released, fenced off, given up, or its request ended. */
  ended: boolean;
  released: boolean;
  completeAttempts: number;
  completeFailures: number;
  firstCompleteAt: number;
  lastCompleteAt: number;
}

/** One simulated process slot: its current incarnation, its engine, and the faults it meets. */
interface Slot {
  readonly process: SimProcess;
  readonly receiver: Receiver;
  faults: { left: number; kind: CompletionFault };
  /** Keys whose completion this engine reported abandoned. */
  readonly abandoned: string[];
  /** Lease tokens whose holder dies as soon as the store accepts its completion. */
  readonly dieAfterCompletion: Set<string>;
}

const decoder = new TextDecoder();
const encoder = new TextEncoder();
const hang = <T>(): Promise<T> => new Promise<T>(() => undefined);

/** What a history has done so far, and the checks on it. */
class EngineModel implements StoreTap {
  readonly vt: VirtualTime;
  readonly holders: Holder[] = [];
  private readonly byToken = new Map<string, Holder>();
  private readonly slots: (Slot | undefined)[] = [];
  private readonly slotByProcess = new Map<SimProcess, Slot>();
  private incarnations = 0;
  private nextRequest = 0;
  /** Requests (and batches) not answered yet, by request number, with their process. */
  readonly running = new Map<number, SimProcess>();
  /** The first invariant broken (checked in store callbacks, so it is raised after the step). */
  private broken: string | undefined;

  constructor(
    readonly harness: SimHarness,
    private readonly defect: EngineDefect | undefined,
  ) {
    this.vt = new VirtualTime((ms) => harness.advance(ms));
  }

  fail(message: string): void {
    this.broken ??= `at ${this.vt.now} ms: ${message}`;
  }

  /** Throws the first invariant broken, if any; checks that no live holder's lease ran out. */
  readonly check = (): void => {
    for (const h of this.holders) {
      if (this.live(h) && h.leaseEnd <= this.vt.now) this.fail(`the lease of ${h.token} (${h.key}, held by the live ${h.context.process.name}) ran out at ${h.leaseEnd} ms: not kept alive`);
    }
    if (this.broken !== undefined) throw new Error(this.broken);
  };

  live(h: Holder): boolean {
    return !h.ended && !h.context.process.dead;
  }

  /** Process `p`'s slot, started anew (a fresh engine) when it never ran or its last incarnation crashed. */
  slot(p: number): Slot {
    const current = this.slots[p];
    if (current !== undefined && !current.process.dead) return current;
    const name = `p${p}.${++this.incarnations}`;
    let owners = 0;
    const abandoned: string[] = [];
    const receiver = createEngine(
      { store: this.vt.storeOf(this.storeFor(), this), leaseMs: LEASE_MS, retentionMs: RETENTION_MS, completionRetryMs: COMPLETION_RETRY_MS, generateId: () => `${name}-o${++owners}` },
      () => ({ ...SILENT_OBSERVER, completionAbandoned: (_scope, key) => abandoned.push(key) }),
    );
    const slot: Slot = { process: new SimProcess(name), receiver, faults: { left: 0, kind: 'refused' }, abandoned, dieAfterCompletion: new Set() };
    this.slots[p] = slot;
    this.slotByProcess.set(slot.process, slot);
    return slot;
  }

  /** Process `p`'s current incarnation, when it runs (never started, or crashed: none). */
  incarnation(p: number): SimProcess | undefined {
    const process = this.slots[p]?.process;
    return process?.dead === false ? process : undefined;
  }

  /** The store the engines see: the harness's, or it with the planted defect. */
  private storeFor(): IdempotencyStore {
    const store = this.harness.store;
    if (this.defect === 'renew-ignored') return Object.assign(Object.create(store) as IdempotencyStore, { renew: (claim: Claim) => Promise.resolve(claim) });
    if (this.defect === 'complete-not-idempotent') {
      return Object.assign(Object.create(store) as IdempotencyStore, {
        complete: async (claim: Claim, response: StoredResponse, retentionMs: number) => {
          const record = await store.get(claim.scope, claim.key);
          return record?.state === 'completed' ? false : store.complete(claim, response, retentionMs);
        },
      });
    }
    return store;
  }

  /** The slot `process` ran in (also after it crashed and the slot started anew). */
  private slotOf(process: SimProcess): Slot | undefined {
    return this.slotByProcess.get(process);
  }

  /** Starts request (or batch) `start` as code of process `p`; `answered` checks its answer. */
  start<T>(p: number, start: (slot: Slot, context: SimContext) => Promise<T>, answered: (context: SimContext, value: T) => void): void {
    const slot = this.slot(p);
    const context: SimContext = { process: slot.process, request: ++this.nextRequest };
    this.running.set(context.request, slot.process);
    const settled = this.vt.run(context, () => start(slot, context));
    void settled.then(
      (value) => {
        this.endRequest(context);
        answered(context, value);
      },
      (error: unknown) => {
        this.endRequest(context);
        if (error instanceof RequestInProgressError && !this.holders.some((h) => h.context === context)) return;
        this.fail(`request ${context.request} of ${context.process.name} failed: ${String(error)}`);
      },
    );
  }

  private endRequest(context: SimContext): void {
    this.running.delete(context.request);
    for (const h of this.holders) if (h.context === context) h.ended = true;
  }

  /** The work of one claim: sleeps `durationMs`, applies its effect, answers its token; or dies at `crashAt`. */
  async work(context: SimContext, claim: Claim, durationMs: number, crashAt: CrashPoint | undefined): Promise<{ token: string }> {
    if (crashAt === 'before-effect') return this.die(context);
    if (durationMs > 0) await new Promise((resolve) => setTimeout(resolve, durationMs));
    if (context.process.dead) return hang();
    this.effect(claim.leaseToken);
    if (crashAt === 'after-effect') return this.die(context);
    if (crashAt === 'after-completion') this.slotOf(context.process)?.dieAfterCompletion.add(claim.leaseToken);
    return { token: claim.leaseToken };
  }

  private die<T>(context: SimContext): Promise<T> {
    this.vt.crash(context.process);
    return hang();
  }

  private effect(token: string): void {
    const h = this.byToken.get(token);
    if (h === undefined) return this.fail(`an effect under ${token}, a token no claim handed out`);
    h.effects++;
    for (const g of this.holders) {
      if (g === h || g.key !== h.key || g.effects === 0) continue;
      if (g.accepted) this.fail(`${h.key}: effect under ${h.token} after ${g.token}'s completion was saved`);
      else if (this.live(g)) this.fail(`${h.key}: effect under ${h.token} while ${g.token} (${g.context.process.name}, alive, effect done) still holds it`);
    }
  }

  before(context: SimContext, operation: string, args: readonly unknown[]): Promise<unknown> | undefined {
    if (operation !== 'complete') return undefined;
    const h = this.byToken.get((args[0] as Claim).leaseToken);
    const slot = this.slotOf(context.process);
    if (h === undefined || slot === undefined) return undefined;
    h.completeAttempts++;
    if (h.completeAttempts === 1) h.firstCompleteAt = this.vt.now;
    h.lastCompleteAt = this.vt.now;
    if (slot.faults.left === 0 || slot.faults.kind !== 'refused') return undefined;
    slot.faults.left--;
    h.completeFailures++;
    return Promise.reject(new Error('simulated: the store refused the write'));
  }

  after(context: SimContext, operation: string, args: readonly unknown[], outcome: PromiseSettledResult<unknown>): PromiseSettledResult<unknown> {
    const failure = outcome.status === 'rejected' ? (outcome.reason instanceof Error ? outcome.reason : new Error(String(outcome.reason))) : undefined;
    if (operation === 'claim') this.claimed(context, args[0] as ClaimInput, failure ?? (outcome as PromiseFulfilledResult<ClaimResult>).value);
    if (operation === 'claimMany') {
      const inputs = args[0] as ClaimInput[];
      inputs.forEach((input, i) => this.claimed(context, input, failure ?? (outcome as PromiseFulfilledResult<ClaimResult[]>).value[i]));
    }
    if (operation === 'renew') this.renewed(args[0] as Claim, outcome);
    if (operation === 'release' && outcome.status === 'fulfilled' && outcome.value === true) {
      const h = this.byToken.get((args[0] as Claim).leaseToken);
      if (h) h.released = h.ended = true;
    }
    if (operation === 'complete') return this.completed(context, args[0] as Claim, args[1] as StoredResponse, outcome);
    return outcome;
  }

  private claimed(context: SimContext, input: ClaimInput, result: ClaimResult | Error | undefined): void {
    const now = this.vt.now;
    if (result === undefined || result instanceof Error) return this.fail(`claim of ${input.key} failed: ${String(result)}`);
    const answer = result;
    const others = this.holders.filter((h) => h.key === input.key);
    if (answer.acquired) {
      const { claim } = answer;
      for (const h of others) {
        if (this.live(h)) this.fail(`${context.process.name} won ${input.key} (${claim.leaseToken}) while ${h.token} of the live ${h.context.process.name} holds it`);
        else if (h.accepted) this.fail(`${context.process.name} won ${input.key} over ${h.token}'s saved completion`);
        else if (!h.released && h.leaseEnd > now) this.fail(`${context.process.name} won ${input.key} over ${h.token}'s lease, which ends at ${h.leaseEnd} ms`);
      }
      if (claim.leaseExpiresAt - SIM_EPOCH !== now + LEASE_MS) this.fail(`a claim at ${now} ms got a lease ending at ${claim.leaseExpiresAt - SIM_EPOCH} ms`);
      const h: Holder = { token: claim.leaseToken, key: input.key, context, leaseEnd: claim.leaseExpiresAt - SIM_EPOCH, effects: 0, accepted: false, ended: false, released: false, completeAttempts: 0, completeFailures: 0, firstCompleteAt: 0, lastCompleteAt: 0 };
      this.holders.push(h);
      this.byToken.set(h.token, h);
      return;
    }
    if (answer.record.state === 'completed') {
      if (!others.some((h) => h.accepted)) this.fail(`${input.key} answered as completed, but no completion was saved`);
      return;
    }
    if (!others.some((h) => !h.released && !h.accepted && h.leaseEnd > now)) {
      const ends = others.map((h) => `${h.token} ${h.context.process.dead ? 'dead' : 'alive'}, lease to ${h.leaseEnd} ms`).join('; ');
      this.fail(`${input.key} refused to ${context.process.name} as in flight, but every lease on it has ended (${ends}): no takeover`);
    }
  }

  private renewed(claim: Claim, outcome: PromiseSettledResult<unknown>): void {
    const h = this.byToken.get(claim.leaseToken);
    if (h === undefined || outcome.status === 'rejected') return;
    const renewed = outcome.value as Claim | undefined;
    if (renewed === undefined) {
      if (this.live(h) && !h.accepted) this.fail(`the renewal of ${h.token} (${h.key}, live ${h.context.process.name}) was fenced off`);
      return;
    }
    if (renewed.leaseExpiresAt - SIM_EPOCH !== this.vt.now + LEASE_MS) this.fail(`${h.token} renewed at ${this.vt.now} ms to ${renewed.leaseExpiresAt - SIM_EPOCH} ms`);
    if (!h.accepted && !h.released) h.leaseEnd = renewed.leaseExpiresAt - SIM_EPOCH;
  }

  private completed(context: SimContext, claim: Claim, response: StoredResponse, outcome: PromiseSettledResult<unknown>): PromiseSettledResult<unknown> {
    const h = this.byToken.get(claim.leaseToken);
    const slot = this.slotOf(context.process);
    if (h === undefined || slot === undefined) return outcome;
    if (outcome.status === 'rejected') {
      if (!String(outcome.reason).includes('simulated')) this.fail(`the completion of ${h.token} failed: ${String(outcome.reason)}`);
      return outcome;
    }
    if (outcome.value !== true) {
      this.fail(`the completion of ${h.token} (${h.key}) by the live ${context.process.name} was fenced off`);
      h.ended = true;
      return outcome;
    }
    if (!h.accepted) {
      const other = this.holders.find((g) => g !== h && g.key === h.key && g.accepted);
      if (other) this.fail(`${h.key}: ${h.token}'s completion saved after ${other.token}'s`);
      h.accepted = true;
      h.body = decoder.decode(response.body);
    }
    if (slot.dieAfterCompletion.has(h.token)) this.vt.crash(context.process);
    if (slot.faults.left > 0 && slot.faults.kind === 'reply-lost') {
      slot.faults.left--;
      h.completeFailures++;
      return { status: 'rejected', reason: new Error('simulated: the reply to the completion was lost') };
    }
    h.ended = true;
    return outcome;
  }

  /** Checks a fresh answer under `token` (of `context`'s request): saved, or given up only as the retry allows. */
  checkFresh(context: SimContext, key: string, token: string, body: string, saved: boolean, how: string): void {
    const h = this.byToken.get(token);
    if (h === undefined || h.context !== context || h.key !== key) return this.fail(`${how}: answered fresh under ${token}, which it does not hold`);
    if (body !== JSON.stringify({ token })) this.fail(`${how}: answered ${body}, not its own work's answer`);
    if (saved && !h.accepted) this.fail(`${how}: answered saved, but no completion of ${token} took effect`);
    if (saved) return;
    const slot = this.slotOf(context.process);
    if (h.completeFailures < h.completeAttempts) this.fail(`${how}: answered unsaved, but a completion of ${token} succeeded`);
    if (h.completeAttempts < 2 || h.lastCompleteAt - h.firstCompleteAt < COMPLETION_RETRY_MS / 2) {
      this.fail(`${how}: gave up the completion of ${token} after ${h.completeAttempts} tries over ${h.lastCompleteAt - h.firstCompleteAt} ms`);
    }
    if (!slot?.abandoned.includes(key)) this.fail(`${how}: answered unsaved without reporting the completion abandoned`);
  }

  /** Checks a replayed answer: the saved completion's response. */
  checkReplay(key: string, body: string, how: string): void {
    const saved = this.holders.find((h) => h.key === key && h.accepted);
    if (saved === undefined) this.fail(`${how}: replayed ${body}, but nothing was saved`);
    else if (saved.body !== body) this.fail(`${how}: replayed ${body}, but ${saved.body} was saved`);
  }
}

type EngineCmd = fc.AsyncCommand<EngineModel, EngineModel>;

/** A request of process `p` for `key`, with a handler working `durationMs`, maybe crashing at `crashAt`. */
class RequestCmd implements EngineCmd {
  constructor(
    readonly p: number,
    readonly key: string,
    readonly durationMs: number,
    readonly crashAt: CrashPoint | undefined,
  ) {}
  check = (): boolean => true;
  async run(m: EngineModel): Promise<void> {
    const how = String(this);
    m.start(
      this.p,
      (slot, context) => slot.receiver.execute({ scope: SCOPE, key: this.key, fingerprint: FP }, async ({ claim }) => {
        const value = await m.work(context, claim, this.durationMs, this.crashAt);
        return { status: 200, headers: {}, body: encoder.encode(JSON.stringify(value)) };
      }),
      (context, execution: Execution) => {
        const body = decoder.decode(execution.response.body);
        if (execution.replayed) return m.checkReplay(this.key, body, how);
        const token = (JSON.parse(body) as { token: string }).token;
        m.checkFresh(context, this.key, token, body, execution.saved, how);
      },
    );
    await m.vt.settle();
    m.check();
  }
  toString(): string {
    return `p${this.p} request ${this.key} (${this.durationMs} ms)${this.crashAt === undefined ? '' : ` crash@${this.crashAt}`}`;
  }
}

/** A batch of process `p` over `keys` (duplicates allowed), each item's handler as in {@link RequestCmd}. */
class BatchCmd implements EngineCmd {
  constructor(
    readonly p: number,
    readonly keys: readonly string[],
    readonly durationMs: number,
    readonly crashAt: CrashPoint | undefined,
  ) {}
  check = (): boolean => true;
  async run(m: EngineModel): Promise<void> {
    const how = String(this);
    const items = this.keys.map((key) => ({ scope: SCOPE, key, fingerprint: FP, input: key }));
    m.start(
      this.p,
      (slot, context) => slot.receiver.runBatch(items, (_key, { claim }) => m.work(context, claim, this.durationMs, this.crashAt)),
      (context, outcomes: BatchOutcome<{ token: string }>[]) => {
        outcomes.forEach((outcome, i) => {
          const item = `${how}, item ${i}`;
          const first = this.keys.indexOf(outcome.key);
          const earlier = first < i ? outcomes[first] : undefined;
          if (outcome.status === 'executed') m.checkFresh(context, outcome.key, outcome.value.token, JSON.stringify(outcome.value), outcome.saved, item);
          else if (outcome.status === 'replayed' && earlier?.status === 'executed') {
            if (JSON.stringify(outcome.value) !== JSON.stringify(earlier.value)) m.fail(`${item}: answered ${JSON.stringify(outcome.value)}, its duplicate ${JSON.stringify(earlier.value)}`);
          } else if (outcome.status === 'replayed') m.checkReplay(outcome.key, JSON.stringify(outcome.value), item);
          else if (outcome.status !== 'in_flight') m.fail(`${item}: ${outcome.status}: ${String((outcome as { error?: unknown }).error)}`);
        });
      },
    );
    await m.vt.settle();
    m.check();
  }
  toString(): string {
    return `p${this.p} batch [${this.keys.join(' ')}] (${this.durationMs} ms)${this.crashAt === undefined ? '' : ` crash@${this.crashAt}`}`;
  }
}

class AdvanceCmd implements EngineCmd {
  constructor(readonly ms: number) {}
  check = (): boolean => true;
  async run(m: EngineModel): Promise<void> {
    await m.vt.advance(this.ms, m.check);
    m.check();
  }
  toString(): string {
    return `advance ${this.ms} ms`;
  }
}

class CrashCmd implements EngineCmd {
  constructor(readonly p: number) {}
  check = (): boolean => true;
  run(m: EngineModel): Promise<void> {
    const process = m.incarnation(this.p);
    if (process !== undefined) {
      m.vt.crash(process);
      if (m.vt.hasTimers(process)) m.fail(`p${this.p} kept timers after its crash`);
    }
    m.check();
    return Promise.resolve();
  }
  toString(): string {
    return `p${this.p} crashes`;
  }
}

/** The store fails process `p`'s next `n` completions (refused, or written with the reply lost). */
class FaultCmd implements EngineCmd {
  constructor(
    readonly p: number,
    readonly n: number,
    readonly kind: CompletionFault,
  ) {}
  check = (): boolean => true;
  run(m: EngineModel): Promise<void> {
    m.slot(this.p).faults = { left: this.n, kind: this.kind };
    return Promise.resolve();
  }
  toString(): string {
    return `p${this.p}: next ${this.n} completions ${this.kind}`;
  }
}

/** The commands an engine history is made of; `replayPath` replays a shrunk one. */
export function engineCommands(maxCommands = 30, replayPath?: string): fc.Arbitrary<Iterable<EngineCmd>> {
  const p = fc.integer({ min: 0, max: PROCESSES - 1 });
  const key = fc.constantFrom(...KEYS);
  const duration = fc.constantFrom(...DURATIONS);
  // A crash in one request of four.
  const crash = fc.oneof(fc.constant(undefined), fc.constant(undefined), fc.constant(undefined), fc.constantFrom(...CRASH_POINTS));
  const request = fc.tuple(p, key, duration, crash).map(([w, k, d, c]) => new RequestCmd(w, k, d, c));
  const batch = fc.tuple(p, fc.array(key, { minLength: 1, maxLength: 4 }), duration, crash).map(([w, ks, d, c]) => new BatchCmd(w, ks, d, c));
  const advance = fc.constantFrom(500, LEASE_MS / 3, LEASE_MS + 1, 3 * LEASE_MS).map((ms) => new AdvanceCmd(ms));
  const fault = fc.tuple(p, fc.constantFrom(1, 2, 20), fc.constantFrom('refused' as const, 'reply-lost' as const)).map(([w, n, k]) => new FaultCmd(w, n, k));
  return fc.commands([request, request, request, batch, batch, advance, advance, advance, p.map((w) => new CrashCmd(w)), fault], {
    maxCommands,
    size: 'max',
    ...(replayPath === undefined ? {} : { replayPath }),
  });
}

/** Runs one engine history on the harness's store (reset first), then lets everything finish and every key answer. */
export async function runEngineHistory(harness: SimHarness, commands: Iterable<EngineCmd>, defect?: EngineDefect): Promise<void> {
  await harness.reset();
  const m = new EngineModel(harness, defect);
  m.vt.install();
  try {
    await fc.asyncModelRun(() => ({ model: m, real: m }), commands);
    // No more crashes or faults: the live requests run to their end, then every lease left runs out.
    for (let round = 0; round < 40 && [...m.running.values()].some((process) => !process.dead); round++) await m.vt.advance(1_000, m.check);
    if ([...m.running.values()].some((process) => !process.dead)) m.fail('requests of live processes still running at the end');
    await m.vt.advance(LEASE_MS + 1, m.check);
    for (const key of KEYS) {
      m.start(
        PROCESSES,
        (slot, context) => slot.receiver.execute({ scope: SCOPE, key, fingerprint: FP }, async ({ claim }) => ({ status: 200, headers: {}, body: encoder.encode(JSON.stringify(await m.work(context, claim, 0, undefined))) })),
        (context, execution: Execution) => {
          const body = decoder.decode(execution.response.body);
          if (execution.replayed) m.checkReplay(key, body, `final request of ${key}`);
          else m.checkFresh(context, key, (JSON.parse(body) as { token: string }).token, body, execution.saved, `final request of ${key}`);
        },
      );
      await m.vt.settle();
      if (m.running.size > 0 && [...m.running.values()].some((process) => !process.dead)) m.fail(`final request of ${key} did not finish`);
      m.check();
    }
  } finally {
    m.vt.uninstall();
  }
}
