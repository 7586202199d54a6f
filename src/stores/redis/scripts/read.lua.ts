/**
 * The read script: a record's value, rewriting a retrysafe 0.1.0 record hash first.
 *
 * @module
 */
import { READ_RECORD_LUA } from './record.lua.js';

/**
 * Lua source of `read`, which the store runs only when a plain `GET` of a record key answered `WRONGTYPE`
 * (the key holds a record hash written by retrysafe 0.1.0).
 *
 * KEYS[1] — the record's key.
 *
 * Returns the record value (see `layout.ts`) after rewriting the hash as one, keeping its real TTL; or nil
 * when the key is gone. Raises when the key holds something else.
 */
export const READ_LUA = `
${READ_RECORD_LUA}
return v
`;
