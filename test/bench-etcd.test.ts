// `npm run bench -- etcd`, run briefly as a user runs it where etcd is installed: it
// starts three members of its own on 127.0.0.1, drives them with puts over gRPC, prints
// a row per level with latencies, CPU and synced writes from every member, checks that
// the revision rose by the puts acknowledged, and leaves no member and no directory
// behind. (Stopped by Ctrl-C, its members and directory go as the PostgreSQL
// reference's server does, by the same support/cleanup.ts: that reference's test stops
// one so. One run of each here: three members and their load are two CPUs' worth.)
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { onPath } from './bench/support/proc.js';
import { REPO } from './support/process.js';

t.setTimeout(120_000);

const installed = onPath('etcd') !== null;
const skip = installed ? false : 'etcd is not installed (Debian: etcd-server)';
const ours = () => readdirSync(tmpdir()).filter((f) => f.startsWith('apl-etcdref-'));
const running = () => spawnSync('pgrep', ['-f', 'apl-etcdref-'], { encoding: 'utf8' }).stdout.trim();

t.test('the reference runs three etcd members of its own and reports every level', { skip }, async (t) => {
  const out = mkdtempSync(join(tmpdir(), 'apl-bench-out-'));
  t.teardown(() => rmSync(out, { recursive: true, force: true }));
  const before = new Set(ours());
  const r = spawnSync(process.execPath, [join(REPO, 'test/dist/bench/etcd.bench.js'), '--concurrency', '1,4', '--seconds', '1', '--out', out, '--label', 't'], { encoding: 'utf8', timeout: 100_000 });
  t.equal(r.status, 0, r.stderr);
  t.match(r.stdout, /^etcd \d+\.\d+\.\d+; three members; leader m[123]; mutual TLS between members/m, 'names the server, its leader and its TLS');
  t.match(r.stdout, /^disk: [\d,]+ synced writes\/s/m, "the disk's rate, measured first");
  t.notMatch(r.stderr, /DeprecationWarning/, 'no warning from the TLS client');
  const report = JSON.parse(readFileSync(join(out, 'etcd-t.json'), 'utf8')) as {
    leader: string;
    rows: { concurrency: number; puts: number; perSecond: number; p50: number; p99: number; max: number; cpuMsPerPut: number[]; loadCpuMsPerPut: number; syncsPerPut: number[] }[];
    revisions: { before: number; after: number; acknowledged: number };
  };
  t.same(report.rows.map((row) => row.concurrency), [1, 4], 'a row per level');
  let puts = 0;
  for (const row of report.rows) {
    puts += row.puts;
    t.ok(row.puts > 0 && row.perSecond > 0, `${row.concurrency} in flight: ${row.puts} puts, ${row.perSecond.toFixed(0)}/s`);
    t.ok(row.p50 > 0 && row.p50 <= row.p99 && row.p99 <= row.max, `latencies in order: ${row.p50} <= ${row.p99} <= ${row.max} ms`);
    t.equal(row.cpuMsPerPut.length, 3, 'a CPU figure per member');
    t.ok(row.cpuMsPerPut.every((ms) => ms > 0) && row.loadCpuMsPerPut > 0, `every member's CPU counted and the generator's: ${row.cpuMsPerPut.join(' / ')}, ${row.loadCpuMsPerPut} ms per put`);
    // Every member syncs its log for what it writes: at most once per put, and at least once per few at these levels.
    t.ok(row.syncsPerPut.every((x) => x > 0.05 && x <= 1.01), `every member's synced writes per put: ${row.syncsPerPut.join(' / ')}`);
  }
  const { before: from, after, acknowledged } = report.revisions;
  t.ok(acknowledged >= puts, `the puts acknowledged (${acknowledged}) include every measured one (${puts}), and the warm-up's`);
  t.equal(after - from, acknowledged, 'the revision rose by exactly the puts acknowledged');
  t.match(r.stdout, `the store's revision rose by ${acknowledged.toLocaleString('en-US')} for ${acknowledged.toLocaleString('en-US')} puts acknowledged`);
  t.same(ours().filter((f) => !before.has(f)), [], "the members' directory is removed");
  t.equal(running(), '', 'no member left running');
});
