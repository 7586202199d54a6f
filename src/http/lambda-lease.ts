/**
 * The lease of a Lambda invocation, bounded by the time the invocation has left: a function that times
 * out is frozen or killed with its lease still running, so the lease must end when the function does, or
 * every retry would wait out the rest of it (409) although nobody works on the key any more.
 *
 * @module
 */
import type { Context } from 'aws-lambda';
import type { Claim } from '../core/record.js';
import type { Receiver } from '../core/receiver.js';

/** A store that can renew (here: shorten) a lease under its token. */
interface Renewing {
  renew(claim: Claim, leaseMs: number): Promise<Claim | undefined>;
}

function canRenew(store: object): store is Renewing {
  return typeof (store as Partial<Renewing>).renew === 'function';
}

/**
 * When `claim`'s lease outlives the invocation (`context.getRemainingTimeInMillis()`, by the receiver's
 * clock), renews it to end with the invocation: one fenced write, made only then. Set the receiver's
 * `leaseMs` at or below the function's timeout and the write is never needed. A store without `renew`
 * keeps its lease.
 */
export async function boundLeaseToInvocation<Tx>(receiver: Receiver<Tx>, claim: Claim, context: Pick<Context, 'getRemainingTimeInMillis'>): Promise<void> {
  const remainingMs = Math.max(0, Math.floor(context.getRemainingTimeInMillis()));
  const store = receiver.store;
  if (claim.leaseExpiresAt - receiver.options.clock.now() <= remainingMs || !canRenew(store)) return;
  // Fenced off (taken over meanwhile) is left to the completion, which the receiver reports as lease lost.
  await store.renew(claim, remainingMs);
}
