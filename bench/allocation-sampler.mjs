// Preloaded into a bench server by `server-allocations.mjs` (`node --import`): V8's sampling heap profiler,
// counting every allocation, the ones the garbage collector has already taken included. SIGUSR1 starts
// sampling (once the warm-up is over); SIGUSR2 writes the profile to the file named by
// RETRYSAFE_ALLOCATION_PROFILE and ends the process.
import { writeFileSync } from 'node:fs';
import { Session } from 'node:inspector/promises';
import process from 'node:process';

const out = process.env.RETRYSAFE_ALLOCATION_PROFILE;
if (!out) throw new Error('RETRYSAFE_ALLOCATION_PROFILE is not set');
const session = new Session();
session.connect();
await session.post('HeapProfiler.enable');
// Node reserves SIGUSR1 for starting its inspector; a listener takes the signal over, which this preload wants.
process.on('SIGUSR1', () => {
  void session.post('HeapProfiler.startSampling', {
    samplingInterval: 256,
    includeObjectsCollectedByMajorGC: true,
    includeObjectsCollectedByMinorGC: true,
  });
});
process.on('SIGUSR2', () => {
  session.post('HeapProfiler.stopSampling').then(({ profile }) => {
    writeFileSync(out, JSON.stringify(profile));
    process.exit(0);
  });
});
