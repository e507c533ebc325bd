// The coverage gate of `npm test`: tap writes .tap/report/coverage-summary.json, and
// each package must keep its share of lines and branches covered. The thresholds
// sit a little under what the suite reaches, so that a change which leaves code
// untested fails here instead of eroding coverage unnoticed.
import { readFileSync } from 'node:fs';

const THRESHOLDS = {
  'packages/core/src/': { lines: 97, branches: 93 },
  'packages/raft/src/': { lines: 96, branches: 92 },
  'packages/node/src/': { lines: 92, branches: 88 },
  'packages/client/src/': { lines: 97, branches: 89 },
  // The command line's lines run in child processes (test/cli.test.ts, the demo and
  // the README's walkthrough); terminal-only branches (the redrawn progress) do not.
  'packages/cli/src/': { lines: 95, branches: 80 },
};

const summary = JSON.parse(readFileSync(new URL('../.tap/report/coverage-summary.json', import.meta.url), 'utf8'));
const root = new URL('..', import.meta.url).pathname;
let failed = false;
for (const [prefix, min] of Object.entries(THRESHOLDS)) {
  const totals = { lines: [0, 0], branches: [0, 0] };
  for (const [file, s] of Object.entries(summary)) {
    if (!file.replace(root, '').startsWith(prefix)) continue;
    for (const k of ['lines', 'branches']) {
      totals[k][0] += s[k].covered;
      totals[k][1] += s[k].total;
    }
  }
  for (const k of ['lines', 'branches']) {
    const [covered, total] = totals[k];
    const pct = total === 0 ? 0 : (100 * covered) / total;
    const ok = pct >= min[k];
    if (!ok) failed = true;
    console.log(`coverage ${prefix.padEnd(20)} ${k.padEnd(8)} ${pct.toFixed(1).padStart(5)}% (minimum ${min[k]}%)${ok ? '' : '  BELOW'}`);
  }
}
process.exit(failed ? 1 : 0);
