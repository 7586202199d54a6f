// Checks on what the tarball ships: every source map's sources are in it, every relative link in its
// Markdown resolves inside it, and nothing points at the repository's design notes.
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';

function walk(dir) {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? walk(path) : [path];
  });
}

/**
 * @param {string} root the unpacked tarball (its `package/` directory)
 * @returns {string[]} one line per problem; empty when the tarball is self-contained
 */
export function tarballProblems(root) {
  const problems = [];
  const files = walk(root);
  for (const file of files.filter((f) => f.endsWith('.map'))) {
    const map = JSON.parse(readFileSync(file, 'utf8'));
    for (const source of map.sources ?? []) {
      const target = resolve(dirname(file), map.sourceRoot ?? '', source);
      if (!target.startsWith(`${root}/`) || !existsSync(target)) {
        problems.push(`${relative(root, file)}: source ${source} is not in the package`);
      }
    }
  }
  for (const file of files.filter((f) => f.endsWith('.md'))) {
    const text = readFileSync(file, 'utf8');
    for (const [, link] of text.matchAll(/\]\(([^)\s]+)\)/g)) {
      if (/^[a-z]+:/i.test(link) || link.startsWith('#')) continue;
      const target = resolve(dirname(file), link.split('#')[0] ?? '');
      if (!target.startsWith(`${root}/`) || !existsSync(target)) {
        problems.push(`${relative(root, file)}: link ${link} does not resolve inside the package`);
      }
    }
  }
  for (const file of files.filter((f) => /\.(md|js|ts|json)$/.test(f))) {
    if (readFileSync(file, 'utf8').includes('DESIGN.md')) problems.push(`${relative(root, file)}: cites DESIGN.md, which is not in the package`);
  }
  return problems;
}
