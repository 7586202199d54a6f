import { Body, Controller, Get, Inject, Post } from '@nestjs/common';
import type { SqliteStore } from 'retrysafe/sqlite';
import { Idempotency, Idempotent, type IdempotencyContext } from 'retrysafe/nestjs';
import { STORE } from './store.module.js';

/** The transaction a transactional SQLite receiver hands the handler: the store's connection, inside BEGIN … COMMIT. */
type Tx = SqliteStore['database'];

@Controller('payments')
export class PaymentsController {
  constructor(@Inject(STORE) private readonly store: SqliteStore) {}

  /**
   * A keyed POST (the Idempotency-Key header is required: the module's default). The row and the saved
   * response commit together; a retry with the same key and body gets the saved response back.
   */
  @Post()
  pay(@Body() body: { amount: number }, @Idempotency() idempotency: IdempotencyContext<Tx> | undefined): { id: number; amount: number } {
    if (!idempotency) throw new Error('unreachable: the route requires an Idempotency-Key');
    const { lastInsertRowid } = idempotency.tx
      .prepare('INSERT INTO payments (idempotency_key, amount) VALUES (?, ?)')
      .run(idempotency.key, body.amount);
    return { id: Number(lastInsertRowid), amount: body.amount };
  }

  /** A POST that is safe to repeat: no key needed, nothing stored. */
  @Post('quote')
  @Idempotent({ enabled: false })
  quote(@Body() body: { amount: number }): { fee: number } {
    return { fee: Math.ceil(body.amount * 0.029) + 30 };
  }

  @Get('count')
  count(): { payments: number } {
    return { payments: this.store.database.prepare('SELECT count(*) FROM payments').pluck().get() as number };
  }
}
