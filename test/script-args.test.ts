// The benchmarks' and the chaos run's command lines, run as `npm run bench` and
// `npm run chaos` run them (the compiled scripts): --help lists the options, and a
// bad option or value is refused with why, exit code 2, before anything starts.
import t from 'tap';
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { run as runProcess, withoutApl } from './support/apl.js';
import { REPO } from './support/process.js';
import { childrenCpuSeconds, childrenOf } from './bench/support/proc.js';

/** Loaded into a script, lists the modules it loads (support/loaded-modules.ts). */
const LOADED_MODULES = pathToFileURL(join(REPO, 'test/dist/support/loaded-modules.js')).href;
/** What a refusal need not load: the ledger's packages, gRPC, the attestation library, the HTTP client. */
const HEAVY = /\/packages\/(core|raft|node|client)\/|\/node_modules\/(undici|paseto|@grpc|protobufjs|zod|express)\//;

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
  const chaos = run('test/dist/chaos/main.js', '--help');
  t.equal(chaos.code, 0);
  t.match(chaos.out, /^npm run chaos -- .*\[--server-env APL_NAME=value \.\.\.\]$/m);
  t.match(chaos.out, /^ {2}--server-env <value> \(repeatable\)$/m);
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
    ['test/dist/bench/etcd.bench.js', ['--to', 'nowhere'], '--to nowhere: expected all or leader'],
    ['test/dist/bench/etcd.bench.js', ['--keys', '100000000'], '--keys 100000000: its largest key needs more than --key-bytes 8'],
    ['test/dist/bench/etcd.bench.js', ['--etcd-bin', '/nonexistent/etcd'], '--etcd-bin /nonexistent/etcd: no such file'],
    ['test/dist/bench/etcd.bench.js', ['--etcd-bin', '/bin/false'], '--etcd-bin /bin/false: it does not run as etcd (its --version does not begin "etcd Version:")'],
    ['test/dist/bench/wake.bench.js', ['--count', '5'], '--count 5: expected a whole number of at least 500'],
    ['test/dist/bench/intents.bench.js', ['--main', '/nonexistent/main.js'], '--main /nonexistent/main.js: no such file'],
    ['test/dist/bench/intents.bench.js', ['--runtime', '/nonexistent/node'], '--runtime /nonexistent/node: it does not run as a Node.js'],
    ['test/dist/bench/intents.bench.js', ['--server-env', 'APL_LOG_LEVEL=warn'], '--server-env APL_LOG_LEVEL=warn: the benchmark needs the server\'s info lines'],
    ['test/dist/bench/intents.bench.js', ['--label', 'a/b'], '--label a/b: expected a part of a file name, without /'],
    ['test/dist/bench/intents.bench.js', ['--json', '/nonexistent/r.json'], '--json /nonexistent/r.json: the directory /nonexistent does not exist'],
    ['test/dist/bench/growth.bench.js', ['--intents', '20000'], '--intents 20000: expected a whole number of windows of 100000 (--window)'],
    ['test/dist/bench/disk.bench.js', ['--dir', '/nonexistent'], '--dir /nonexistent: no such directory'],
    ['test/dist/chaos/main.js', ['--agents', 'many'], '--agents many: expected a whole number of at least 1'],
    ['test/dist/chaos/main.js', ['--server-env', 'SNAPSHOT_CATCHUP_ENTRIES=5000'], '--server-env SNAPSHOT_CATCHUP_ENTRIES=5000: expected APL_NAME=value'],
  ];
  // Each script starts a Node.js process that refuses at once: three run at a time.
  // Each lists the modules it loaded (support/loaded-modules.ts).
  const listed = mkdtempSync(join(tmpdir(), 'apl-loaded-'));
  t.teardown(() => rmSync(listed, { recursive: true, force: true }));
  const results: Awaited<ReturnType<typeof runProcess>>[] = new Array(cases.length);
  let next = 0;
  const worker = async () => {
    while (next < cases.length) {
      const i = next++;
      const [script, args] = cases[i]!;
      results[i] = await runProcess(process.execPath, [`--import=${LOADED_MODULES}`, join(REPO, script), ...args], { ...withoutApl(), TEST_LOADED_MODULES: join(listed, `${i}.txt`) });
    }
  };
  await Promise.all([worker(), worker(), worker()]);
  for (const [i, [script, args, why]] of cases.entries()) {
    const r = results[i]!;
    t.equal(r.code, 2, `${script} ${args.join(' ')}: exit code`);
    t.match(r.stderr, why, 'says why');
    t.match(r.stderr, '(--help lists the options)', 'points to --help');
    t.equal(r.stdout, '', 'printed nothing else: nothing started');
    const loaded = readFileSync(join(listed, `${i}.txt`), 'utf8').split('\n').filter((u) => u !== '');
    t.ok(loaded.some((u) => u.endsWith(script.replace(/^test\/dist\//, '/'))), 'the list of loaded modules has the script itself');
    t.same(loaded.filter((u) => HEAVY.test(u)), [], "and none of the node's packages or the load generator's client: refused before they load");
  }
});

t.test('npm run bench passes on a benchmark\'s refusal (exit 2), and a signal stops the benchmark, its server and its directories', async (t) => {
  const refused = run('scripts/bench.mjs', 'wake', '--count', '5');
  t.equal(refused.code, 2, 'the refusal\'s own exit code');
  const outDir = mkdtempSync(join(tmpdir(), 'apl-sigint-out-'));
  t.teardown(() => rmSync(outDir, { recursive: true, force: true }));
  const child = spawn(process.execPath, [join(REPO, 'scripts/bench.mjs'), 'intents', '--seconds', '60', '--concurrency', '1', '--no-half-peak', '--out', outDir], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout.on('data', (c: Buffer) => (out += c.toString()));
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
  for (const deadline = Date.now() + 60_000; !out.includes('| in flight |'); await new Promise((r) => setTimeout(r, 100))) {
    if (Date.now() > deadline) t.fail(`the benchmark did not start its load: ${out}`);
  }
  // Its server: the node process whose parent is the benchmark (the child of bench.mjs).
  const bench = childrenOf(child.pid!)[0]!;
  const [server] = childrenOf(bench).filter((p) => cmdline(p).includes('packages/node/dist/main.js'));
  t.ok(server !== undefined, 'its server runs');
  const env = Object.fromEntries(readFileSync(`/proc/${server}/environ`, 'utf8').split('\0').map((kv) => [kv.slice(0, kv.indexOf('=')), kv.slice(kv.indexOf('=') + 1)]));
  const dirs = [env.APL_DATA_DIR!, dirname(env.APL_TLS_CA!)];
  t.ok(dirs.every((d) => existsSync(d)), `its directories: ${dirs.join(', ')}`);
  child.kill('SIGINT');
  t.equal(await exited, 130, 'stopped by the signal');
  await new Promise((r) => setTimeout(r, 500));
  t.notOk(running(server!), 'its server is gone');
  t.notOk(running(bench), 'and the benchmark');
  t.same(dirs.filter((d) => existsSync(d)), [], 'its data and certificate directories are gone');
});

/** Whether a process runs (a zombie, exited and not yet reaped by its new parent, does not). */
function running(pid: number): boolean {
  try {
    return !/^\d+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return false;
  }
}

function cmdline(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8');
  } catch {
    return '';
  }
}

t.test("a child that ends while its parent's children are read is left out, not an error", async (t) => {
  // A shell that starts and reaps a short-lived child again and again: a child listed is
  // often gone by the time its own stat file is read (the reference benchmark met one).
  const shell = spawn('bash', ['-c', 'while :; do /bin/true; done'], { stdio: 'ignore' });
  t.teardown(() => shell.kill('SIGKILL'));
  await new Promise((r) => setTimeout(r, 100));
  // Read until 50 readings have found a child (a few seconds on a busy machine): the sum
  // that read each child's stat file again failed about one such reading in five.
  let reads = 0;
  let withChildren = 0;
  for (const end = performance.now() + 30_000; withChildren < 50 && performance.now() < end; reads++) {
    if (childrenOf(shell.pid!).length > 0) withChildren++;
    const seconds = childrenCpuSeconds(shell.pid!);
    if (!(seconds >= 0)) t.fail(`read ${reads}: ${seconds} CPU seconds`);
  }
  t.equal(withChildren, 50, `the shell had children in ${withChildren} of ${reads} reads`);
});
