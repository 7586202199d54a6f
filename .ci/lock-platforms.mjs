// Re-adds lock entries for rollup's platform binaries that this workplace's npm registry does not serve
// (it answers 404 for them, so `npm install` leaves them out of package-lock.json and `npm ci` then
// refuses the lock as out of sync). The entries carry os/cpu/libc, so `npm ci` skips them on every other
// platform without fetching. Run after any `npm install` that rewrites the lock: node .ci/lock-platforms.mjs
import { readFileSync, writeFileSync } from 'node:fs';
import { stdout } from 'node:process';
import { URL } from 'node:url';

const lockPath = new URL('../package-lock.json', import.meta.url);
const lock = JSON.parse(readFileSync(lockPath, 'utf8'));
const rollup = lock.packages['node_modules/rollup'];
if (!rollup?.optionalDependencies) throw new Error('rollup is not in the lock; nothing to do');

const CPU = { arm: 'arm', 'arm-eabi': 'arm', arm64: 'arm64', x64: 'x64', ia32: 'ia32', loong64: 'loong64', ppc64: 'ppc64', riscv64: 'riscv64', s390x: 's390x' };
let added = 0;
for (const [name, version] of Object.entries(rollup.optionalDependencies)) {
  const path = `node_modules/${name}`;
  if (lock.packages[path]) continue;
  const parts = name.replace('@rollup/rollup-', '').split('-');
  const os = parts[0];
  const cpu = CPU[parts[1]] ?? CPU[`${parts[1]}-${parts[2]}`];
  if (!cpu) throw new Error(`cannot tell the cpu of ${name}`);
  const flavour = parts.slice(2).join('-');
  const entry = { version, cpu: [cpu], license: 'MIT', optional: true, os: [os] };
  if (os === 'linux') entry.libc = [flavour.includes('musl') ? 'musl' : 'glibc'];
  lock.packages[path] = entry;
  added++;
}
lock.packages = Object.fromEntries(Object.entries(lock.packages).sort(([a], [b]) => (a === '' ? -1 : b === '' ? 1 : a < b ? -1 : a > b ? 1 : 0)));
writeFileSync(lockPath, `${JSON.stringify(lock, null, 2)}\n`);
stdout.write(`added ${added} platform entries\n`);
