// The package test: packs retrysafe, installs the tarball into scratch projects outside the repository
// (plain `npm install`: no --legacy-peer-deps, no --force; one shared npm cache), compiles the README's
// examples for each stack with strict TypeScript, runs them against the local services (a keyed POST, its
// replay, a 422 for another body under the same key), runs the installed `retrysafe` binary, and compiles
// every ```ts block of README.md and docs/*.md in the stack that names it (lib/docs.mjs; a block no stack
// names fails the run).
//
//   node .ci/package-test/run.mjs [stack ...]     (every stack under stacks/ when none is named)
//
// A stack is a directory under stacks/ with a package.json (the peers it installs, pinned), a
// tsconfig.json and a stack.json:
//   { "title": "…",
//     "examples": [{ "readme": "<heading>", "doc": "<file of the repository; README.md unless given>",
//                    "file": "<name>.ts", "services": ["postgres"|"redis"],
//                    "env": { "<NAME>": "<value>" } }],   (env: extra variables for the running example)
//     "cli": [{ "name": "…", "run": ["retrysafe", "…"], "services": […], "exit": 0,
//               "stdout": "<regex>", "stderr": "<regex>", "stderrLines": 1 }],
//     "docs": ["<file>#<anchor>", …],   (compile, not run, every ```ts block under that heading)
//     "compileOnly": true,   (no examples or CLI: installs with --ignore-scripts, as nothing runs)
//     "gateway": true }   (gateway: run docs/gateway.md's 5-minute start with the installed binary; lib/gateway.mjs)
// In `run`, {postgres} is the stack's own database URL, {redis} the Redis URL, {prefix} the stack's Redis
// key prefix, {version} the package's version, {scope} the account the examples were called for, and
// {key:<file>} the Idempotency-Key the HTTP check sent to the example <file> (without .ts).
// With CI=true (or RETRYSAFE_REQUIRE_SERVICES=1) a missing service fails the run; otherwise the steps
// that need it are skipped with a warning. KEEP=1 leaves the scratch directory in place.
// Adding a stack is one directory: its pinned package.json, a tsconfig.json (copy
// one; a framework may need its own options, e.g. decorators), the README heading of its example (which
// must serve POST /payments and listen on $PORT) and its row in docs/compatibility.md.
/* global fetch, AbortSignal -- Node's own, as in any browser */
import { spawn } from 'node:child_process';
import { createHash, randomUUID } from 'node:crypto';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { clearTimeout, setTimeout } from 'node:timers';
import { basename, dirname, join, resolve } from 'node:path';
import { arch, argv, env, exit, platform, stdout, versions } from 'node:process';
import { docLocations, docsCoverageProblems, docUnits, stackUnits, unitFile, unitSource } from './lib/docs.mjs';
import { checkGatewayStart } from './lib/gateway.mjs';
import { readmeExample } from './lib/readme.mjs';
import { tarballProblems } from './lib/tarball.mjs';
import { createDatabase, deleteRedisPrefix, dropDatabase, freePort, reachable, REDIS_URL } from './lib/services.mjs';

const here = import.meta.dirname;
const repo = resolve(here, '../..');
const requireServices = env.CI === 'true' || env.RETRYSAFE_REQUIRE_SERVICES === '1';
const version = JSON.parse(readFileSync(join(repo, 'package.json'), 'utf8')).version;
const tsc = join(repo, 'node_modules/typescript/bin/tsc');
// Shared by every stack and kept between runs, so only the first run downloads the peers.
const cache = env.RETRYSAFE_NPM_CACHE ?? join(tmpdir(), 'retrysafe-package-test-npm-cache');
const work = mkdtempSync(join(tmpdir(), 'retrysafe-package-test-'));
const runId = randomUUID().slice(0, 8);
const log = (line) => stdout.write(`${line}\n`);

/** Runs a command; resolves with its exit code and output (never rejects on a non-zero exit). */
function run(command, args, options = {}) {
  return new Promise((resolvePromise, reject) => {
    const child = spawn(command, args, { cwd: options.cwd ?? repo, env: { ...env, ...options.env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (chunk) => (out += chunk));
    child.stderr.on('data', (chunk) => (err += chunk));
    const timer = setTimeout(() => child.kill('SIGKILL'), options.timeoutMs ?? 300_000);
    child.once('error', reject);
    child.once('close', (code, signal) => {
      clearTimeout(timer);
      resolvePromise({ code: code ?? (signal ? 128 : 1), stdout: out, stderr: err });
    });
  });
}

async function mustRun(command, args, options) {
  const result = await run(command, args, options);
  if (result.code !== 0) throw new Error(`${[command, ...args].join(' ')} exited ${result.code}\n${result.stdout}${result.stderr}`.trim());
  return result;
}


/**
 * better-sqlite3 (a dependency) installs through prebuild-install, which downloads a prebuilt binary from
 * GitHub and otherwise compiles SQLite (minutes on a small CI machine, once per stack). prebuild-install
 * first looks in the npm cache's `_prebuilds/` under a name derived from the download URL; seeding that
 * entry with the binary `npm ci` already built for this repository (same version, same Node ABI) lets
 * every stack's install run its install script as a user's would, without the download or the compile.
 * When the versions differ, the entry is simply not found and the install compiles.
 */
function seedSqlitePrebuild() {
  const moduleDir = join(repo, 'node_modules/better-sqlite3');
  const binary = join(moduleDir, 'build/Release/better_sqlite3.node');
  if (!existsSync(binary)) return;
  const { version: sqliteVersion } = JSON.parse(readFileSync(join(moduleDir, 'package.json'), 'utf8'));
  const file = `better-sqlite3-v${sqliteVersion}-node-v${versions.modules}-${platform}-${arch}.tar.gz`;
  const url = `https://github.com/WiseLibs/better-sqlite3/releases/download/v${sqliteVersion}/${file}`;
  const digest = createHash('sha512').update(url).digest('hex').slice(0, 6);
  const target = join(cache, '_prebuilds', `${digest}-${file.replace(/[^a-zA-Z0-9.]+/g, '-')}`);
  if (existsSync(target)) return;
  mkdirSync(dirname(target), { recursive: true });
  return mustRun('tar', ['czf', target, '-C', moduleDir, 'build/Release/better_sqlite3.node']);
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Starts a compiled example and waits until it answers HTTP; returns the child and its output so far. */
async function startExample(dir, file, extraEnv) {
  const port = await freePort();
  const child = spawn('node', [join('dist', file.replace(/\.ts$/, '.js'))], {
    cwd: dir,
    env: { ...env, ...extraEnv, PORT: String(port) },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const output = { text: '' };
  child.stdout.on('data', (chunk) => (output.text += chunk));
  child.stderr.on('data', (chunk) => (output.text += chunk));
  let exited = false;
  child.once('exit', () => (exited = true));
  const deadline = Date.now() + 20_000;
  for (;;) {
    if (exited) throw new Error(`${file} exited before listening:\n${output.text}`);
    try {
      await fetch(`http://127.0.0.1:${port}/`, { signal: AbortSignal.timeout(1000) });
      return { child, port, output };
    } catch {
      if (Date.now() > deadline) throw new Error(`${file} did not listen on port ${port} within 20 s:\n${output.text}`);
      await sleep(100);
    }
  }
}

function stopExample(child) {
  return new Promise((resolvePromise) => {
    if (child.exitCode !== null || child.signalCode !== null) return resolvePromise();
    child.once('exit', () => resolvePromise());
    child.kill('SIGTERM');
    setTimeout(() => child.kill('SIGKILL'), 5000).unref();
  });
}

/** The behaviour every README example must show: a keyed POST, its replay, a 422 for another body. */
async function checkIdempotency(port, key, scope) {
  const post = (body) =>
    fetch(`http://127.0.0.1:${port}/payments`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': key, 'x-account-id': scope },
      body: JSON.stringify(body),
    });
  const first = await post({ amount: 1250 });
  const firstBody = await first.text();
  if (first.status !== 201) throw new Error(`first POST: expected 201, got ${first.status} ${firstBody}`);
  if (first.headers.has('idempotent-replayed')) throw new Error('first POST carries Idempotent-Replayed');
  const replay = await post({ amount: 1250 });
  const replayBody = await replay.text();
  if (replay.status !== 201 || replayBody !== firstBody) {
    throw new Error(`replay: expected 201 ${firstBody}, got ${replay.status} ${replayBody}`);
  }
  if (replay.headers.get('idempotent-replayed') !== 'true') throw new Error('replay lacks Idempotent-Replayed: true');
  const other = await post({ amount: 999 });
  const otherBody = await other.text();
  if (other.status !== 422 || !other.headers.get('content-type')?.startsWith('application/problem+json')) {
    throw new Error(`another body under the same key: expected 422 problem+json, got ${other.status} ${other.headers.get('content-type')} ${otherBody}`);
  }
}

function substitute(arg, vars) {
  return arg.replace(/\{([a-z]+(?::[\w.-]+)?)\}/g, (whole, name) => {
    if (!(name in vars)) throw new Error(`stack.json: unknown placeholder ${whole}`);
    return vars[name];
  });
}

async function runStack(name) {
  const source = join(here, 'stacks', name);
  const spec = JSON.parse(readFileSync(join(source, 'stack.json'), 'utf8'));
  const dir = join(work, name);
  const steps = [];
  const record = (step, status, detail = '') => {
    steps.push({ step, status, detail });
    log(`  ${status.padEnd(4)} ${step}${detail && status !== 'ok' ? `\n${detail.replace(/^/gm, '       ')}` : ''}`);
  };
  log(`\n== ${name}: ${spec.title}`);
  const started = Date.now();
  const examples = spec.examples ?? [];
  const needed = new Set([...examples, ...(spec.cli ?? [])].flatMap((s) => s.services ?? []));
  const available = {};
  for (const service of needed) {
    available[service] = await reachable(service);
    if (!available[service]) {
      if (requireServices) record(`service ${service}`, 'FAIL', `${service} is not reachable and CI requires it`);
      else log(`  WARNING: ${service} is not reachable; the steps that need it are SKIPPED`);
    }
  }
  const database = `retrysafe_pkg_${name.replace(/\W/g, '_')}_${runId}`;
  const prefix = `retrysafe-pkg-${name}-${runId}`;
  const scope = `acct-${runId}`;
  const vars = { redis: REDIS_URL, prefix, version, scope };
  try {
    if (available.postgres) vars.postgres = await createDatabase(database);
    mkdirSync(join(dir, 'src'), { recursive: true });
    const manifest = JSON.parse(readFileSync(join(source, 'package.json'), 'utf8'));
    manifest.dependencies = { retrysafe: `file:${tarball}`, ...manifest.dependencies };
    writeFileSync(join(dir, 'package.json'), `${JSON.stringify(manifest, null, 2)}\n`);
    cpSync(join(source, 'tsconfig.json'), join(dir, 'tsconfig.json'));
    for (const example of examples) {
      writeFileSync(join(dir, 'src', example.file), readmeExample(join(repo, example.doc ?? 'README.md'), example.readme));
    }
    const blocks = stackUnits(units, spec, name);
    mkdirSync(join(dir, 'blocks'));
    for (const unit of blocks) writeFileSync(join(dir, 'blocks', unitFile(unit)), unitSource(unit));
    const docsConfig = { extends: './tsconfig.json', compilerOptions: { noEmit: true, rootDir: 'blocks' }, include: ['blocks'] };
    writeFileSync(join(dir, 'tsconfig.blocks.json'), `${JSON.stringify(docsConfig, null, 2)}\n`);

    const scripts = spec.compileOnly ? ['--ignore-scripts'] : [];
    const install = await run('npm', ['install', '--cache', cache, '--prefer-offline', '--no-audit', '--no-fund', ...scripts], { cwd: dir });
    const installLabel = spec.compileOnly ? 'npm install --ignore-scripts (compile only)' : 'npm install (no flags)';
    if (install.code !== 0) {
      record(installLabel, 'FAIL', `${install.stdout}${install.stderr}`.trim());
      return { name, spec, steps, ms: Date.now() - started };
    }
    record(installLabel, 'ok');
    const installed = JSON.parse((await run('npm', ['ls', '--depth=0', '--json'], { cwd: dir })).stdout).dependencies ?? {};
    // npm may add a package nobody asked for (`extraneous`): Nest 10's Fastify platform nests its own fastify@4,
    // and npm then installs a fastify@5 at the top to satisfy retrysafe's optional peer. It is not the stack.
    spec.installed = Object.fromEntries(Object.entries(installed).filter(([, d]) => !d.extraneous).map(([n, d]) => [n, d.version]));
    // docs/compatibility.md is the matrix users read: its row for this stack must name what was installed.
    const row = readFileSync(join(repo, 'docs/compatibility.md'), 'utf8').split('\n').find((line) => line.startsWith(`| \`${name}\` |`));
    const unlisted = Object.entries(spec.installed)
      .filter(([n]) => n !== 'retrysafe')
      .map(([n, v]) => `${n}@${v}`)
      .filter((pinned) => !row?.includes(`\`${pinned}\``));
    record('docs/compatibility.md lists the installed versions', unlisted.length === 0 ? 'ok' : 'FAIL', row ? `its row lacks ${unlisted.join(', ')}` : `no row starting with | \`${name}\` |`);

    if (blocks.length > 0) {
      const checked = await run('node', [tsc, '-p', 'tsconfig.blocks.json'], { cwd: dir });
      const label = `tsc (strict) on the ${blocks.length} \`\`\`ts blocks of ${[...new Set(blocks.map((b) => b.doc))].join(', ')} named in stack.json`;
      record(label, checked.code === 0 ? 'ok' : 'FAIL', docLocations(`${checked.stdout}${checked.stderr}`.trim(), blocks));
    }

    if (examples.length > 0) {
      const compile = await run('node', [tsc, '-p', 'tsconfig.json'], { cwd: dir });
      if (compile.code !== 0) {
        record('tsc (strict) on the README examples', 'FAIL', `${compile.stdout}${compile.stderr}`.trim());
        return { name, spec, steps, ms: Date.now() - started };
      }
      record(`tsc (strict) on the README examples: ${examples.map((e) => `${e.doc ?? 'README.md'} "${e.readme}"`).join(', ')}`, 'ok');
    }

    for (const example of examples) {
      const stem = basename(example.file, '.ts');
      const key = `${stem}-${runId}`;
      vars[`key:${stem}`] = key;
      const label = `${example.doc ?? 'README.md'} "${example.readme}" (${example.file}): keyed POST 201, replay with Idempotent-Replayed, 422 on another body`;
      const missing = (example.services ?? []).filter((s) => !available[s]);
      if (missing.length > 0) {
        record(label, requireServices ? 'FAIL' : 'SKIP', `needs ${missing.join(', ')}`);
        continue;
      }
      let server;
      try {
        server = await startExample(dir, example.file, { DATABASE_URL: vars.postgres ?? '', REDIS_URL, REDIS_PREFIX: prefix, ...example.env });
        await checkIdempotency(server.port, key, scope);
        record(label, 'ok');
      } catch (error) {
        record(label, 'FAIL', `${error.message}${server ? `\n--- example output ---\n${server.output.text}` : ''}`);
      } finally {
        if (server) await stopExample(server.child);
      }
    }

    for (const step of spec.cli ?? []) {
      const missing = (step.services ?? []).filter((s) => !available[s]);
      if (missing.length > 0) {
        record(`${step.name}: ${step.run.join(' ')}`, requireServices ? 'FAIL' : 'SKIP', `needs ${missing.join(', ')}`);
        continue;
      }
      const [command, ...args] = step.run.map((arg) => substitute(arg, vars));
      const label = `${step.name}: ${[command, ...args].join(' ')}`;
      const binary = command === 'retrysafe' ? join(dir, 'node_modules/.bin/retrysafe') : command;
      const result = await run(binary, args, { cwd: dir, timeoutMs: 60_000 });
      const problems = [];
      if (result.code !== (step.exit ?? 0)) problems.push(`exit ${result.code}, expected ${step.exit ?? 0}`);
      if (step.stdout && !new RegExp(substitute(step.stdout, vars)).test(result.stdout)) problems.push(`stdout does not match /${step.stdout}/`);
      if (step.stderr && !new RegExp(substitute(step.stderr, vars)).test(result.stderr)) problems.push(`stderr does not match /${step.stderr}/`);
      const stderrLines = result.stderr.trimEnd().split('\n').filter(Boolean).length;
      if (step.stderrLines !== undefined && stderrLines !== step.stderrLines) problems.push(`stderr has ${stderrLines} lines, expected ${step.stderrLines}`);
      record(label, problems.length === 0 ? 'ok' : 'FAIL', `${problems.join('; ')}\n--- stdout ---\n${result.stdout}--- stderr ---\n${result.stderr}`);
    }
    if (spec.gateway) {
      const label = 'docs/gateway.md 5-minute start: retrysafe gateway --config examples/gateway/gateway.yaml (201, replay, 422, 409, 504 outcome unknown, reconciled replay)';
      try {
        await checkGatewayStart(repo, dir);
        record(label, 'ok');
      } catch (error) {
        record(label, 'FAIL', error.message);
      }
    }
  } catch (error) {
    record('stack setup', 'FAIL', error.stack ?? String(error));
  } finally {
    if (vars.postgres) await dropDatabase(database).catch((error) => log(`  (could not drop database ${database}: ${error.message})`));
    if (available.redis) await deleteRedisPrefix(prefix).catch((error) => log(`  (could not delete Redis prefix ${prefix}: ${error.message})`));
  }
  return { name, spec, steps, ms: Date.now() - started };
}

const started = Date.now();
let tarball;
const results = [];
let packProblems = [];
let docsProblems = [];
const units = docUnits(repo);
try {
  log(`package test: scratch directory ${work}, npm cache ${cache}`);
  const stacks = argv.length > 2 ? argv.slice(2) : readdirSync(join(here, 'stacks')).sort();
  for (const name of stacks) {
    if (!existsSync(join(here, 'stacks', name, 'stack.json'))) throw new Error(`no stack named ${name} (looked for stacks/${name}/stack.json)`);
  }
  // Every stack's stack.json, also those not run now: a block is covered when any stack names it.
  const specs = readdirSync(join(here, 'stacks')).sort().map((name) => [name, JSON.parse(readFileSync(join(here, 'stacks', name, 'stack.json'), 'utf8'))]);
  docsProblems = docsCoverageProblems(units, specs);
  log(`\n== README.md and docs/*.md: each of the ${units.length} \`\`\`ts blocks (or runs of blocks) is compiled by a stack`);
  for (const problem of docsProblems) log(`  FAIL ${problem}`);
  if (docsProblems.length === 0) log('  ok   every block is named by a stack.json');

  // npm pack runs `prepare`, so the tarball holds a fresh build of the working tree.
  await mustRun('npm', ['pack', '--pack-destination', work, '--silent']);
  tarball = join(work, readdirSync(work).find((f) => f.endsWith('.tgz')));
  mkdirSync(join(work, 'unpacked'));
  await mustRun('tar', ['xzf', tarball, '-C', join(work, 'unpacked')]);
  packProblems = tarballProblems(join(work, 'unpacked', 'package'));
  log(`\n== tarball ${basename(tarball)}: source maps resolve, Markdown links stay inside, no DESIGN.md`);
  for (const problem of packProblems) log(`  FAIL ${problem}`);
  if (packProblems.length === 0) log('  ok   self-contained');

  await seedSqlitePrebuild();
  for (const name of stacks) results.push(await runStack(name));
} finally {
  if (env.KEEP !== '1') rmSync(work, { recursive: true, force: true });
}

log(`\n== package test summary (${Math.round((Date.now() - started) / 1000)} s)`);
log(`  ${packProblems.length === 0 ? 'PASS' : 'FAIL'}  tarball`);
log(`  ${docsProblems.length === 0 ? 'PASS' : 'FAIL'}  every \`\`\`ts block of README.md and docs/*.md compiled by a stack`);
let failed = packProblems.length > 0 || docsProblems.length > 0;
for (const { name, spec, steps, ms } of results) {
  const bad = steps.filter((s) => s.status === 'FAIL').length;
  const skipped = steps.filter((s) => s.status === 'SKIP').length;
  failed ||= bad > 0;
  const versions = Object.entries(spec.installed ?? {})
    .filter(([n]) => n !== 'retrysafe' && n !== 'typescript')
    .map(([n, v]) => `${n}@${v}`)
    .join(' ');
  log(`  ${bad > 0 ? 'FAIL' : 'PASS'}  ${name.padEnd(16)} ${steps.length - bad - skipped} ok, ${bad} failed, ${skipped} skipped, ${Math.round(ms / 1000)} s  [${versions}]`);
}
exit(failed ? 1 : 0);
