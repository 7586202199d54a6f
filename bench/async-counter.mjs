// Preloaded into a bench server by `server-async.mjs` (`node --import`): counts the async resources the
// server creates (promises, process.nextTick callbacks, timers, microtasks …) by type, through an
// `async_hooks` init hook. SIGUSR2 writes the counts so far to stderr as one JSON line. The hook makes
// promises slower (and each `await` then shows up as a promise of its own), so a server counted this way is
// for counting only.
import { createHook } from 'node:async_hooks';
import { writeSync } from 'node:fs';
import process from 'node:process';

const counts = new Map();
createHook({
  init(_id, type) {
    counts.set(type, (counts.get(type) ?? 0) + 1);
  },
}).enable();
process.on('SIGUSR2', () => {
  writeSync(2, `${JSON.stringify(Object.fromEntries(counts))}\n`);
});
