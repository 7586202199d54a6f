/**
 * The model-based simulation of claim / lease / fencing / complete / release / reap (fast-check commands).
 *
 * Each run drives one store through a random history: workers claim keys (alone or as concurrent
 * duplicates), commit an effect together with the saved response, crash between the effect and its
 * record, release; the clock moves forward (past leases and retentions) and jumps back; the reaper runs;
 * connections are dropped between and during operations. After every step the store's answer is checked
 * against a model of what it may answer, and after the history the run's invariants are checked:
 *
 * - a claim never takes over a live lease or a live completed record (no double execution), and a record
 *   whose lease (same fingerprint) or retention expired is always claimable (no key stuck past lease +
 *   retention);
 * - no completion is accepted with a stale fencing token, and fencing tokens are never reused;
 * - at most one committed effect per (scope, key) and record generation, exactly one after a success
 *   reply, and every committed effect belongs to the completion that committed with it;
 * - a replay (a refused claim or a read of a completed record) returns the first success's bytes.
 *
 * A store error is allowed only after a fault was injected; the operation is then indeterminate and the
 * model learns its outcome by reading the record back.
 *
 * On the server's clock (`harness.serverClock`), time is the server's, read before and after each
 * operation; clock moves become jumps of this process's clock (up to an hour either way), which the store
 * must ignore: leases last a minute, so none expires during a history unless planted, and a store that took
 * "now" from this process would hand out a live lease or stamp a deadline off by the jump. Planted records
 * (claimed ten minutes ago by the server's clock, as a crashed holder leaves them) are taken over by the
 * server's clock. Instead of waiting out lease + retention at the end, every deadline the store reports is
 * checked against the server's time: none may lie further ahead than its duration, plus the lead of a bound
 * of the server's clock for a store that stamps by one (`SimHarness.stampLeadMs`); a lease never ends before
 * its duration from the time read before the claim.
 */
import fc from 'fast-check';
import type { Claim, IdempotencyRecord, StoredResponse } from '../../src/core/record.js';
import type { ClaimResult } from '../../src/core/store.js';
import type { SimHarness } from './harness.js';

/** The durations of a run, in milliseconds, and the clock moves it draws from. */
export interface SimTiming {
  readonly leaseMs: number;
  /** Retention of a claim (in progress). */
  readonly retentionMs: number;
  /** Retention of a completed record. */
  readonly completedRetentionMs: number;
  /** The moves of `advance` (negative: back). */
  readonly moves: readonly number[];
  /** How long before "now" a planted record was claimed (server's clock only; 0: no planting). */
  readonly plantAgeMs: number;
  /** The retention of a planted record. */
  readonly plantRetentionMs: number;
}

/** On an injected clock: short durations, and moves just around each of them. */
export const INJECTED_TIMING: SimTiming = {
  leaseMs: 1_000,
  retentionMs: 5_000,
  completedRetentionMs: 8_000,
  moves: [1, 300, 999, 1_000, 1_001, 4_000, 5_001, 8_001, 20_000, -700],
  plantAgeMs: 0,
  plantRetentionMs: 0,
};

const HOUR_MS = 3_600_000;

/**
 * On the server's clock: a minute's lease (no run lasts that long), and the process's clock jumping around
 * each duration and by an hour either way.
 */
export const SERVER_TIMING: SimTiming = {
  leaseMs: 60_000,
  retentionMs: 120_000,
  completedRetentionMs: 180_000,
  moves: [1, 300, 59_999, 60_000, 60_001, 120_001, 180_001, 20_000, -700, HOUR_MS, -HOUR_MS],
  plantAgeMs: 600_000,
  plantRetentionMs: HOUR_MS,
};

export const SCOPE = 'sim';
const KEYS = ['k1', 'k2'] as const;
const FINGERPRINTS = ['a'.repeat(64), 'b'.repeat(64)] as const;
const WORKERS = 2;

/** A broken invariant; the message says which and what the store answered. */
export class InvariantViolation extends Error {
  override readonly name = 'InvariantViolation';
}

interface ModelRecord {
  fp: string;
  state: 'in_progress' | 'completed';
  token: string;
  leaseExpiresAt: number;
  expiresAt: number;
  /** A record generation: a new record (not a takeover) starts the next one. */
  gen: number;
  body?: string;
}

interface Held {
  readonly claim: Claim;
  readonly gen: number;
}

/** What the store may answer next, learnt from its earlier answers. */
export class SimModel {
  constructor(
    readonly t: SimTiming,
    /** How far past its duration from the latest "now" a deadline the store stamps may lie (`SimHarness.stampLeadMs`). */
    readonly lead: () => number = () => 0,
  ) {}
  readonly records = new Map<string, ModelRecord>();
  readonly workers: (Held | undefined)[] = Array.from({ length: WORKERS }, () => undefined);
  /** Every fencing token handed out, with its key and generation. */
  readonly tokens = new Map<string, { key: string; gen: number }>();
  /** The first success's body per generation. */
  readonly successes = new Map<number, string>();
  /** Tokens whose completion committed. */
  readonly completed = new Set<string>();
  nextGen = 0;
  faults = 0;
  /**
   * The latest time the store's clock has shown. A record may have been deleted (reaped or swept) at any
   * time it was expired, so after the clock jumps back, a record expired at the horizon may be gone.
   */
  horizon = 0;
}

type Real = SimHarness;
type Cmd = fc.AsyncCommand<SimModel, Real>;

function violation(message: string): never {
  throw new InvariantViolation(message);
}

function show(rec: ModelRecord | undefined): string {
  if (!rec) return 'no record';
  return `${rec.state} token=${rec.token} fp=${rec.fp.slice(0, 1)} lease<${rec.leaseExpiresAt} expires<${rec.expiresAt} gen=${rec.gen}`;
}

function hex(bytes: Uint8Array | undefined): string {
  return Buffer.from(bytes ?? new Uint8Array()).toString('hex');
}

function responseFor(claim: Claim): StoredResponse {
  const text = new TextEncoder().encode(`${claim.key}|${claim.leaseToken}|`);
  const body = new Uint8Array(text.length + 4);
  body.set(text);
  body.set([0, 255, 13, 10], text.length);
  return { status: 201, headers: { 'content-type': 'application/octet-stream' }, body };
}

/** A store call that may fail only after an injected fault; `undefined` stands for "indeterminate". */
async function guarded<T>(m: SimModel, what: string, call: () => Promise<T>): Promise<T | undefined> {
  try {
    return await call();
  } catch (error) {
    if (m.faults === 0) violation(`${what} failed with no fault injected: ${String(error)}`);
    return undefined;
  }
}

/** Reads a record once the store answers again (after a dropped connection the first tries may fail). */
async function readBack(m: SimModel, real: Real, key: string): Promise<IdempotencyRecord | undefined> {
  let last: unknown;
  for (let attempt = 0; attempt < 20; attempt++) {
    try {
      return await real.store.get(SCOPE, key);
    } catch (error) {
      last = error;
      if (m.faults === 0) break;
      await new Promise((resolve) => setTimeout(resolve, 5 * (attempt + 1)));
    }
  }
  return violation(`the store did not recover: get(${key}) keeps failing: ${String(last)}`);
}

/** Checks a record the store returned against the model, and forgets a record the store let go. */
function observeRecord(m: SimModel, key: string, found: IdempotencyRecord | undefined, hi: number, how: string): void {
  m.horizon = Math.max(m.horizon, hi);
  const rec = m.records.get(key);
  if (found === undefined) {
    if (rec && rec.expiresAt > m.horizon) violation(`${how}: the record of ${key} vanished within its retention (${show(rec)})`);
    m.records.delete(key);
    return;
  }
  if (!rec) return violation(`${how}: a record of ${key} appeared that no claim made: ${found.state} token=${found.leaseToken}`);
  if (found.leaseToken !== rec.token || found.state !== rec.state || found.fingerprint !== rec.fp) {
    violation(`${how}: the record of ${key} is ${found.state} token=${found.leaseToken}, the model has ${show(rec)}`);
  }
  if (found.state === 'completed') {
    const first = m.successes.get(rec.gen);
    if (hex(found.response?.body) !== first) violation(`${how}: a replay of ${key} returned bytes other than the first success's`);
  }
  // No key stuck past lease + retention: no deadline lies further ahead of the latest "now" than its
  // duration (a store stamping deadlines by a clock that runs ahead breaks this).
  const { leaseMs, retentionMs, completedRetentionMs, plantRetentionMs } = m.t;
  const lead = m.lead();
  if (found.leaseExpiresAt > m.horizon + leaseMs + lead) violation(`${how}: the lease of ${key} ends at ${found.leaseExpiresAt}, over ${leaseMs} ms (+ ${lead} ms of lead) after the latest now ${m.horizon}`);
  const longest = Math.max(retentionMs, completedRetentionMs, plantRetentionMs);
  if (found.expiresAt > m.horizon + longest + lead) violation(`${how}: the retention of ${key} ends at ${found.expiresAt}, over ${longest} ms (+ ${lead} ms of lead) after the latest now ${m.horizon}`);
}

/** Checks a claim's answer against the model and records what it changed. */
function observeClaim(m: SimModel, key: string, fp: string, lo: number, hi: number, result: ClaimResult, how: string): Held | undefined {
  m.horizon = Math.max(m.horizon, hi);
  const rec = m.records.get(key);
  if (result.acquired) {
    const { claim } = result;
    const mayAcquire = !rec || rec.expiresAt <= m.horizon || (rec.state === 'in_progress' && rec.fp === fp && rec.leaseExpiresAt <= hi);
    if (!mayAcquire) violation(`${how}: claim of ${key} was granted over a live record (${show(rec)}): double execution`);
    if (m.tokens.has(claim.leaseToken)) violation(`${how}: fencing token ${claim.leaseToken} handed out twice`);
    const { leaseMs, retentionMs } = m.t;
    // Never earlier than asked; later only by the lead of a bound of the server's clock the store stamps by.
    const lead = m.lead();
    if (claim.leaseExpiresAt < lo + leaseMs || claim.leaseExpiresAt > hi + leaseMs + lead) {
      violation(`${how}: lease ends at ${claim.leaseExpiresAt}, not ${leaseMs} ms from now (${lo}…${hi}, + ${lead} ms of lead)`);
    }
    const takeover = rec !== undefined && rec.expiresAt > lo && rec.state === 'in_progress' && rec.fp === fp;
    if (claim.takeover && !(rec && rec.state === 'in_progress' && rec.fp === fp)) violation(`${how}: claim of ${key} says takeover over ${show(rec)}`);
    const gen = claim.takeover && takeover ? rec.gen : ++m.nextGen;
    m.records.set(key, { fp, state: 'in_progress', token: claim.leaseToken, leaseExpiresAt: claim.leaseExpiresAt, expiresAt: lo + retentionMs, gen });
    m.tokens.set(claim.leaseToken, { key, gen });
    return { claim, gen };
  }
  const mustAcquire = !rec || rec.expiresAt <= lo || (rec.state === 'in_progress' && rec.fp === fp && rec.leaseExpiresAt <= lo);
  if (mustAcquire) violation(`${how}: claim of ${key} was refused though ${rec ? `its ${rec.expiresAt <= lo ? 'retention' : 'lease'} expired (${show(rec)})` : 'it has no record'}: key stuck`);
  observeRecord(m, key, result.record, hi, how);
  return undefined;
}

/** After an indeterminate claim: the record read back tells whether it applied (a new token) or not. */
async function settleClaim(m: SimModel, real: Real, key: string, fp: string, lo: number, how: string): Promise<void> {
  const found = await readBack(m, real, key);
  const hi = await real.now();
  const rec = m.records.get(key);
  if (found && found.state === 'in_progress' && found.leaseToken !== rec?.token && !m.tokens.has(found.leaseToken)) {
    // The claim applied but its answer was lost: its holder never learnt the token (a lost holder).
    const takeover = rec !== undefined && rec.state === 'in_progress' && rec.fp === fp && rec.expiresAt > lo;
    const claim = { scope: SCOPE, key, fingerprint: found.fingerprint, leaseToken: found.leaseToken, leaseExpiresAt: found.leaseExpiresAt, takeover };
    observeClaim(m, key, fp, lo, hi, { acquired: true, claim }, how);
    return;
  }
  observeRecord(m, key, found, hi, how);
}

async function checkEffects(m: SimModel, real: Real, key: string, how: string): Promise<void> {
  const tokens = await real.committedEffects(SCOPE, key);
  const perGen = new Map<number, number>();
  for (const token of tokens) {
    const owner = m.tokens.get(token);
    if (!owner) violation(`${how}: an effect committed under unknown token ${token}`);
    if (!m.completed.has(token)) violation(`${how}: an effect of ${key} committed under ${token}, whose completion did not`);
    perGen.set(owner.gen, (perGen.get(owner.gen) ?? 0) + 1);
  }
  for (const [gen, n] of perGen) if (n > 1) violation(`${how}: ${n} committed effects of ${key} in one record generation (${gen})`);
  for (const token of m.completed) {
    const owner = m.tokens.get(token);
    if (owner?.key === key && perGen.get(owner.gen) !== 1) violation(`${how}: ${key} answered a success under ${token} but has ${perGen.get(owner.gen) ?? 0} committed effects`);
  }
}

class ClaimCmd implements Cmd {
  constructor(
    readonly worker: number,
    readonly key: string,
    readonly fp: string,
    readonly dropDuring: boolean,
  ) {}
  check(m: Readonly<SimModel>): boolean {
    return m.workers[this.worker] === undefined;
  }
  async run(m: SimModel, real: Real): Promise<void> {
    const how = this.toString();
    const lo = await real.now();
    const input = { scope: SCOPE, key: this.key, fingerprint: this.fp, leaseMs: m.t.leaseMs, retentionMs: m.t.retentionMs };
    if (this.dropDuring) m.faults++;
    const [result] = await Promise.all([guarded(m, how, () => real.store.claim(input)), this.dropDuring ? real.dropConnections() : undefined]);
    if (result === undefined) return settleClaim(m, real, this.key, this.fp, lo, how);
    m.workers[this.worker] = observeClaim(m, this.key, this.fp, lo, await real.now(), result, how);
  }
  toString(): string {
    return `claim(w${this.worker}, ${this.key}, fp=${this.fp.slice(0, 1)}${this.dropDuring ? ', dropping connections' : ''})`;
  }
}

class DuplicatesCmd implements Cmd {
  constructor(
    readonly key: string,
    readonly fp: string,
    readonly n: number,
  ) {}
  check(): boolean {
    return true;
  }
  async run(m: SimModel, real: Real): Promise<void> {
    const how = this.toString();
    const lo = await real.now();
    const rec = m.records.get(this.key);
    const input = { scope: SCOPE, key: this.key, fingerprint: this.fp, leaseMs: m.t.leaseMs, retentionMs: m.t.retentionMs };
    const results = await Promise.all(Array.from({ length: this.n }, () => guarded(m, how, () => real.store.claim(input))));
    const hi = await real.now();
    const winners = results.filter((r) => r?.acquired === true);
    if (winners.length > 1) violation(`${how}: ${winners.length} of ${this.n} concurrent claims won (${show(rec)})`);
    if (results.includes(undefined)) return settleClaim(m, real, this.key, this.fp, lo, how);
    const winner = winners[0];
    if (winner?.acquired) {
      // The winner's holder goes quiet (it may come back stale). Claims are atomic and alike, so every loser
      // ran after the winner and saw its record.
      observeClaim(m, this.key, this.fp, lo, hi, winner, how);
      for (const loser of results) if (loser && !loser.acquired) observeRecord(m, this.key, loser.record, hi, how);
    } else {
      for (const loser of results) if (loser) observeClaim(m, this.key, this.fp, lo, hi, loser, how);
    }
  }
  toString(): string {
    return `duplicates(${this.key}, fp=${this.fp.slice(0, 1)}, ${this.n} at once)`;
  }
}

/** A command of a worker that holds a claim: it can run only then. */
abstract class HolderCmd implements Cmd {
  constructor(readonly worker: number) {}
  check(m: Readonly<SimModel>): boolean {
    return m.workers[this.worker] !== undefined;
  }
  abstract run(m: SimModel, real: Real): Promise<void>;
  abstract toString(): string;

  /**
   * The worker's claim, its key's record in the model, and that record again as `current` while it is still
   * the claim's lease (in progress under the claim's token); `undefined` when the worker holds nothing.
   */
  protected held(m: SimModel): { readonly claim: Claim; readonly rec: ModelRecord | undefined; readonly current: ModelRecord | undefined } | undefined {
    const held = m.workers[this.worker];
    if (!held) return undefined;
    const { claim } = held;
    const rec = m.records.get(claim.key);
    return { claim, rec, current: rec !== undefined && rec.state === 'in_progress' && rec.token === claim.leaseToken ? rec : undefined };
  }
}

class CommitCmd extends HolderCmd {
  constructor(
    worker: number,
    readonly dropDuring: boolean,
  ) {
    super(worker);
  }
  async run(m: SimModel, real: Real): Promise<void> {
    const how = this.toString();
    const held = this.held(m);
    if (!held) return;
    const { claim, rec, current } = held;
    const response = responseFor(claim);
    if (this.dropDuring) m.faults++;
    const [answer] = await Promise.all([guarded(m, how, () => real.commit(claim, response, m.t.completedRetentionMs)), this.dropDuring ? real.dropConnections() : undefined]);
    const now = await real.now();
    let ok = answer;
    if (ok === undefined) {
      const found = await readBack(m, real, claim.key);
      ok = found?.state === 'completed' && found.leaseToken === claim.leaseToken;
    }
    if (ok && !current) violation(`${how}: completion accepted with stale fencing token ${claim.leaseToken} (record: ${show(rec)})`);
    m.horizon = Math.max(m.horizon, now);
    if (!ok && current && answer !== undefined && current.expiresAt > m.horizon) violation(`${how}: the current lease holder ${claim.leaseToken} was fenced off (${show(rec)})`);
    if (ok && rec) {
      rec.state = 'completed';
      rec.body = hex(response.body);
      rec.expiresAt = now + m.t.completedRetentionMs;
      m.successes.set(rec.gen, rec.body);
      m.completed.add(claim.leaseToken);
    }
    if (ok || answer !== undefined) m.workers[this.worker] = undefined;
    await checkEffects(m, real, claim.key, how);
  }
  toString(): string {
    return `commit(w${this.worker}${this.dropDuring ? ', dropping connections' : ''})`;
  }
}

class CrashCmd extends HolderCmd {
  async run(m: SimModel, real: Real): Promise<void> {
    const held = m.workers[this.worker];
    if (!held) return;
    m.workers[this.worker] = undefined;
    await guarded(m, this.toString(), () => real.crashAfterEffect(held.claim));
    await checkEffects(m, real, held.claim.key, this.toString());
  }
  toString(): string {
    return `crash after effect(w${this.worker})`;
  }
}

class ReleaseCmd extends HolderCmd {
  async run(m: SimModel, real: Real): Promise<void> {
    const how = this.toString();
    const held = this.held(m);
    if (!held) return;
    const { claim, rec, current } = held;
    const answer = await guarded(m, how, () => real.store.release(claim));
    m.workers[this.worker] = undefined;
    if (answer === undefined) {
      observeRecord(m, claim.key, await readBack(m, real, claim.key), await real.now(), how);
      return;
    }
    if (answer && !current) violation(`${how}: release accepted with stale fencing token ${claim.leaseToken} (record: ${show(rec)})`);
    m.horizon = Math.max(m.horizon, await real.now());
    if (!answer && current && current.expiresAt > m.horizon) violation(`${how}: the current lease holder ${claim.leaseToken} could not release (${show(rec)})`);
    if (answer) m.records.delete(claim.key);
  }
  toString(): string {
    return `release(w${this.worker})`;
  }
}

class AdvanceCmd implements Cmd {
  constructor(
    readonly ms: number,
    /** Whether it moves this process's clock only (the store is on its server's clock). */
    readonly processOnly: boolean,
  ) {}
  check(): boolean {
    return true;
  }
  async run(m: SimModel, real: Real): Promise<void> {
    real.advance(this.ms);
    m.horizon = Math.max(m.horizon, await real.now());
  }
  toString(): string {
    if (this.processOnly) return `process clock jumps ${this.ms < 0 ? 'back' : 'ahead'} ${Math.abs(this.ms)} ms`;
    return this.ms < 0 ? `clock jumps back ${-this.ms} ms` : `advance ${this.ms} ms`;
  }
}

/**
 * On the server's clock: a record as a holder that crashed long ago leaves it, claimed `plantAgeMs` ago by
 * the server's clock (its lease long over, its retention not), with nobody holding it now.
 */
class PlantCmd implements Cmd {
  constructor(
    readonly key: string,
    readonly fp: string,
  ) {}
  check(m: Readonly<SimModel>): boolean {
    return !m.records.has(this.key);
  }
  async run(m: SimModel, real: Real): Promise<void> {
    const how = this.toString();
    const at = (await real.now()) - m.t.plantAgeMs;
    const input = { scope: SCOPE, key: this.key, fingerprint: this.fp, leaseMs: m.t.leaseMs, retentionMs: m.t.plantRetentionMs };
    let result = await guarded(m, how, () => real.plant(input, at));
    if (result === undefined) {
      // Indeterminate: the record read back says whether the claim applied.
      const found = await readBack(m, real, this.key);
      if (found === undefined || m.tokens.has(found.leaseToken)) return observeRecord(m, this.key, found, await real.now(), how);
      result = { acquired: true, claim: { scope: SCOPE, key: this.key, fingerprint: found.fingerprint, leaseToken: found.leaseToken, leaseExpiresAt: found.leaseExpiresAt, takeover: false } };
    }
    if (!result.acquired) return observeRecord(m, this.key, result.record, await real.now(), how);
    const { claim } = result;
    if (claim.leaseExpiresAt !== at + m.t.leaseMs) violation(`${how}: a claim on a clock pinned at ${at} got a lease ending at ${claim.leaseExpiresAt}`);
    if (m.tokens.has(claim.leaseToken)) violation(`${how}: fencing token ${claim.leaseToken} handed out twice`);
    const gen = ++m.nextGen;
    m.records.set(this.key, { fp: this.fp, state: 'in_progress', token: claim.leaseToken, leaseExpiresAt: claim.leaseExpiresAt, expiresAt: at + m.t.plantRetentionMs, gen });
    m.tokens.set(claim.leaseToken, { key: this.key, gen });
  }
  toString(): string {
    return `plant(${this.key}, fp=${this.fp.slice(0, 1)}, claimed long ago by a holder that crashed)`;
  }
}

class ReapCmd implements Cmd {
  constructor(readonly limit: number) {}
  check(): boolean {
    return true;
  }
  async run(m: SimModel, real: Real): Promise<void> {
    const how = this.toString();
    const n = await guarded(m, how, () => real.store.reap(this.limit));
    if (n !== undefined && (n < 0 || n > this.limit)) violation(`${how}: reap deleted ${n} records, limit ${this.limit}`);
    for (const key of KEYS) {
      const rec = m.records.get(key);
      const found = await readBack(m, real, key);
      const now = await real.now();
      if (!found && rec && rec.state === 'in_progress' && rec.leaseExpiresAt > now) violation(`${how}: reap deleted ${key} under a live lease (${show(rec)})`);
      observeRecord(m, key, found, now, how);
    }
  }
  toString(): string {
    return `reap(limit ${this.limit})`;
  }
}

class GetCmd implements Cmd {
  constructor(readonly key: string) {}
  check(): boolean {
    return true;
  }
  async run(m: SimModel, real: Real): Promise<void> {
    const found = await readBack(m, real, this.key);
    observeRecord(m, this.key, found, await real.now(), this.toString());
  }
  toString(): string {
    return `get(${this.key})`;
  }
}

class DropCmd implements Cmd {
  check(): boolean {
    return true;
  }
  async run(m: SimModel, real: Real): Promise<void> {
    m.faults++;
    await real.dropConnections();
  }
  toString(): string {
    return 'drop connections';
  }
}

/** The durations and clock moves of a harness's runs. */
export function timingOf(real: Real): SimTiming {
  return real.serverClock ? SERVER_TIMING : INJECTED_TIMING;
}

/**
 * The commands a history is made of; `maxCommands` bounds a history's length. `replayPath` (fast-check's
 * command-shrinking trace, printed with a failure) replays a shrunk history exactly. On the server's clock
 * (`serverClock`), clock moves jump this process's clock only, and records may be planted.
 */
export function storeCommands(maxCommands = 40, replayPath?: string, serverClock = false): fc.Arbitrary<Iterable<Cmd>> {
  const timing = serverClock ? SERVER_TIMING : INJECTED_TIMING;
  const worker = fc.integer({ min: 0, max: WORKERS - 1 });
  const key = fc.constantFrom(...KEYS);
  const fp = fc.constantFrom(FINGERPRINTS[0], FINGERPRINTS[0], FINGERPRINTS[1]);
  // Faults during an operation: one in five, so most histories still get far.
  const rare = fc.integer({ min: 0, max: 4 }).map((n) => n === 0);
  const claim = fc.tuple(worker, key, fp, rare).map(([w, k, f, drop]) => new ClaimCmd(w, k, f, drop));
  const commit = fc.tuple(worker, rare).map(([w, drop]) => new CommitCmd(w, drop));
  const advance = fc.constantFrom(...timing.moves).map((ms) => new AdvanceCmd(ms, serverClock));
  // Claims, commits and clock moves are listed more than once: a stale holder needs a claim, a lease
  // expiry, a takeover and the stale commit in one history.
  return fc.commands(
    [
      claim,
      claim,
      claim,
      fc.tuple(key, fp, fc.integer({ min: 2, max: 5 })).map(([k, f, n]) => new DuplicatesCmd(k, f, n)),
      commit,
      commit,
      worker.map((w) => new CrashCmd(w)),
      worker.map((w) => new ReleaseCmd(w)),
      advance,
      advance,
      fc.constantFrom(1, 2, 100).map((limit) => new ReapCmd(limit)),
      key.map((k) => new GetCmd(k)),
      fc.constant(new DropCmd()),
      ...(serverClock ? [fc.tuple(key, fp).map(([k, f]) => new PlantCmd(k, f))] : []),
    ],
    { maxCommands, size: 'max', ...(replayPath === undefined ? {} : { replayPath }) },
  );
}

/** Runs one history against the harness (reset first), then the end-of-run invariants. */
export async function runHistory(real: Real, commands: Iterable<Cmd>): Promise<void> {
  await real.reset();
  const t = timingOf(real);
  const m = new SimModel(t, () => real.stampLeadMs?.() ?? 0);
  await fc.asyncModelRun(() => ({ model: m, real }), commands);
  if (real.serverClock) {
    // The server's clock cannot be moved: every record read back must keep its deadlines within lease and
    // retention of the server's now (observeRecord), so it frees itself in time.
    for (const key of KEYS) {
      const how = `final read of ${key}`;
      await checkEffects(m, real, key, how);
      const found = await readBack(m, real, key);
      observeRecord(m, key, found, await real.now(), how);
    }
    return;
  }
  // No key stuck past lease + retention: once both have run out, any fingerprint claims every key.
  real.advance(t.leaseMs + t.retentionMs + t.completedRetentionMs + 1);
  for (const key of KEYS) {
    const how = `final claim of ${key}`;
    await checkEffects(m, real, key, how);
    let result: ClaimResult | undefined;
    for (let attempt = 0; attempt < 20 && result === undefined; attempt++) {
      result = await guarded(m, how, () => real.store.claim({ scope: SCOPE, key, fingerprint: FINGERPRINTS[1], leaseMs: t.leaseMs, retentionMs: t.retentionMs }));
      if (result === undefined) await new Promise((resolve) => setTimeout(resolve, 5 * (attempt + 1)));
    }
    if (!result?.acquired) violation(`${how}: the key is stuck past lease + retention: ${JSON.stringify(result)}`);
  }
}
