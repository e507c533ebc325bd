// Proves `npm run demo`: the script it runs (after the build) starts the real server
// process, walks the narrated scenario through the SDK and apl log verify, names
// every verdict it met, and exits 0; and `apl dev init`'s built-in policy is the one
// the docs show (docs/examples/policy.json).
import t from 'tap';
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { EXAMPLE_POLICY } from '@apl/cli';
import { REPO } from './support/process.js';

t.setTimeout(90_000);

t.test('npm run demo exits 0 and names every verdict it met', async (t) => {
  const pkg = JSON.parse(readFileSync(join(REPO, 'package.json'), 'utf8')) as { scripts: Record<string, string> };
  t.equal(pkg.scripts.demo, 'tsc -b && node packages/cli/dist/demo.js', 'the script this test runs is npm run demo after its build');
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('APL_')));
  const child = spawn(process.execPath, [join(REPO, 'packages/cli/dist/demo.js')], { cwd: REPO, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout.on('data', (c: Buffer) => (out += c.toString()));
  child.stderr.on('data', (c: Buffer) => (out += c.toString()));
  const code = await new Promise<number | null>((r) => child.on('close', r));
  if (!t.equal(code, 0, 'exits 0')) t.comment(out);
  t.match(out, /^A standalone node is up: agent plane https:\/\/127\.0\.0\.1:\d+/);
  for (const v of ['Permitted', 'ForbiddenRejected', 'NotPermittedRejected', 'RepairOutstandingRejected', 'ObligationUnmetRejected']) {
    t.match(out, new RegExp(`-> ${v}, `), `it met ${v}`);
  }
  t.match(out, /Verdicts met: Permitted \(5\), ForbiddenRejected \(1\), NotPermittedRejected \(1\), RepairOutstandingRejected \(1\), ObligationUnmetRejected \(1\)\./);
  t.match(out, /-> 422 substrate_rejected \(validation\): Metering 18446744073709551622 would bring the metered total to 18446744073709551622, above the 18446744073709551621 consumed; 0 is already metered and 18446744073709551621 is consumed but not yet metered\./);
  t.match(out, /breached at tick \d+; repair duty \S+\/D-refund \(purchase\.refund\) blocks purchase\.\*/);
  t.match(out, /409 stale_policy[^\n]*pinned pol_demo_\w+_a, then pol_demo_\w+_b in 2 attempts/);
  t.match(out, /\$ apl log verify\n\s+verifying the log: \d+ records[^\n]*\n\s+The log verifies: \d+ records re-applied/);
  t.notMatch(out, /Warning/, 'no runtime warning in the story');
});

t.test('the built-in example policy is docs/examples/policy.json', async (t) => {
  t.same(EXAMPLE_POLICY, JSON.parse(readFileSync(join(REPO, 'docs/examples/policy.json'), 'utf8')));
});
