// Every ```ts block of README.md and docs/*.md, as units a stack compiles. A block is a whole program (its
// own imports and declarations); a block whose first line is a comment starting "// continues the block
// above" is compiled together with the block before it, as one unit. A stack.json names the units it
// compiles by the anchor of their heading ("docs/aws.md#lambda": every unit under that heading), and
// docsCoverageProblems refuses a unit that no stack compiles, so a new block cannot go unchecked.
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

const CONTINUES = /^\/\/ continues the block above\b/;

/** GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens; a repeat gets -1, -2, … */
function anchorer() {
  const seen = new Map();
  return (heading) => {
    const base = heading
      .toLowerCase()
      .replace(/[^\p{L}\p{N}\s_-]/gu, '')
      .replace(/ /g, '-');
    const count = seen.get(base) ?? 0;
    seen.set(base, count + 1);
    return count === 0 ? base : `${base}-${count}`;
  };
}

/** The Markdown files whose blocks are checked, relative to the repository. */
export function docFiles(repo) {
  const docs = readdirSync(join(repo, 'docs')).filter((f) => f.endsWith('.md')).sort();
  return ['README.md', ...docs.map((f) => `docs/${f}`)];
}

/**
 * @param {string} repo the repository's root
 * @returns {{ id: string, doc: string, anchor: string, line: number, lines: { text: string, line: number }[] }[]}
 *   one unit per block, or per block and the blocks continuing it; `line` is the 1-based line of the head
 *   block's first code line, each of `lines` carries its own line in `doc`
 */
export function docUnits(repo) {
  const units = [];
  for (const doc of docFiles(repo)) {
    const lines = readFileSync(join(repo, doc), 'utf8').split('\n');
    const anchorOf = anchorer();
    let anchor = '';
    let last;
    for (let i = 0; i < lines.length; i += 1) {
      const line = lines[i];
      const heading = /^#{1,6} (.*)$/.exec(line);
      if (heading) anchor = anchorOf(heading[1].trim());
      const fence = /^\s*```(\S*)\s*$/.exec(line);
      if (!fence) continue;
      let end = i + 1;
      while (end < lines.length && !/^\s*```\s*$/.test(lines[end])) end += 1;
      if (end >= lines.length) throw new Error(`${doc}:${i + 1}: a code block is not closed`);
      if (fence[1] === 'ts' || fence[1] === 'typescript') {
        const code = lines.slice(i + 1, end).map((text, k) => ({ text, line: i + 2 + k }));
        if (CONTINUES.test(code[0]?.text ?? '')) {
          if (!last) throw new Error(`${doc}:${i + 2}: "continues the block above", but no block is above it`);
          last.lines.push(...code);
        } else {
          last = { id: `${doc}:${i + 2}`, doc, anchor, line: i + 2, lines: code };
          units.push(last);
        }
      }
      i = end;
    }
  }
  return units;
}

/** The units a stack.json compiles: its `docs` anchors ("<file>#<anchor>"), every unit under each. */
export function stackUnits(units, spec, stackName) {
  return (spec.docs ?? []).flatMap((ref) => {
    const [doc, anchor = ''] = ref.split('#');
    const found = units.filter((u) => u.doc === doc && u.anchor === anchor);
    if (found.length === 0) throw new Error(`stacks/${stackName}/stack.json: "${ref}" names no \`\`\`ts block`);
    return found;
  });
}

/**
 * The units no stack compiles, as one problem each. An example (`examples[].readme`, which the stack
 * compiles and runs) covers the first unit under its heading; `docs` covers every unit under an anchor.
 */
export function docsCoverageProblems(units, specs) {
  const covered = new Set();
  for (const [name, spec] of specs) {
    for (const unit of stackUnits(units, spec, name)) covered.add(unit.id);
    for (const example of spec.examples ?? []) {
      const doc = example.doc ?? 'README.md';
      const anchor = anchorer()(example.readme);
      const unit = units.find((u) => u.doc === doc && u.anchor === anchor);
      if (unit) covered.add(unit.id);
    }
  }
  return units
    .filter((u) => !covered.has(u.id))
    .map((u) => `${u.id}: no stack compiles this \`\`\`ts block (name "${u.doc}#${u.anchor}" in a stack.json's "docs")`);
}

/** The file a unit is compiled from, under the stack's blocks/ (beside src/, so the examples' build leaves it out). */
export function unitFile(unit) {
  return `${unit.doc.replace(/\.md$/, '').replace(/\W+/g, '-')}-${unit.line}.ts`;
}

/** A unit's source: its lines, then `export {}` so that every block is a module (top-level await, own scope). */
export function unitSource(unit) {
  return `${unit.lines.map((l) => l.text).join('\n')}\nexport {};\n`;
}

/** Rewrites tsc's "blocks/<file>(line,col)" into the Markdown file's own line, for the reader to fix. */
export function docLocations(output, units) {
  const byFile = new Map(units.map((u) => [unitFile(u), u]));
  return output.replace(/blocks\/([\w.-]+\.ts)\((\d+),(\d+)\)/g, (whole, file, line, col) => {
    const origin = byFile.get(file)?.lines[Number(line) - 1];
    return origin ? `${byFile.get(file).doc}:${origin.line}:${col}` : whole;
  });
}
