/**
 * Fault injection for the demo's payments server. Mounted BEFORE the idempotency middleware, so the
 * response it sabotages is the one that middleware sends after the record (and, in transactional mode,
 * the charge) has committed: the work is done and durable, and the client still never hears of it.
 *
 * @module
 */
import type { NextFunction, Request, RequestHandler, Response } from 'express';
import { IdempotencyKeyInvalidError, parseIdempotencyKey } from '../../index.js';
import type { ServerFault } from './plan.js';

/** The request header that tells the server which fault to inject into this attempt. */
export const FAULT_HEADER = 'x-retrysafe-demo-fault';

/** How long a `slow` handler takes, in milliseconds: longer than the client's per-attempt timeout. */
export const SLOW_HANDLER_MS = 700;

const SERVER_FAULTS: ReadonlySet<string> = new Set<ServerFault>(['lost-reply', 'slow', 'crash-mid-handler', 'crash-after-commit']);

/** A fault this request is to suffer, and the key it is reported under. */
export interface InjectedFault {
  readonly key: string;
  readonly fault: ServerFault;
  /**
   * Crash faults, as reported: the other requests this process had let in and not yet answered when the
   * crash point was reached (0 with `drainBeforeCrash`, which waits for them). Each of them may still commit
   * before the SIGKILL lands, and whatever the process counted of it dies with the process.
   */
  readonly inFlight?: number;
}

/** Options of {@link chaos}. */
interface ChaosOptions {
  /**
   * Called the moment a fault takes effect: `lost-reply` and `crash-after-commit` when the committed reply
   * is about to leave, `slow` when the handler reaches it (see {@link faultOf}), `crash-mid-handler` when the
   * handler calls {@link reachCrashPoint}. After a crash fault the request never finishes; the demo's parent
   * kills the process.
   */
  readonly onFault: (injected: InjectedFault) => void;
  /**
   * Before a crash takes effect, wait until every other request in flight has ended (new ones are not let
   * in, and are left unanswered as the server is about to die), so the crash kills no handler between its
   * business write and its record. For a plain (non-transactional) store, where such a crash would
   * re-execute that payment once its lease expires (docs/redis.md). @defaultValue false
   */
  readonly drainBeforeCrash?: boolean;
}

/** The fault the chaos middleware put on this request, for the handler's own slow and crash points. */
export function faultOf(res: Response): InjectedFault | undefined {
  return (res.locals as { demoFault?: InjectedFault }).demoFault;
}

/**
 * The handler reached the crash point of its `crash-mid-handler` fault: reports it as the chaos middleware
 * reports a crash (see {@link chaos}). The caller then waits for the SIGKILL.
 */
export function reachCrashPoint(res: Response): void {
  (res.locals as { demoCrash?: () => void }).demoCrash?.();
}

/**
 * Creates the chaos middleware. It reads the `x-retrysafe-demo-fault` header of a request with a valid
 * Idempotency-Key, at most once per key in this process (so a retry racing the parent's news of the
 * fault is not faulted again) unless that attempt is answered without a success (below 300), which leaves
 * the fault to a later attempt: `lost-reply` replaces `res.end` with a socket destroy;
 * `crash-after-commit` replaces it with a crash point that never answers (with `drainBeforeCrash`, reached
 * once the other requests in flight have ended); `slow` is left to the handler, and so is
 * `crash-mid-handler`, whose handler calls {@link reachCrashPoint}. From a crash point on, the process is
 * about to be killed and lets no request in (they die unanswered with it); the crash is reported with the
 * number of requests still in flight. Unknown values are ignored, as a server ignores headers it does not know.
 *
 * @example
 * ```ts
 * app.post('/payments', chaos({ onFault: tellParent }), idempotency({ receiver }), handler);
 * ```
 */
export function chaos(options: ChaosOptions): RequestHandler {
  const seen = new Set<string>();
  /** Requests let through and not yet answered (their reply sent, or dropped by a lost-reply fault). */
  const active = new Set<Response>();
  /** Set at a crash point: the process is about to be killed. */
  let crashing = false;
  let draining: (() => void) | undefined;
  const crash = (res: Response, injected: InjectedFault): void => {
    crashing = true;
    active.delete(res);
    if (options.drainBeforeCrash !== true) {
      options.onFault({ ...injected, inFlight: active.size });
      return;
    }
    let told = false;
    draining = () => {
      if (active.size > 0 || told) return;
      told = true;
      options.onFault({ ...injected, inFlight: 0 });
    };
    draining();
  };
  return function chaosMiddleware(req: Request, res: Response, next: NextFunction): void {
    // Past a crash point: this request is never let in, and dies unanswered with the server.
    if (crashing) return;
    // A request counts as in flight until its answer is sent (the record saved), not until its socket
    // closes: a client that timed out leaves its handler running.
    active.add(res);
    const settled = (): void => {
      active.delete(res);
      draining?.();
    };
    const end = res.end.bind(res);
    const answered = function answered(...args: Parameters<Response['end']>): Response {
      settled();
      return end(...args);
    } as Response['end'];
    res.end = answered;
    const header = req.get(FAULT_HEADER);
    const key = header !== undefined && SERVER_FAULTS.has(header) ? keyOf(req) : undefined;
    if (key === undefined || seen.has(key)) {
      next();
      return;
    }
    seen.add(key);
    const injected: InjectedFault = { key, fault: header as ServerFault };
    (res.locals as { demoFault?: InjectedFault }).demoFault = injected;
    // An attempt answered without a success (a 409, a 503, a lease lost before the handler ran) did not
    // meet its fault: a later attempt carries it, or a crash planned for the run would never happen.
    const unmet = (...args: Parameters<Response['end']>): Response => {
      seen.delete(key);
      return answered(...args);
    };
    if (injected.fault === 'lost-reply') {
      res.end = function lostReply(...args: Parameters<Response['end']>): Response {
        if (res.statusCode >= 300) return unmet(...args);
        options.onFault(injected);
        req.socket.destroy();
        settled();
        return res;
      } as Response['end'];
    } else if (injected.fault === 'crash-after-commit') {
      res.end = function crashAfterCommit(...args: Parameters<Response['end']>): Response {
        if (res.statusCode >= 300) return unmet(...args);
        crash(res, injected);
        return res;
      } as Response['end'];
    } else {
      // `slow` and `crash-mid-handler` take effect in the handler; an answer without its success did not run it.
      res.end = function faultInHandler(...args: Parameters<Response['end']>): Response {
        return res.statusCode >= 300 ? unmet(...args) : answered(...args);
      } as Response['end'];
      if (injected.fault === 'crash-mid-handler') (res.locals as { demoCrash?: () => void }).demoCrash = () => crash(res, injected);
    }
    next();
  };
}

function keyOf(req: Request): string | undefined {
  try {
    return parseIdempotencyKey(req.get('idempotency-key') ?? '');
  } catch (error) {
    if (error instanceof IdempotencyKeyInvalidError) return undefined;
    throw error;
  }
}
