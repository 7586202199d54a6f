/**
 * What an enqueue costs the writers: 16 concurrent clients, each committing transactions of one business
 * INSERT (plus one `outbox.enqueue` in the outbox rows) for a fixed time, closed loop. Three rows, measured
 * in the same run:
 * - the business INSERT alone (the baseline);
 * - with an enqueue while no relay waits (a busy relay, or none): the trigger takes the shared waiting lock
 *   and sends no NOTIFY (migration 0007);
 * - with an enqueue while a relay waits: a session holds the waiting lock, as an idle relay does, so every
 *   transaction NOTIFYs — which is what every enqueue did before migration 0007.
 */
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { createOutbox } from '../../src/messaging/outbox/outbox.js';
import { statementsOf } from '../../src/messaging/outbox/statements.js';
import { effectInsert, type BenchContext } from './context.js';

/** Concurrent writer transactions. */
export const ENQUEUE_WRITERS = 16;

export interface EnqueueResult {
  readonly label: string;
  readonly perSecond: number;
}

const payload = JSON.stringify({ orderId: 'o-1', amountCents: 1250, currency: 'EUR' });

async function writeFor(ctx: BenchContext, durationMs: number, enqueue: boolean): Promise<number> {
  const outbox = createOutbox({ schema: ctx.schema });
  const insert = effectInsert(ctx.schema);
  const deadline = performance.now() + durationMs;
  let committed = 0;
  const writer = async (): Promise<void> => {
    const client = await ctx.pool.connect();
    try {
      while (performance.now() < deadline) {
        await client.query('BEGIN');
        const id = randomUUID();
        await client.query(insert, [id, payload]);
        if (enqueue) await outbox.enqueue(client, { topic: 'bench.enqueue', key: id, payload });
        await client.query('COMMIT');
        committed++;
      }
    } finally {
      client.release();
    }
  };
  const started = performance.now();
  await Promise.all(Array.from({ length: ENQUEUE_WRITERS }, writer));
  return (committed / (performance.now() - started)) * 1000;
}

/** Measures the three rows, `durationMs` each; leaves the enqueued rows in the outbox (the schema is dropped after the run). */
export async function enqueueCost(ctx: BenchContext, durationMs: number): Promise<EnqueueResult[]> {
  const business = await writeFor(ctx, durationMs, false);
  const quiet = await writeFor(ctx, durationMs, true);
  // A connection of its own, as a relay's LISTEN connection: the pool's 16 go to the writers.
  const waiter = new pg.Client(ctx.pool.options);
  await waiter.connect();
  let notifying: number;
  try {
    // What a relay runs before it waits (the relay reads the outbox's statements the same way).
    const relayWait = statementsOf(createOutbox({ schema: ctx.schema }))?.relayWait;
    if (relayWait === undefined) throw new Error('createOutbox made an outbox without statements');
    const taken = await waiter.query<{ horizon: string | null }>(relayWait);
    if (taken.rows[0]?.horizon == null) throw new Error('could not take the outbox waiting lock');
    notifying = await writeFor(ctx, durationMs, true);
  } finally {
    await waiter.end();
  }
  return [
    { label: 'business INSERT only (baseline)', perSecond: business },
    { label: '+ enqueue, no relay waiting (no NOTIFY)', perSecond: quiet },
    { label: '+ enqueue, a relay waiting (NOTIFY on every commit)', perSecond: notifying },
  ];
}
