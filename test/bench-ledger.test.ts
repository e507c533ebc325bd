// `npm run bench -- ledger`, run as a user runs it: the core's apply, then a node over
// HTTPS at 1, 8 and 64 in flight, every intent answered 200.
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { REPO } from './support/process.js';

t.test('the ledger benchmark runs to its end', async (t) => {
  const r = spawnSync(process.execPath, [join(REPO, 'test/dist/bench/ledger.bench.js')], { encoding: 'utf8', timeout: 120_000 });
  t.equal(r.status, 0, r.stderr);
  t.match(r.stdout, /^core apply: 20000 intents in [\d.]+ s = \d+ intents\/s/m);
  for (const inFlight of [1, 8, 64]) {
    t.match(r.stdout, new RegExp(`^https, ${inFlight} in flight: \\d+ intents in [\\d.]+ s = \\d+ intents/s; latency p50 [\\d.]+ ms, p99 [\\d.]+ ms; [\\d.]+ fsyncs per intent$`, 'm'));
  }
});
