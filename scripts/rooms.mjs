// @ts-check
/**
 * The rooms of `src/` and what each may import, as docs/architecture.md draws them, enforced by the
 * ESLint rule `rooms/allowed-imports` (eslint.config.js): an import, re-export or dynamic `import()` of a
 * file of another room that the room's row does not name is reported. `src/core` names none: the
 * engine imports nothing of ours. `src/demo` imports only the files package.json `exports` maps to, as an
 * example in another project would.
 */
import { readFileSync } from 'node:fs';
import { dirname, join, relative, resolve, sep } from 'node:path';

const root = resolve(import.meta.dirname, '..');

const BACKENDS = ['src/stores/sqlite', 'src/stores/postgres', 'src/stores/redis', 'src/stores/etcd', 'src/stores/dynamodb'];

/**
 * Every room, by its path under the repository, and the rooms it may import; a file belongs to the longest
 * path that contains it. A file of `src/` in no row is refused until it is given one.
 */
export const ALLOWED_IMPORTS = Object.freeze({
  'src/core': [],
  'src/phases': ['src/core'],
  'src/observability': ['src/core'],
  'src/client': ['src/core'],
  'src/stores/sqlite': ['src/core'],
  'src/stores/postgres': ['src/core'],
  'src/stores/redis': ['src/core'],
  'src/stores/etcd': ['src/core'],
  'src/stores/dynamodb': ['src/core'],
  'src/stores': ['src/core', ...BACKENDS],
  'src/http': ['src/core', 'src/observability'],
  'src/sessions': ['src/core', 'src/client', 'src/observability', ...BACKENDS],
  'src/messaging/inbox': ['src/core', 'src/observability', 'src/stores/sqlite', 'src/stores/postgres', 'src/stores/dynamodb'],
  'src/messaging/outbox': ['src/core', 'src/observability', 'src/stores/postgres'],
  'src/messaging/transports': ['src/core', 'src/messaging/inbox', 'src/messaging/outbox'],
  'src/events': ['src/core', 'src/stores/sqlite', 'src/stores/postgres'],
  'src/receiver.ts': ['src/core', 'src/observability'],
  'src/index.ts': ['src/core', 'src/phases', 'src/observability', 'src/stores', 'src/receiver.ts'],
  'src/migrate.ts': ['src/stores/postgres', 'src/messaging/inbox', 'src/messaging/outbox', 'src/sessions', 'src/events'],
  'src/postgres.ts': ['src/stores/postgres', 'src/migrate.ts'],
  'src/dynamodb.ts': ['src/stores/dynamodb', 'src/sessions', 'src/messaging/inbox'],
  'src/store-url.ts': ['src/core', 'src/stores', ...BACKENDS, 'src/postgres.ts', 'src/store-url-open.ts'],
  'src/store-url-open.ts': ['src/core'],
  // The console reads the gateway's indeterminate marker to show and resolve the records it holds.
  'src/console': ['src/core', 'src/sessions', 'src/messaging/inbox', 'src/messaging/outbox', 'src/gateway'],
  // The gateway runs the engine with the OpenTelemetry observer (receiver.ts) over a store opened from its URL;
  // it shares the HTTP adapters' body limit error and replay allow-list.
  'src/gateway': ['src/core', 'src/observability', 'src/http', 'src/receiver.ts', 'src/store-url.ts'],
  'src/cli': [
    'src/core',
    'src/phases',
    'src/observability',
    'src/stores',
    ...BACKENDS,
    'src/migrate.ts',
    'src/postgres.ts',
    'src/store-url.ts',
    'src/sessions',
    'src/messaging/inbox',
    'src/messaging/outbox',
    'src/console',
    'src/gateway',
    'src/demo',
  ],
  'src/demo': 'entry points',
});

/** The source file of each package.json `exports` target (`./dist/x.js` → `src/x.ts`). */
export function entryPoints() {
  const manifest = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
  const targets = Object.values(manifest.exports).flatMap((entry) => (typeof entry === 'object' ? [entry.default] : []));
  return new Set(targets.map((target) => target.replace(/^\.\/dist\//, 'src/').replace(/\.js$/, '.ts')));
}

/** The room of a repository path (the path itself for a file of `src/` in no row), or `undefined` outside `src/`. */
export function roomOf(path) {
  if (!path.startsWith('src/')) return undefined;
  let best;
  for (const room of Object.keys(ALLOWED_IMPORTS)) {
    if ((path === room || path.startsWith(`${room}/`)) && (best === undefined || room.length > best.length)) best = room;
  }
  return best ?? path;
}

/**
 * Why `file` (a repository path) may not import `target` (a repository path), or `undefined` when it may.
 *
 * @param {string} file
 * @param {string} target
 * @param {Set<string>} entries
 */
export function refusal(file, target, entries) {
  const from = roomOf(file);
  const to = roomOf(target);
  if (from === undefined || to === undefined || from === to) return undefined;
  const allowed = ALLOWED_IMPORTS[from];
  if (allowed === undefined) return `${from} is in no row of the rooms table (scripts/rooms.mjs): give it one, and a line in docs/architecture.md`;
  if (allowed === 'entry points') {
    return entries.has(target) ? undefined : `${from} imports only package.json entry points (${target} is none)`;
  }
  return allowed.includes(to) ? undefined : `${from} may not import ${to} (it imports ${allowed.length === 0 ? 'nothing of ours' : allowed.join(', ')})`;
}

/** @type {import('eslint').Rule.RuleModule} */
const allowedImports = {
  meta: { type: 'problem', docs: { description: 'Each room of src/ imports only the rooms docs/architecture.md allows it' }, schema: [] },
  create(context) {
    const file = relative(root, context.filename).split(sep).join('/');
    if (roomOf(file) === undefined) return {};
    const entries = entryPoints();
    /** @param {import('estree').Node | null | undefined} source */
    const check = (source) => {
      if (source?.type !== 'Literal' || typeof source.value !== 'string' || !source.value.startsWith('.')) return;
      const target = relative(root, resolve(dirname(context.filename), source.value)).split(sep).join('/').replace(/\.js$/, '.ts');
      const reason = refusal(file, target, entries);
      if (reason !== undefined) context.report({ node: source, message: reason });
    };
    return {
      ImportDeclaration: (node) => check(node.source),
      ExportNamedDeclaration: (node) => check(node.source),
      ExportAllDeclaration: (node) => check(node.source),
      ImportExpression: (node) => check(node.source),
    };
  },
};

/** The ESLint plugin: `rooms/allowed-imports`. */
export const roomsPlugin = { rules: { 'allowed-imports': allowedImports } };
