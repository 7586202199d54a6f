/**
 * `src/core` imports nothing else of ours: every module it names (static, type-only, re-exported or
 * dynamic) is another file under `src/core`, a Node builtin or an npm package — never another room of
 * `src/`, nor the package itself by name.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve, sep } from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

const root = resolve(import.meta.dirname, '../..');
const core = join(root, 'src', 'core');
const packageName = (JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { name: string }).name;

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return sources(path);
    return /\.[cm]?ts$/.test(entry.name) ? [path] : [];
  });
}

/** Why `specifier`, imported by `file`, leaves `src/core`; `undefined` when it does not. */
function leaves(file: string, specifier: string): string | undefined {
  if (specifier.startsWith('.') || specifier.startsWith('/')) {
    const target = resolve(dirname(file), specifier);
    return target.startsWith(core + sep) ? undefined : `imports ${relative(root, target)}`;
  }
  if (specifier === packageName || specifier.startsWith(`${packageName}/`)) return `imports the package itself (${specifier})`;
  return undefined; // a Node builtin or an npm package
}

/** Every module `file` names, as `file: reason` for those that leave `src/core`. */
function violations(file: string, text: string): string[] {
  const { importedFiles } = ts.preProcessFile(text, true, true);
  return importedFiles.flatMap(({ fileName }) => {
    const reason = leaves(file, fileName);
    return reason === undefined ? [] : [`${relative(root, file)} ${reason}`];
  });
}

describe('src/core', () => {
  it('imports nothing else of ours', () => {
    const files = sources(core);
    expect(files.length).toBeGreaterThan(0);
    expect(files.flatMap((file) => violations(file, readFileSync(file, 'utf8')))).toEqual([]);
  });

  it('is told by this check when a file reaches out (static, type-only, re-exported, dynamic, by package name)', () => {
    const file = join(core, 'receiver.ts');
    const text = [
      "import { a } from './errors.js';",
      "import { b } from '../observability/observer.js';",
      "import type { C } from '../stores/store.js';",
      "export { d } from '../http/exchange.js';",
      "const e = await import('../cli/main.js');",
      "import { f } from 'retrysafe/redis';",
      "import { g } from 'node:crypto';",
      "import { h } from 'ioredis';",
    ].join('\n');
    expect(violations(file, text)).toEqual([
      'src/core/receiver.ts imports src/observability/observer.js',
      'src/core/receiver.ts imports src/stores/store.js',
      'src/core/receiver.ts imports src/http/exchange.js',
      'src/core/receiver.ts imports src/cli/main.js',
      'src/core/receiver.ts imports the package itself (retrysafe/redis)',
    ]);
  });
});
