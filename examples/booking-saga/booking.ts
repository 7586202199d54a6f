/**
 * A booking saga on SQLite: reserve a seat → charge the card → send the ticket, each an atomic phase with
 * its own transaction and recovery point. A declined card is a terminal failure: the runner compensates
 * the committed phases newest first — here, it releases the seat — and saves a 402 answer that every retry
 * of the request replays. Foreign calls (the card network, the mailer) carry derived keys, so a phase or a
 * compensation re-run after a crash charges, mails or refunds once.
 *
 * Run:  node --import tsx examples/booking-saga/booking.ts [path/to/bookings.db]
 *
 * In an application, import from 'retrysafe' and 'retrysafe/sqlite'.
 */
import type { Database } from 'better-sqlite3';
import { createPhaseRunner, definePhases, TerminalPhaseError } from '../../src/index.js';
import { createSqliteStore } from '../../src/stores/sqlite/index.js';

interface Booking {
  readonly seat: string;
  readonly card: string;
  readonly cents: number;
}

/** A card network that deduplicates by idempotency key, as Stripe does; cards ending in 0002 are declined. */
class CardNetwork {
  private readonly charges = new Map<string, string>();
  readonly refunds = new Map<string, string>();
  charge(card: string, cents: number, idempotencyKey: string): Promise<{ id: string } | { declined: string }> {
    if (card.endsWith('0002')) return Promise.resolve({ declined: 'card_declined' });
    const id = this.charges.get(idempotencyKey) ?? `ch_${this.charges.size + 1}_${cents}`;
    this.charges.set(idempotencyKey, id);
    return Promise.resolve({ id });
  }
  refund(chargeId: string, idempotencyKey: string): Promise<string> {
    const id = this.refunds.get(idempotencyKey) ?? `re_${this.refunds.size + 1}_${chargeId}`;
    this.refunds.set(idempotencyKey, id);
    return Promise.resolve(id);
  }
}

/** A mailer that deduplicates by idempotency key. */
class Mailer {
  readonly sent = new Map<string, string>();
  send(to: string, idempotencyKey: string): Promise<void> {
    this.sent.set(idempotencyKey, to);
    return Promise.resolve();
  }
}

const cards = new CardNetwork();
const mailer = new Mailer();
const encoder = new TextEncoder();
const json = (status: number, value: unknown) => ({ status, headers: { 'content-type': 'application/json' }, body: encoder.encode(JSON.stringify(value)) });

interface BookingState {
  readonly seat: string;
  readonly chargeId?: string;
}

const booking = definePhases<Database, Booking>({
  id: 'booking.create',
  phases: [
    {
      name: 'seat-reserved',
      run: async ({ tx, input, claim }) => {
        const held = tx.prepare('UPDATE seats SET held_by = ? WHERE seat = ? AND held_by IS NULL').run(claim.key, input.seat);
        if (held.changes === 0) throw new TerminalPhaseError(`seat ${input.seat} is taken`);
        return Promise.resolve({ seat: input.seat } satisfies BookingState);
      },
      // The compensation's write commits with its own recovery point, like a phase's.
      compensate: async ({ tx, state, claim }) => {
        tx.prepare('UPDATE seats SET held_by = NULL WHERE seat = ? AND held_by = ?').run((state as BookingState).seat, claim.key);
        return Promise.resolve();
      },
    },
    {
      name: 'card-charged',
      run: async ({ input, state, derivedKey }) => {
        const charge = await cards.charge(input.card, input.cents, derivedKey('charge'));
        if ('declined' in charge) throw new TerminalPhaseError('the card was declined', { details: { decline_code: charge.declined } });
        return { ...(state as BookingState), chargeId: charge.id } satisfies BookingState;
      },
      // derivedKey() here is derivedKey('compensate:card-charged'): one refund, however often this re-runs.
      compensate: async ({ state, derivedKey }) => {
        await cards.refund((state as BookingState).chargeId ?? '', derivedKey());
      },
    },
    {
      name: 'ticket-sent',
      run: async ({ state, derivedKey, claim }) => {
        await mailer.send(claim.key, derivedKey('ticket'));
        return state;
      },
    },
  ],
  respond: (value) => json(201, value),
  compensated: (failure) => json(402, { error: failure.reason, details: failure.details ?? null }),
});

const store = createSqliteStore({ path: process.argv[2] ?? ':memory:' });
store.database.exec(`CREATE TABLE IF NOT EXISTS seats (seat TEXT PRIMARY KEY, held_by TEXT);
  INSERT OR IGNORE INTO seats (seat) VALUES ('12A'), ('12B')`);
const runner = createPhaseRunner({ store, transactional: true });
const fingerprint = 'f'.repeat(64);
const decoder = new TextDecoder();
const seatHolder = (seat: string): unknown => (store.database.prepare('SELECT held_by FROM seats WHERE seat = ?').get(seat) as { held_by: unknown }).held_by;

for (const [key, input] of [
  ['booking-1', { seat: '12A', card: '4242424242424242', cents: 12_000 }],
  ['booking-2', { seat: '12B', card: '4000000000000002', cents: 9_500 }],
] as const) {
  for (const attempt of ['first', 'retry']) {
    const execution = await runner.execute(booking, { scope: 'travellers', key, fingerprint }, input);
    const answer = decoder.decode(execution.response.body);
    console.log(`${key} ${attempt}: ${execution.response.status} ${execution.outcome}${execution.replayed ? ' (replayed)' : ''} ${answer}`);
  }
  console.log(`${key}: seat ${input.seat} held by ${JSON.stringify(seatHolder(input.seat))}`);
}
console.log(`tickets sent: ${mailer.sent.size}, refunds: ${cards.refunds.size}`);
await store.close();
