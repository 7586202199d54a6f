/**
 * Runs the example on both platforms and checks the Idempotency-Key contract end to end: a keyed POST,
 * its replay (same status and bytes, `Idempotent-Replayed: true`, one row), a 422 for another body under
 * the same key, a 400 without a key. Exits 1 on the first mismatch.
 */
import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import type { SqliteStore } from 'retrysafe/sqlite';
import { createApp, type Platform } from './app.js';
import { STORE } from './store.module.js';

function check(condition: boolean, what: string): void {
  if (!condition) throw new Error(`smoke test failed: ${what}`);
}

async function smoke(platform: Platform): Promise<void> {
  const app = await createApp(platform);
  await app.listen(0, '127.0.0.1');
  try {
    const { port } = (app.getHttpServer() as Server).address() as AddressInfo;
    const pay = (key: string | undefined, body: string): Promise<Response> =>
      fetch(`http://127.0.0.1:${port}/payments`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-account-id': 'acct_1', ...(key !== undefined && { 'idempotency-key': key }) },
        body,
      });
    const first = await pay('order-42', '{"amount":1000}');
    const firstBody = await first.text();
    check(first.status === 201, `first request: status ${first.status} ${firstBody}`);
    check(first.headers.get('idempotent-replayed') === null, 'first request marked as replayed');
    const retry = await pay('order-42', '{"amount":1000}');
    check(retry.status === 201 && (await retry.text()) === firstBody, 'retry is not the saved response');
    check(retry.headers.get('idempotent-replayed') === 'true', 'retry lacks Idempotent-Replayed: true');
    const reused = await pay('order-42', '{"amount":999}');
    check(reused.status === 422 && (reused.headers.get('content-type') ?? '').startsWith('application/problem+json'), `reused key: status ${reused.status}`);
    check((await pay(undefined, '{"amount":1}')).status === 400, 'missing key not refused');
    const quote = await fetch(`http://127.0.0.1:${port}/payments/quote`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"amount":1000}' });
    check(quote.status === 201, `unkeyed route: status ${quote.status}`);
    const count = (await (await fetch(`http://127.0.0.1:${port}/payments/count`)).json()) as { payments: number };
    check(count.payments === 1, `${count.payments} payment rows, expected 1`);
    console.log(`nestjs example on ${platform}: ok`);
  } finally {
    await app.close();
    await app.get<SqliteStore>(STORE).close();
  }
}

for (const platform of ['express', 'fastify'] as const) await smoke(platform);
