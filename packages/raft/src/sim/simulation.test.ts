// Proves that the simulator is deterministic (one seed replays one run exactly, down to
// the trace hash), that its command line prints what the documentation promises, and
// that a run without faults is quiet: no crash, a leader, commits.
import t from 'tap';
import { runCli } from './main.js';
import { runSimulation } from './simulation.js';

t.test('one seed replays one run exactly: equal results and trace hashes', async (t) => {
  for (const seed of [1, 42, 12345]) {
    const a = runSimulation({ seed });
    const b = runSimulation({ seed });
    t.same(a, b, `seed ${seed}`);
    t.match(a.traceHash, /^[0-9a-f]{64}$/);
  }
  t.not(runSimulation({ seed: 1 }).traceHash, runSimulation({ seed: 2 }).traceHash, 'different seeds, different runs');
});

t.test('the trace hash covers every event: a trace listener sees the same run', async (t) => {
  const lines: string[] = [];
  const r = runSimulation({ seed: 9, onTrace: (l) => lines.push(l) });
  t.ok(lines.length > r.events, 'at least a line per event');
  t.equal(runSimulation({ seed: 9 }).traceHash, r.traceHash, 'listening does not change the run');
});

t.test('sim --seed S prints a summary and a trace hash, identical on every run', async (t) => {
  const run = (): string[] => {
    const out: string[] = [];
    t.equal(runCli(['--seed', '12345'], (l) => out.push(l)), 0);
    return out;
  };
  const first = run();
  t.match(first[0] ?? '', /^seed 12345: ok /);
  t.match(first[1] ?? '', /^trace sha256 [0-9a-f]{64}$/);
  t.same(run(), first);
});

t.test('sim --seeds N runs N seeds and prints a summary and the counts summed over the seeds', async (t) => {
  const out: string[] = [];
  t.equal(runCli(['--seeds', '5', '--from', '100'], (l) => out.push(l)), 0);
  t.equal(out.length, 2);
  t.match(out[0] ?? '', /^sim: 5 seeds from 100, 5 passed, 0 failed, \d+ events/);
  t.match(out[1] ?? '', /^sim: summed over the seeds: readsAnswered \d+, acked \d+, crashes \d+, snapshotInstalls \d+/);
});

t.test('sim --mutants prints the mutation table, and fails when a variant escapes every seed', async (t) => {
  const out: string[] = [];
  t.equal(runCli(['--mutants', '--seeds', '3'], (l) => out.push(l)), 1, 'three seeds are too few to catch Figure 8');
  t.match(out[0] ?? '', /broken variant \| seeds that catch it \(of 3\)/);
  t.match(out.join('\n'), /\| messages sent before the Ready is persisted \| 3 \| durability 3 \|/);
});

t.test('sim rejects an unknown argument and no seeds with a usage line and status 2, and prints usage without arguments or with --help', async (t) => {
  const out: string[] = [];
  t.equal(runCli(['--bogus'], (l) => out.push(l)), 2);
  t.match(out.join('\n'), /unknown argument --bogus[\s\S]*usage:/);
  const help: string[] = [];
  t.equal(runCli([], (l) => help.push(l)), 0);
  t.match(help.join('\n'), /^usage: sim --seeds N/);
  const asked: string[] = [];
  t.equal(runCli(['--help'], (l) => asked.push(l)), 0, '--help is the usage, not an unknown argument');
  t.match(asked.join('\n'), /^usage: sim --seeds N/);
  const none: string[] = [];
  t.equal(runCli(['--seeds', '0'], (l) => none.push(l)), 2);
  t.match(none.join('\n'), /^sim: --seeds needs at least 1/);
});

t.test('without faults a group elects a leader, commits and stays up', async (t) => {
  for (let seed = 1; seed <= 20; seed++) {
    const r = runSimulation({ seed, faults: false, faultTicks: 200 });
    t.ok(r.ok, `seed ${seed}`);
    t.equal(r.crashes, 0);
    t.ok(r.acked > 10, `seed ${seed} acknowledged ${r.acked} proposals`);
  }
});
