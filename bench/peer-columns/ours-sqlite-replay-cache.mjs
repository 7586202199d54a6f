// retrysafe + the sqlite store with the receiver's replay cache on (see ./_replay-cache.mjs): its own column, beside
// `ours-sqlite`, which runs with the option off as the README shows.
import { PRODUCT_LABEL } from './_retrysafe.mjs';
import { startWithReplayCache } from './_replay-cache.mjs';

export const meta = {
  id: 'ours-sqlite-replay-cache',
  label: `${PRODUCT_LABEL}: retrysafe + sqlite store, replayCache { maxEntries: 10000 } (fastify plugin)`,
  framework: 'fastify',
  store: 'sqlite',
  baseline: 'bare-fastify',
  idempotent: true,
  packages: ['fastify'],
};

export function start(ctx) {
  return startWithReplayCache('sqlite', ctx);
}
