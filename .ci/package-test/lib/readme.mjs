// Pulls the README's (or a doc's) examples out mechanically, so the files a stack compiles are their text.
// An example is the first ```ts block under a heading whose text is exactly the given name.
import { readFileSync } from 'node:fs';
import { basename } from 'node:path';

/**
 * @param {string} readmePath README.md, or another Markdown file of the repository
 * @param {string} heading the heading's text without its leading #s, e.g. "Express"
 * @returns {string} the block's code, with a trailing newline
 */
export function readmeExample(readmePath, heading) {
  const lines = readFileSync(readmePath, 'utf8').split('\n');
  const name = basename(readmePath);
  const at = lines.findIndex((line) => /^#{1,6} /.test(line) && line.replace(/^#{1,6} /, '').trim() === heading);
  if (at < 0) throw new Error(`${name} has no heading "${heading}"`);
  let start = -1;
  for (let i = at + 1; i < lines.length; i += 1) {
    const line = lines[i] ?? '';
    if (/^#{1,6} /.test(line)) break;
    if (line.trim() === '```ts') {
      start = i + 1;
      break;
    }
  }
  if (start < 0) throw new Error(`${name} has no \`\`\`ts block under "${heading}"`);
  const end = lines.findIndex((line, i) => i >= start && line.trim() === '```');
  if (end < 0) throw new Error(`${name}: the \`\`\`ts block under "${heading}" is not closed`);
  return `${lines.slice(start, end).join('\n')}\n`;
}
