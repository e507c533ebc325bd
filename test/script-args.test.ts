// The benchmarks' and the chaos run's command lines, run as `npm run bench` and
// `npm run chaos` run them (the compiled scripts): --help lists the options, and a
// bad option or value is refused with why, exit code 2, before anything starts.
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { REPO } from './support/process.js';

const run = (script: string, ...args: string[]) => {
  const r = spawnSync(process.execPath, [join(REPO, script), ...args], { encoding: 'utf8', timeout: 60_000 });
  return { code: r.status, out: r.stdout, err: r.stderr };
};

t.test('npm run bench -- --help names every benchmark', async (t) => {
  const r = run('scripts/bench.mjs', '--help');
  t.equal(r.code, 0);
  const names = readdirSync(join(REPO, 'test/dist/bench')).filter((f) => f.endsWith('.bench.js')).map((f) => f.replace(/\.bench\.js$/, ''));
  t.ok(names.length >= 5, `${names.length} benchmarks`);
  for (const name of names) t.match(r.out, new RegExp(`^  ${name} +\\S`, 'm'), `${name}, with what it measures`);
});

t.test('a filter that matches no benchmark is refused', async (t) => {
  const r = run('scripts/bench.mjs', 'nosuch');
  t.equal(r.code, 2);
  t.match(r.err, 'no benchmark matches "nosuch"');
});

t.test("a benchmark's --help lists its options with their defaults", async (t) => {
  const r = run('test/dist/bench/intents.bench.js', '--help');
  t.equal(r.code, 0);
  t.match(r.out, /^npm run bench -- intents /);
  t.match(r.out, /^ {2}--concurrency <value> +default 1,16,64,256$/m);
  t.match(r.out, /^ {2}--half-peak-rps <value>$/m);
  t.match(r.out, /^ {2}--server-env <value> \(repeatable\)$/m);
  t.match(r.out, /^ {2}--no-half-peak$/m);
});

t.test('bad options and values are refused before anything starts', async (t) => {
  const cases: [string, string[], string][] = [
    ['test/dist/bench/intents.bench.js', ['--seconds', '0'], '--seconds 0: expected a whole number of at least 1'],
    ['test/dist/bench/intents.bench.js', ['--concurrency', '16,,64'], '--concurrency 16,,64: expected whole numbers of at least 1, separated by commas'],
    ['test/dist/bench/intents.bench.js', ['--half-peak-rps', 'fast'], '--half-peak-rps fast: expected a number above 0'],
    ['test/dist/bench/intents.bench.js', ['--server-env', 'HOME=/'], '--server-env HOME=/: expected APL_NAME=value'],
    ['test/dist/bench/growth.bench.js', ['--intents', '10.5'], '--intents 10.5: expected a whole number of at least 1'],
    ['test/dist/bench/growth.bench.js', ['--bogus'], "Unknown option '--bogus'"],
    ['test/dist/bench/cluster.bench.js', ['--to', 'nowhere'], '--to nowhere: expected all or primary'],
    ['test/dist/bench/cluster.bench.js', ['--kills=-1'], '--kills -1: expected a whole number of at least 0'],
    ['test/dist/bench/cluster.bench.js', ['--main', '/nonexistent/main.js'], '--main /nonexistent/main.js: no such file'],
    ['test/dist/bench/disk.bench.js', ['--table-mib', '0'], '--table-mib 0: expected a whole number of at least 1'],
    ['test/dist/bench/raft.bench.js', ['--seconds', '5'], "Unknown option '--seconds'"],
    ['test/dist/bench/frontend.bench.js', ['--concurrency', '0'], '--concurrency 0: expected a whole number of at least 1'],
    ['test/dist/bench/reference.bench.js', ['--accounts', '1'], '--accounts 1: expected a whole number of at least 2'],
    ['test/dist/bench/reference.bench.js', ['--pg-bin', '/nonexistent'], '--pg-bin /nonexistent: no initdb there'],
    ['test/dist/bench/wake.bench.js', ['--count', '5'], '--count 5: expected a whole number of at least 10'],
    ['test/dist/chaos/main.js', ['--agents', 'many'], '--agents many: expected a whole number of at least 1'],
  ];
  for (const [script, args, why] of cases) {
    const r = run(script, ...args);
    t.equal(r.code, 2, `${script} ${args.join(' ')}: exit code`);
    t.match(r.err, why, 'says why');
    t.match(r.err, '(--help lists the options)', 'points to --help');
    t.equal(r.out, '', 'printed nothing else: nothing started');
  }
});
