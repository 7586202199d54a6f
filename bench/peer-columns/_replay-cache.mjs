// Shared glue of the `ours-*-replay-cache` columns: retrysafe's Fastify plugin over a store opened as the
// peer benchmark's `ours-*` columns open it (`openReceiver` of its `_retrysafe.mjs`), with the receiver's
// `replayCache` option on (10,000 records, above the 1,000 keys of the replay workload). A helper, not a
// column (its name starts with "_"); copy it with the columns into the peer benchmark's `candidates/`.
import { PRODUCT_LABEL, dep, openReceiver, product } from './_retrysafe.mjs';

/** The `meta` and `start` of the `ours-<kind>-replay-cache` column (`kind`: `redis`, `sqlite`, `postgres`). */
export function replayCacheColumn(kind) {
  return {
    meta: {
      id: `ours-${kind}-replay-cache`,
      label: `${PRODUCT_LABEL}: retrysafe + ${kind} store, replayCache { maxEntries: 10000 } (fastify plugin)`,
      framework: 'fastify',
      store: kind,
      baseline: 'bare-fastify',
      idempotent: true,
      packages: ['fastify'],
    },
    start: (ctx) => startWithReplayCache(kind, ctx),
  };
}

/** Serves POST /payments behind retrysafe on `kind`'s store with the replay cache on. */
async function startWithReplayCache(kind, ctx) {
  const Fastify = dep('fastify');
  const { createReceiver } = await product('.');
  const { idempotency } = await product('./fastify');
  const opened = await openReceiver(kind, ctx);
  const receiver = createReceiver({ store: opened.receiver.store, replayCache: { maxEntries: 10_000 } });
  const app = Fastify({ logger: false, keepAliveTimeout: 60_000 }); // as the bare-fastify floor
  await app.register(idempotency, { receiver });
  app.post('/payments', async (req, reply) => {
    const result = await ctx.work(req.idempotency.key, req.body);
    reply.code(201);
    return result;
  });
  await app.listen({ port: ctx.port, host: ctx.host });
  return {
    close: async () => {
      await app.close();
      await opened.close();
    },
  };
}
