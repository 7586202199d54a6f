import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // Many tests do a fixed amount of work against real servers, so their time follows the machine's: with
    // the machine loaded about three times over, several took 25–31 s (a full run 979 s instead of ~300 s).
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: 'forks',
    poolOptions: { forks: { maxForks: 2, minForks: 1 } },
  },
});
