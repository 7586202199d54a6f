/**
 * Lists dead exports: names a file under `src/` exports that no entry point of package.json (`exports`,
 * `bin`) exposes and no other file imports (or names through a namespace or a dynamic import). Such an
 * export is dead code, or belongs unexported in its file. The other files are those of `src/`, and the
 * tests and benchmarks (`test/`, `bench/`): an export only a test imports is that test's seam into a
 * module. Exits 1 when it finds one, naming each as `path: name`; `npm run lint` runs it.
 *
 *   node --import tsx scripts/dead-exports.ts
 *
 * @module
 */
import { readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import ts from 'typescript';

const root = resolve(import.meta.dirname, '..');
const src = join(root, 'src');
/** Where the files that may use an export of `src/` live. */
const users = ['src', 'test', 'bench'].map((dir) => join(root, dir) + '/');

/** The source file behind a built path of package.json (`./dist/x/y.js` → `src/x/y.ts`). */
function sourceOf(built: string): string {
  return resolve(root, built.replace(/^\.\/dist\//, 'src/').replace(/\.js$/, '.ts'));
}

/** The modules package.json exposes: every `exports` condition and every `bin`. */
function entryPoints(): Set<string> {
  const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as {
    exports?: Record<string, string | Record<string, string>>;
    bin?: Record<string, string>;
  };
  const built = [
    ...Object.values(pkg.exports ?? {}).flatMap((target) => (typeof target === 'string' ? [target] : Object.values(target))),
    ...Object.values(pkg.bin ?? {}),
  ];
  return new Set(built.filter((path) => path.startsWith('./dist/') && path.endsWith('.js')).map(sourceOf));
}

function program(): ts.Program {
  const configPath = join(root, 'tsconfig.json');
  const config = ts.readConfigFile(configPath, (path) => ts.sys.readFile(path));
  const parsed = ts.parseJsonConfigFileContent(config.config, ts.sys, dirname(configPath));
  return ts.createProgram(parsed.fileNames, parsed.options);
}

/** The symbol an alias (import, re-export) stands for, followed to its declaration. */
function target(checker: ts.TypeChecker, symbol: ts.Symbol): ts.Symbol {
  return symbol.flags & ts.SymbolFlags.Alias ? checker.getAliasedSymbol(symbol) : symbol;
}

/** `path: name` of every dead export under `src/`. */
function deadExports(): string[] {
  const entries = entryPoints();
  const files = program();
  const checker = files.getTypeChecker();
  const all = files.getSourceFiles().map((file) => ({ file, fileName: resolve(file.fileName) }));
  const sources = all.filter(({ fileName }) => fileName.startsWith(src + '/'));

  /** Symbols named in a file other than the one that declares them, and every export of an entry point. */
  const used = new Set<ts.Symbol>();
  for (const { file, fileName } of all.filter(({ fileName }) => users.some((dir) => fileName.startsWith(dir)))) {
    const moduleSymbol = checker.getSymbolAtLocation(file);
    if (entries.has(fileName) && moduleSymbol) {
      for (const exported of checker.getExportsOfModule(moduleSymbol)) used.add(target(checker, exported));
    }
    const visit = (node: ts.Node): void => {
      if (ts.isIdentifier(node)) {
        const symbol = checker.getSymbolAtLocation(node);
        if (symbol) {
          const resolved = target(checker, symbol);
          const declaredIn = resolved.declarations?.[0]?.getSourceFile().fileName;
          if (declaredIn !== undefined && resolve(declaredIn) !== fileName) used.add(resolved);
        }
      }
      // `import * as m` and `import('…')`: every export of that module counts as named.
      if (
        (ts.isNamespaceImport(node) || ts.isNamespaceExport(node) || (ts.isCallExpression(node) && node.expression.kind === ts.SyntaxKind.ImportKeyword))
      ) {
        const specifier = ts.isCallExpression(node) ? node.arguments[0] : undefined;
        const namespace = specifier ? checker.getSymbolAtLocation(specifier) : checker.getSymbolAtLocation((node as ts.NamespaceImport).name);
        const module = namespace ? target(checker, namespace) : undefined;
        if (module?.flags && module.flags & ts.SymbolFlags.Module) {
          for (const exported of checker.getExportsOfModule(module)) used.add(target(checker, exported));
        }
      }
      ts.forEachChild(node, visit);
    };
    visit(file);
  }

  const dead: string[] = [];
  for (const { file, fileName } of sources) {
    const moduleSymbol = checker.getSymbolAtLocation(file);
    if (!moduleSymbol) continue;
    for (const exported of checker.getExportsOfModule(moduleSymbol)) {
      const resolved = target(checker, exported);
      // A re-export is judged where its target is declared.
      const declaredIn = resolved.declarations?.[0]?.getSourceFile().fileName;
      if (declaredIn === undefined || resolve(declaredIn) !== fileName) continue;
      if (!used.has(resolved)) dead.push(`${relative(root, fileName)}: ${exported.getName()}`);
    }
  }
  return dead.sort();
}

const dead = deadExports();
if (dead.length > 0) {
  process.stderr.write(`Exports no entry point of package.json exposes and no other file of src/, test/ or bench/ uses:\n${dead.map((d) => `  ${d}\n`).join('')}`);
  process.exitCode = 1;
}
