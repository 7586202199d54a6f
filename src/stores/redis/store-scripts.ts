/**
 * The Redis store's scripts, one per atomic operation (`scripts/*.lua.ts`), each made once per process:
 * a {@link LuaScript} runs by `EVALSHA` and loads its source when Redis does not have it.
 *
 * @module
 */
import { allowingOom, LuaScript } from './script.js';
import { CHECKPOINT_LUA } from './scripts/checkpoint.lua.js';
import { COMPLETE_LUA } from './scripts/complete.lua.js';
import { LISTEN_LUA } from './scripts/listen.lua.js';
import { READ_LUA } from './scripts/read.lua.js';
import { REAP_LUA } from './scripts/reap.lua.js';
import { RELEASE_LUA } from './scripts/release.lua.js';
import { RENEW_LUA } from './scripts/renew.lua.js';

/** Saves the response, fenced by the lease token. */
export const COMPLETE = new LuaScript(COMPLETE_LUA);
/** Deletes the in-progress record, fenced by the lease token. */
export const RELEASE = new LuaScript(RELEASE_LUA);
/** Deletes one record if its retention has expired and no live lease holds it. */
export const REAP = new LuaScript(REAP_LUA);
/** Records a recovery point and renews the lease, fenced. */
export const CHECKPOINT = new LuaScript(CHECKPOINT_LUA);
/** The completion, allowed to run over `maxmemory` (Redis 7 and later; see `allowingOom`). */
export const COMPLETE_OVER_LIMIT = new LuaScript(allowingOom(COMPLETE_LUA));
/** The checkpoint, allowed over `maxmemory`. */
export const CHECKPOINT_OVER_LIMIT = new LuaScript(allowingOom(CHECKPOINT_LUA));
/** The renewal, allowed over `maxmemory`. */
export const RENEW_OVER_LIMIT = new LuaScript(allowingOom(RENEW_LUA));
/** Reads a record's value, rewriting a retrysafe 0.1.0 record hash first (run only when a plain `GET` answered `WRONGTYPE`). */
export const READ = new LuaScript(READ_LUA);
/** Marks an in-progress record as awaited, so its completion publishes, and reads it. */
export const LISTEN = new LuaScript(LISTEN_LUA);
/** The waiter's mark, allowed over `maxmemory` (Redis 7 and later): a waiter refused there would miss the completion's notice. */
export const LISTEN_OVER_LIMIT = new LuaScript(allowingOom(LISTEN_LUA));
/** Renews the lease, fenced. */
export const RENEW = new LuaScript(RENEW_LUA);
