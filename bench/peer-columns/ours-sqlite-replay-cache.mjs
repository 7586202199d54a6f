// retrysafe + the sqlite store with the receiver's replay cache on (see ./_replay-cache.mjs): its own column,
// beside `ours-sqlite`, which runs with the option off as the README shows.
import { replayCacheColumn } from './_replay-cache.mjs';

export const { meta, start } = replayCacheColumn('sqlite');
