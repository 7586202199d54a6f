// @ts-check
import js from '@eslint/js';
import tseslint from 'typescript-eslint';
import { roomsPlugin } from './scripts/rooms.mjs';

export default tseslint.config(
  { ignores: ['dist/**', '.bench-build/**', 'node_modules/**', 'coverage/**', 'examples/*/dist/**'] },
  js.configs.recommended,
  ...tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': 'error',
      '@typescript-eslint/consistent-type-imports': 'error',
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_' }],
    },
  },
  { files: ['eslint.config.js', '**/*.mjs'], ...tseslint.configs.disableTypeChecked },
  // Each room of src/ imports only what docs/architecture.md allows it (the table is in scripts/rooms.mjs).
  { files: ['src/**/*.ts', 'src/**/*.mjs'], plugins: { rooms: roomsPlugin }, rules: { 'rooms/allowed-imports': 'error' } },
);
