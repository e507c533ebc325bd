// `npm run bench -- reference`, run briefly as a user runs it where PostgreSQL's server
// programs are installed: it starts a server of its own on a Unix socket, drives the
// ledger's core with pgbench, prints a row per level with latencies and CPU from both
// sides, and leaves no server and no directory behind, also when stopped by Ctrl-C.
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { interruptBench } from './support/interrupt.js';
import { REPO } from './support/process.js';

t.setTimeout(120_000);

const installed = existsSync('/usr/lib/postgresql') && readdirSync('/usr/lib/postgresql').some((v) => existsSync(join('/usr/lib/postgresql', v, 'bin', 'pgbench')));

t.test('the reference runs PostgreSQL on a socket of its own and reports every level', { skip: installed ? false : "PostgreSQL's server programs are not installed (Debian: postgresql)" }, async (t) => {
  const out = mkdtempSync(join(tmpdir(), 'apl-bench-out-'));
  t.teardown(() => rmSync(out, { recursive: true, force: true }));
  const before = new Set(readdirSync(tmpdir()).filter((f) => f.startsWith('apl-pgref-')));
  const r = spawnSync(process.execPath, [join(REPO, 'test/dist/bench/reference.bench.js'), '--concurrency', '1,4', '--seconds', '2', '--out', out, '--label', 't'], { encoding: 'utf8', timeout: 100_000 });
  t.equal(r.status, 0, r.stderr);
  t.match(r.stdout, /^PostgreSQL \d+\.\d+/m, 'names the server');
  t.match(r.stdout, /^disk: [\d,]+ synced writes\/s/m, "the disk's rate, measured first");
  const report = JSON.parse(readFileSync(join(out, 'reference-t.json'), 'utf8')) as { rows: { clients: number; transactions: number; perSecond: number; p50: number; p99: number; max: number; serverCpuMsPerTransaction: number }[] };
  t.same(report.rows.map((row) => row.clients), [1, 4], 'a row per level');
  for (const row of report.rows) {
    t.ok(row.transactions > 0 && row.perSecond > 0, `${row.clients} clients: ${row.transactions} transactions logged, ${row.perSecond}/s`);
    t.ok(row.p50 > 0 && row.p50 <= row.p99 && row.p99 <= row.max, `latencies in order: ${row.p50} <= ${row.p99} <= ${row.max} ms`);
    t.ok(row.serverCpuMsPerTransaction > 0, `the server's CPU counted: ${row.serverCpuMsPerTransaction} ms per transaction`);
  }
  t.same(readdirSync(tmpdir()).filter((f) => f.startsWith('apl-pgref-') && !before.has(f)), [], "the server's directory is removed");
  const left = spawnSync('pgrep', ['-f', 'apl-pgref-'], { encoding: 'utf8' });
  t.equal(left.stdout.trim(), '', 'no server left running');
});

t.test('Ctrl-C stops the reference at once: pgbench, the server and its directory go with it', { skip: installed ? false : "PostgreSQL's server programs are not installed (Debian: postgresql)" }, async (t) => {
  const out = mkdtempSync(join(tmpdir(), 'apl-bench-out-'));
  t.teardown(() => rmSync(out, { recursive: true, force: true }));
  const before = new Set(readdirSync(tmpdir()).filter((f) => f.startsWith('apl-pgref-')));
  // The table's head is printed just before the first level's 90 s of pgbench begin.
  const r = await interruptBench(join(REPO, 'test/dist/bench/reference.bench.js'), ['--concurrency', '1', '--seconds', '90', '--out', out, '--label', 'stopped']);
  t.ok(r.began, 'the measured levels have begun');
  t.equal(r.signal, 'SIGINT', 'it ends by the signal');
  t.ok(r.seconds < 30, `in ${r.seconds.toFixed(1)} s, not at the end of pgbench's 90`);
  t.same(readdirSync(tmpdir()).filter((f) => f.startsWith('apl-pgref-') && !before.has(f)), [], "the server's directory is removed");
  t.equal(spawnSync('pgrep', ['-f', 'apl-pgref-'], { encoding: 'utf8' }).stdout.trim(), '', 'no server and no pgbench left running');
});
