// Runs the compiled benchmarks (test/dist/bench/*.bench.js) whose name contains the
// filter, each in its own process, one after another, so that they do not compete for
// the cores of a small machine. Arguments after the filter go to every benchmark.
// Usage: npm run bench [-- <name-filter> [--option value ...]]
import { readdirSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';

const dir = new URL('../test/dist/bench/', import.meta.url).pathname;
const [filter = '', ...args] = process.argv.slice(2);
const files = readdirSync(dir)
  .filter((f) => f.endsWith('.bench.js') && f.includes(filter))
  .sort();
if (files.length === 0) {
  console.error(`no benchmark matches "${filter}" in ${dir}`);
  process.exit(1);
}
let failed = 0;
for (const f of files) {
  console.log(`\n== ${f.replace(/\.bench\.js$/, '')}`);
  const r = spawnSync(process.execPath, ['--enable-source-maps', join(dir, f), ...args], { stdio: 'inherit' });
  if (r.status !== 0) failed++;
}
process.exit(failed === 0 ? 0 : 1);
