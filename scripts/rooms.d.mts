// Types of rooms.mjs, for the TypeScript that imports it (its test).
import type { ESLint } from 'eslint';

export const ALLOWED_IMPORTS: Readonly<Record<string, readonly string[] | 'entry points'>>;
export function entryPoints(): Set<string>;
export function roomOf(path: string): string | undefined;
export function refusal(file: string, target: string, entries: Set<string>): string | undefined;
export const roomsPlugin: ESLint.Plugin;
