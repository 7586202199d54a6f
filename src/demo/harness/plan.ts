/**
 * The fault plan: which logical payments of a demo run meet which fault, decided up front from the seed so
 * a run can be repeated exactly.
 *
 * @module
 */
import { createRandom } from './random.js';

/**
 * What happens to a logical payment's first attempt.
 * - `none`: nothing; one clean request.
 * - `lost-reply`: the server commits, then destroys the socket instead of answering; the client retries.
 * - `slow`: the handler outlasts the client's per-attempt timeout; the client retries while it runs.
 * - `burst`: 3–5 concurrent requests with the same key, as a double-clicking user or a racing retry.
 * - `crash-mid-handler`: the server process is killed (SIGKILL) inside the handler, after the charge row
 *   was written but before COMMIT, then restarted on the same database.
 * - `crash-after-commit`: the server process is killed after COMMIT, before the reply leaves.
 */
export type Fault = 'none' | 'lost-reply' | 'slow' | 'burst' | 'crash-mid-handler' | 'crash-after-commit';

/** Faults the server is told about (the others are client-side behaviour). */
export type ServerFault = Exclude<Fault, 'none' | 'burst'>;

/** The faults that kill the server. */
export type CrashFault = Extract<Fault, 'crash-mid-handler' | 'crash-after-commit'>;

/** One logical payment: one key, one intended charge. */
export interface PlannedPayment {
  readonly index: number;
  /** The Idempotency-Key every attempt of this payment carries. */
  readonly key: string;
  /** Amount in integer minor units (cents). */
  readonly amountCents: number;
  /** ISO 4217 code. */
  readonly currency: string;
  readonly fault: Fault;
  /** How many concurrent calls carry the key: 3–5 for `burst`, otherwise 1. */
  readonly copies: number;
}

/** Options of {@link planFaults}. */
interface PlanOptions {
  /** 32-bit seed of the fault choices. */
  readonly seed: number;
  /** Number of logical payments; at least {@link MIN_PAYMENTS}. */
  readonly payments: number;
  /** Prefix of every key of the run, unique per run so reruns on one database never collide. */
  readonly keyPrefix: string;
  /**
   * The crash faults to plan, one payment each (none when the store dies with the server; only
   * `crash-after-commit` on a plain store, where a crash inside the handler re-executes the payment).
   */
  readonly crashes: readonly CrashFault[];
}

/** Fewest payments a plan accepts: room for every fault kind plus clean traffic around the crashes. */
export const MIN_PAYMENTS = 10;

/** Share of payments given each random fault; the rest are clean. */
const RATES: readonly (readonly [Fault, number])[] = [
  ['lost-reply', 0.12],
  ['slow', 0.025],
  ['burst', 0.08],
];

/**
 * Plans a run. Every plan holds at least one `lost-reply`, one `slow` and one `burst`; and each crash fault
 * asked for once: `crash-mid-handler` in the second quarter, `crash-after-commit` in the third, so traffic is
 * in flight when the server dies and keeps coming after it restarts.
 *
 * @throws TypeError when `payments` is not an integer ≥ {@link MIN_PAYMENTS}, `seed` is not a 32-bit
 *   unsigned integer, or `crashes` holds something other than crash faults
 * @example
 * ```ts
 * const plan = planFaults({ seed: 7, payments: 240, keyPrefix: 'pay-1a2b', crashes: ['crash-mid-handler', 'crash-after-commit'] });
 * ```
 */
export function planFaults(options: PlanOptions): readonly PlannedPayment[] {
  const { seed, payments, keyPrefix, crashes } = options;
  if (!Number.isSafeInteger(payments) || payments < MIN_PAYMENTS) {
    throw new TypeError(`retrysafe: option "payments" must be an integer >= ${MIN_PAYMENTS}, got ${String(payments)}`);
  }
  if (!Number.isInteger(seed) || seed < 0 || seed > 0xffffffff) {
    throw new TypeError(`retrysafe: option "seed" must be an integer in [0, 4294967295], got ${String(seed)}`);
  }
  if (!Array.isArray(crashes) || crashes.some((crash) => crash !== 'crash-mid-handler' && crash !== 'crash-after-commit')) {
    throw new TypeError(`retrysafe: option "crashes" must be an array of "crash-mid-handler" and "crash-after-commit", got ${JSON.stringify(crashes)}`);
  }
  const random = createRandom(seed);
  const faults = new Array<Fault>(payments).fill('none');
  const quarter = Math.floor(payments / 4);
  // Both crash slots are held whichever crashes are asked for (and freed at the end), so a seed plans the
  // same other faults on every store.
  const midHandler = random.int(quarter, 2 * quarter - 1);
  const afterCommit = random.int(2 * quarter, 3 * quarter - 1);
  faults[midHandler] = 'crash-mid-handler';
  faults[afterCommit] = 'crash-after-commit';
  for (const [fault] of RATES) {
    const free = faults.flatMap((f, i) => (f === 'none' ? [i] : []));
    faults[free[random.int(0, free.length - 1)] ?? 0] = fault;
  }
  for (let i = 0; i < payments; i++) {
    if (faults[i] !== 'none') continue;
    let roll = random.next();
    for (const [fault, rate] of RATES) {
      if (roll < rate) {
        faults[i] = fault;
        break;
      }
      roll -= rate;
    }
  }
  if (!crashes.includes('crash-mid-handler')) faults[midHandler] = 'none';
  if (!crashes.includes('crash-after-commit')) faults[afterCommit] = 'none';
  const width = String(payments - 1).length;
  return Object.freeze(
    faults.map((fault, index) =>
      Object.freeze({
        index,
        key: `${keyPrefix}-${String(index).padStart(width, '0')}`,
        amountCents: random.int(100, 500_000),
        currency: random.pick(['EUR', 'USD', 'GBP', 'JPY', 'CHF']),
        fault,
        copies: fault === 'burst' ? random.int(3, 5) : 1,
      }),
    ),
  );
}
