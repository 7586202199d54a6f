/**
 * The Lua every record script shares, written into each script where it is used (no helper functions: a
 * function defined in a script is created again on every run): reading a record value and rewriting a
 * record left in the hash layout of retrysafe 0.1.0, reading the head, and packing a record.
 *
 * @module
 */
import { FIXED_BYTES, FIXED_FIELDS, HEAD_FIELDS, TAIL_FORMAT } from '../layout.js';

/** The names the head's fields take in Lua, in layout order. */
type HeadField = (typeof HEAD_FIELDS)[number][0];

/**
 * Lua expression: a record's head packed (see `HEAD_FIELDS` in `layout.ts`) from the Lua expressions
 * given for its fields; `rp` may be `nil` (no recovery point). The text fields are each evaluated twice
 * (for their length and their bytes), so pass names or `ARGV[i]`, not calls.
 */
export function packHeadLua(fields: Record<Exclude<HeadField, 'has_rp'>, string>): string {
  const values = HEAD_FIELDS.map(([name, code]) => {
    if (name === 'has_rp') return `${fields.rp} and 1 or 0`;
    if (name === 'rp') return `#(${fields.rp} or ''), ${fields.rp} or ''`;
    return code === 'I4c0' ? `#${fields[name]}, ${fields[name]}` : fields[name];
  });
  return `struct.pack('${headFormat(HEAD_FIELDS.length)}', ${values.join(', ')})`;
}

/** The head's fields before its first text: the state byte and the four times. */
type FixedField = 'state' | 'lease' | 'created' | 'expires' | 'completed';

// Hot path: docs/hot-path.md#redis-record-layout
/**
 * Lua expression: the head of the record value `value` with its fixed fields (the state byte and the four
 * times) packed anew from the Lua expressions given, and its texts, from the fingerprint on, copied as
 * they stand: no text is read into Lua or packed again.
 */
export function repackFixedLua(fields: Record<FixedField, string>, value: string): string {
  const values = HEAD_FIELDS.slice(0, FIXED_FIELDS).map(([name]) => fields[name as FixedField]);
  return `struct.pack('${headFormat(FIXED_FIELDS)}', ${values.join(', ')}) .. string.sub(${value}, ${FIXED_BYTES + 1})`;
}

/**
 * Lua expression: the tail of a completed record packed from the Lua expressions given for the status (a
 * number), the headers (JSON text) and the body; headers and body are each evaluated twice.
 */
export function packTailLua(status: string, headers: string, body: string): string {
  return `struct.pack('${TAIL_FORMAT}', ${status}, #${headers}, ${headers}, #${body}, ${body})`;
}

/**
 * Lua that reads the head of the record value `v`, from its first field through `last`, into locals named
 * as in `HEAD_FIELDS` (`rp` is `nil` when no recovery point is set), then `at`, where the next field
 * starts. Only what a script needs is read: `struct.unpack` creates a Lua string for every text it reads.
 */
export function unpackHeadLua(last: HeadField): string {
  const count = HEAD_FIELDS.findIndex(([name]) => name === last) + 1;
  const names = HEAD_FIELDS.slice(0, count).map(([name]) => name);
  const unset = names.includes('rp') ? ' if has_rp == 0 then rp = nil end' : '';
  return `local ${names.join(', ')}, at = struct.unpack('${headFormat(count)}', v)${unset}`;
}

/** The `struct` format of the first `count` fields of the head. */
function headFormat(count: number): string {
  return `>${HEAD_FIELDS.slice(0, count)
    .map(([, code]) => code)
    .join('')}`;
}

/**
 * Lua that sets the local `v` to the record value at KEYS[1] (laid out as `layout.ts` describes), or
 * `false` when there is no key. A key that holds a hash — a record written by retrysafe 0.1.0, one hash
 * field per record field — is first rewritten in place as a record value, keeping its remaining real TTL,
 * so every script reads one layout and an upgrade loses no record. Raises when the key holds neither.
 *
 * The `struct` library, part of Redis's Lua since 2.6, packs and reads the fixed layout in C.
 */
export const READ_RECORD_LUA = `
local v = redis.pcall('GET', KEYS[1])
if type(v) == 'table' then
  local h = {}
  if redis.call('TYPE', KEYS[1]).ok == 'hash' then
    h = redis.call('HMGET', KEYS[1], 'state', 'lease', 'created', 'expires', 'completed', 'fp', 'token', 'rp', 'scope', 'key',
      'status', 'headers', 'body')
  end
  local state = 0
  if h[1] == 'in_progress' then state = 1 elseif h[1] == 'completed' then state = 2 else
    error('retrysafe: the record key holds neither a record value nor a retrysafe 0.1.0 record hash')
  end
  local rp = h[8] or nil
  v = ${packHeadLua({
    state: 'state',
    lease: 'tonumber(h[2])',
    created: 'tonumber(h[3])',
    expires: 'tonumber(h[4])',
    completed: "tonumber(h[5] or '0')",
    fp: 'h[6]',
    token: 'h[7]',
    rp: 'rp',
    scope: 'h[9]',
    key: 'h[10]',
  })}
  if state == 2 then v = v .. ${packTailLua('tonumber(h[11])', 'h[12]', 'h[13]')} end
  local ttl = redis.call('PTTL', KEYS[1])
  redis.call('DEL', KEYS[1])
  if ttl > 0 then redis.call('SET', KEYS[1], v, 'PX', ttl) else redis.call('SET', KEYS[1], v) end
end
`;
