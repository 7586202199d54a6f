/**
 * Simulated processes on virtual time, for the engine simulation: each process is one engine of its own
 * (its keep-alive timer, its completion retries, its handlers' sleeps) whose timers run on a virtual clock
 * the simulation moves, in due order, with every store call settled between two timers.
 *
 * Timers are told apart by the process whose code set them: the engine runs inside an
 * `AsyncLocalStorage` context naming its process, and while a history runs, `setTimeout`,
 * `setInterval`, their `clear*` and `performance.now` answer from the virtual clock inside such a
 * context and from the real one outside it (the stores' drivers, the harness, fast-check). A store call
 * leaves the context (`AsyncLocalStorage.exit`), so a driver's own timers stay real.
 *
 * A crash is total and instant: the process's timers are deleted, and from then on nothing it does
 * reaches anything outside it. A store call it makes never starts, the answer to a call it made before
 * never arrives, a timer it sets never runs, and its handlers' effects never happen (they hang). Only
 * what reached the store before the crash stays, as with a process killed by SIGKILL.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import type { IdempotencyStore } from '../../src/core/store.js';

/** One incarnation of a simulated process: from its start to its crash. */
export class SimProcess {
  dead = false;
  constructor(readonly name: string) {}
}

/** What a piece of code runs under: its process, and the request (or batch) of that process it serves. */
export interface SimContext {
  readonly process: SimProcess;
  readonly request: number;
}

/** The handle a virtual timer answers with (Node's `Timeout` shape, as far as the engine uses it). */
class VirtualHandle {
  constructor(readonly id: number) {}
  ref(): this {
    return this;
  }
  unref(): this {
    return this;
  }
  hasRef(): boolean {
    return false;
  }
  refresh(): this {
    return this;
  }
  [Symbol.toPrimitive](): number {
    return this.id;
  }
}

interface VirtualTimer {
  readonly id: number;
  due: number;
  readonly periodMs: number | undefined;
  readonly callback: () => void;
  readonly context: SimContext;
}

/** How a store call of a process is seen and faulted: `before` may answer instead of the store. */
export interface StoreTap {
  /** Called before the store is: a promise to answer instead (a fault), or `undefined` to call the store. */
  before(context: SimContext, operation: string, args: readonly unknown[]): Promise<unknown> | undefined;
  /** The store's answer (or error), before the process sees it; may return a fault to answer instead. */
  after(context: SimContext, operation: string, args: readonly unknown[], outcome: PromiseSettledResult<unknown>): PromiseSettledResult<unknown>;
}

/**
 * The one context store of every run: an `AsyncLocalStorage` costs every promise of the process a little
 * for as long as it is enabled, so runs share one rather than each adding its own.
 */
const als = new AsyncLocalStorage<SimContext>();

const real = {
  setTimeout: globalThis.setTimeout,
  clearTimeout: globalThis.clearTimeout,
  setInterval: globalThis.setInterval,
  clearInterval: globalThis.clearInterval,
};

/** The virtual clock, its timers, and the processes that run on it. */
export class VirtualTime {
  /** Virtual milliseconds since the run began. */
  now = 0;
  private readonly als = als;
  private readonly timers = new Map<number, VirtualTimer>();
  private nextId = 0;
  /** Store calls under way (real promises), which {@link VirtualTime.settle} waits for. */
  private readonly pending = new Set<Promise<unknown>>();
  private installed = false;

  /** `moveStoreClock` moves the store's clock along with the virtual one (milliseconds). */
  constructor(private readonly moveStoreClock: (ms: number) => void) {}

  /** The context the calling code runs in, if it belongs to a process. */
  current(): SimContext | undefined {
    return this.als.getStore();
  }

  /** Runs `fn` as code of `context`'s process. */
  run<T>(context: SimContext, fn: () => T): T {
    return this.als.run(context, fn);
  }

  /** Puts the virtual timers and `performance.now` in place (until {@link VirtualTime.uninstall}). */
  install(): void {
    if (this.installed) return;
    this.installed = true;
    const own = (handle: unknown): handle is VirtualHandle => handle instanceof VirtualHandle;
    const schedule = (repeat: boolean) =>
      ((callback: (...args: unknown[]) => void, ms?: number, ...args: unknown[]) => {
        const context = this.als.getStore();
        if (context === undefined) return repeat ? real.setInterval(callback, ms, ...args) : real.setTimeout(callback, ms, ...args);
        const id = ++this.nextId;
        const delay = Math.max(1, Math.floor(ms ?? 0));
        if (!context.process.dead) this.timers.set(id, { id, due: this.now + delay, periodMs: repeat ? delay : undefined, callback: () => callback(...args), context });
        return new VirtualHandle(id);
      }) as unknown;
    const clear = (clearReal: (handle: never) => void) => (handle: unknown) => {
      if (own(handle)) this.timers.delete(handle.id);
      else clearReal(handle as never);
    };
    globalThis.setTimeout = schedule(false) as typeof setTimeout;
    globalThis.setInterval = schedule(true) as typeof setInterval;
    globalThis.clearTimeout = clear(real.clearTimeout);
    globalThis.clearInterval = clear(real.clearInterval);
    const realNow = Object.getPrototypeOf(performance) as { now(this: typeof performance): number };
    performance.now = () => (this.als.getStore() === undefined ? realNow.now.call(performance) : this.now);
  }

  /** Puts the real timers and `performance.now` back. */
  uninstall(): void {
    if (!this.installed) return;
    this.installed = false;
    Object.assign(globalThis, real);
    delete (performance as { now?: unknown }).now;
  }

  /** Kills `process`: its timers go, and nothing it does from now on reaches anything outside it. */
  crash(process: SimProcess): void {
    process.dead = true;
    for (const [id, timer] of this.timers) if (timer.context.process === process) this.timers.delete(id);
  }

  /** Whether `process` still has timers set (a crashed one never has). */
  hasTimers(process: SimProcess): boolean {
    for (const timer of this.timers.values()) if (timer.context.process === process) return true;
    return false;
  }

  /**
   * Moves the clock `ms` ahead, running every timer that falls due on the way at its due time (ties in
   * the order they were set), each followed by {@link VirtualTime.settle}; `afterEach` checks the state
   * after every timer.
   */
  async advance(ms: number, afterEach: () => void = () => undefined): Promise<void> {
    const until = this.now + ms;
    for (;;) {
      let next: VirtualTimer | undefined;
      for (const timer of this.timers.values()) if (timer.due <= until && (next === undefined || timer.due < next.due)) next = timer;
      if (next === undefined) break;
      this.moveTo(next.due);
      if (next.periodMs === undefined) this.timers.delete(next.id);
      else next.due += next.periodMs;
      this.als.run(next.context, next.callback);
      await this.settle();
      afterEach();
    }
    this.moveTo(until);
  }

  /**
   * Waits until no store call is under way and the processes' promise chains have run out (two turns of
   * the event loop with nothing pending): what runs now without the clock moving has run.
   */
  async settle(): Promise<void> {
    for (let quiet = 0; quiet < 2; ) {
      if (this.pending.size > 0) {
        quiet = 0;
        await Promise.allSettled([...this.pending]);
      } else quiet++;
      await new Promise((resolve) => setImmediate(resolve));
    }
  }

  /**
   * `store` as the code of a process reaches it: calls start outside the process's context, run past
   * `tap`, are waited for by {@link VirtualTime.settle}, and never start (or answer) once it is dead.
   */
  storeOf(store: IdempotencyStore, tap: StoreTap): IdempotencyStore {
    return new Proxy(store, {
      get: (target, property) => {
        const value: unknown = Reflect.get(target, property);
        if (typeof value !== 'function' || typeof property !== 'string') return value;
        return (...args: unknown[]) => this.call(property, args, tap, () => (value as (...a: unknown[]) => unknown).apply(target, args));
      },
    });
  }

  private call(operation: string, args: readonly unknown[], tap: StoreTap, invoke: () => unknown): Promise<unknown> {
    const context = this.als.getStore();
    if (context === undefined) return Promise.resolve(invoke());
    if (context.process.dead) return new Promise(() => undefined);
    const fault = tap.before(context, operation, args);
    const started = fault ?? this.als.exit(() => Promise.resolve().then(invoke));
    const settled = started.then(
      (value): PromiseSettledResult<unknown> => ({ status: 'fulfilled', value }),
      (reason: unknown): PromiseSettledResult<unknown> => ({ status: 'rejected', reason }),
    );
    this.pending.add(settled);
    return new Promise((resolve, reject) => {
      void settled.then((outcome) => {
        this.pending.delete(settled);
        // What reached the store stays, dead process or not; the tap learns of it (and may crash the
        // process on seeing the answer). A dead process never gets the answer.
        const seen = tap.after(context, operation, args, outcome);
        if (context.process.dead) return;
        if (seen.status === 'fulfilled') resolve(seen.value);
        else reject(seen.reason as Error);
      });
    });
  }

  private moveTo(at: number): void {
    if (at <= this.now) return;
    this.moveStoreClock(at - this.now);
    this.now = at;
  }
}
