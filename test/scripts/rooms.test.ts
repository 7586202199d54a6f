/**
 * The rooms table of scripts/rooms.mjs and its ESLint rule `rooms/allowed-imports`: an import that leaves a
 * room for one its row does not name is reported, whether static, re-exported or dynamic; the demo imports
 * only package.json entry points; a file of src/ in no row is refused until it gets one.
 */
import { resolve } from 'node:path';
import { Linter } from 'eslint';
import { describe, expect, it } from 'vitest';
import { entryPoints, refusal, roomOf, roomsPlugin } from '../../scripts/rooms.mjs';

const root = resolve(import.meta.dirname, '../..');

/** The rule's messages for `code` linted as the repository file `path`. */
function lint(path: string, code: string): string[] {
  const linter = new Linter({ configType: 'flat', cwd: root });
  const config = [{ files: ['**/*.ts'], languageOptions: { sourceType: 'module' as const }, plugins: { rooms: roomsPlugin }, rules: { 'rooms/allowed-imports': 'error' as const } }];
  return linter.verify(code, config, { filename: resolve(root, path) }).map((message) => message.message);
}

describe('rooms', () => {
  it('places a file in the longest room that holds it, a top-level file in its own', () => {
    expect(roomOf('src/stores/postgres/migrations/0001_init.ts')).toBe('src/stores/postgres');
    expect(roomOf('src/stores/memory.ts')).toBe('src/stores');
    expect(roomOf('src/messaging/inbox/index.ts')).toBe('src/messaging/inbox');
    expect(roomOf('src/postgres.ts')).toBe('src/postgres.ts');
    expect(roomOf('test/support/http.ts')).toBeUndefined();
  });

  it('lets a room import itself and the rooms its row names, and nothing else', () => {
    const entries = entryPoints();
    expect(refusal('src/http/express.ts', 'src/core/receiver.ts', entries)).toBeUndefined();
    expect(refusal('src/stores/postgres/store.ts', 'src/stores/postgres/claim.ts', entries)).toBeUndefined();
    expect(refusal('src/core/receiver.ts', 'src/observability/observer.ts', entries)).toBe('src/core may not import src/observability (it imports nothing of ours)');
    expect(refusal('src/stores/postgres/migrations/index.ts', 'src/messaging/inbox/migrations/postgres/index.ts', entries)).toMatch(/^src\/stores\/postgres may not import src\/messaging\/inbox/);
    expect(refusal('src/demo/payments/run.ts', 'src/cli/failure.ts', entries)).toBe('src/demo imports only package.json entry points (src/cli/failure.ts is none)');
    expect(refusal('src/demo/payments/run.ts', 'src/store-url.ts', entries)).toBeUndefined();
    expect(refusal('src/demo/payments/server-metrics.ts', 'src/observability/metrics.ts', entries)).toMatch(/entry points/);
    expect(refusal('src/new-room.ts', 'src/core/errors.ts', entries)).toMatch(/^src\/new-room\.ts is in no row of the rooms table/);
  });

  it('reports static, re-exported and dynamic imports through ESLint', () => {
    const code = [
      "import { redactUrl } from '../../cli/failure.js';",
      "export { RECEIVER_INSTRUMENTS } from '../../observability/metrics.js';",
      "const peer = await import('../../cli/peer.js');",
      "import { createReceiver } from '../../index.js';",
      "import { chaos } from '../harness/chaos.js';",
      "import express from 'express';",
    ].join('\n');
    expect(lint('src/demo/payments/example.ts', code)).toEqual([
      'src/demo imports only package.json entry points (src/cli/failure.ts is none)',
      'src/demo imports only package.json entry points (src/observability/metrics.ts is none)',
      'src/demo imports only package.json entry points (src/cli/peer.ts is none)',
    ]);
    expect(lint('src/core/example.ts', "import { Observation } from '../observability/observer.js';")).toEqual([
      'src/core may not import src/observability (it imports nothing of ours)',
    ]);
  });
});
