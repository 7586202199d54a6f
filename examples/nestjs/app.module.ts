import { Module } from '@nestjs/common';
import { createReceiver } from 'retrysafe';
import { IdempotencyModule, type NestRequest } from 'retrysafe/nestjs';
import type { SqliteStore } from 'retrysafe/sqlite';
import { PaymentsController } from './payments.controller.js';
import { STORE, StoreModule } from './store.module.js';

@Module({
  imports: [
    StoreModule,
    IdempotencyModule.forRootAsync({
      imports: [StoreModule],
      inject: [STORE],
      useFactory: (store: SqliteStore) => ({
        receiver: createReceiver({ store, transactional: true }),
        // In an application: the authenticated account (e.g. `req.user`), never a header the client picks.
        scope: (req: NestRequest) => String(req.headers['x-account-id'] ?? ''),
      }),
    }),
  ],
  controllers: [PaymentsController],
})
export class AppModule {}
