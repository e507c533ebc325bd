// `npm run bench -- snapshot`, run briefly as a user runs it: a node's store is built,
// then streamed from one member's process to another's, and each transfer's size, time,
// rate and CPU are printed and written; nothing is left running or on the disk.
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { REPO } from './support/process.js';

t.setTimeout(180_000);
const BENCH = join(REPO, 'test/dist/bench/snapshot.bench.js');

t.test('a store streamed between two members\' processes is measured', async (t) => {
  const out = mkdtempSync(join(tmpdir(), 'apl-bench-out-'));
  t.teardown(() => rmSync(out, { recursive: true, force: true }));
  const before = new Set(readdirSync(tmpdir()).filter((f) => f.startsWith('apl-bench-snapshot-')));
  const r = spawnSync(process.execPath, [BENCH, '--intents', '400', '--transfers', '2', '--parties', '4', '--json', join(out, 'snapshot.json')], { encoding: 'utf8', timeout: 150_000 });
  t.equal(r.status, 0, r.stderr);
  t.match(r.stdout, /^a store of 400 intents \([\d,]+ intents\/s at 64 in flight\), streamed 2 times from one member's process to another's$/m);
  const rows = r.stdout.split('\n').filter((l) => /^\| \d+ \|/.test(l));
  t.equal(rows.length, 2, 'a row per transfer');
  for (const row of rows) t.match(row, /^\| \d \| \d+\.\d MiB \| \d+\.\d\d s \| \d+ MiB\/s \| [\d,]+ ms \/ [\d,]+ ms \| [\d,]+ ms \/ [\d,]+ ms \|$/);
  const report = JSON.parse(readFileSync(join(out, 'snapshot.json'), 'utf8')) as { intents: number; transfers: { mib: number; seconds: number }[] };
  t.equal(report.intents, 400);
  t.equal(report.transfers.length, 2);
  for (const x of report.transfers) t.ok(x.mib > 0.5 && x.seconds > 0, `${x.mib.toFixed(1)} MiB in ${x.seconds.toFixed(2)} s`);
  t.same(readdirSync(tmpdir()).filter((f) => f.startsWith('apl-bench-snapshot-') && !before.has(f)), [], 'its directories are removed');
  t.equal(spawnSync('pgrep', ['-f', 'snapshot-peer.js'], { encoding: 'utf8' }).stdout.trim(), '', 'no member process left running');
});

t.test('a bad option is refused before anything starts', async (t) => {
  const r = spawnSync(process.execPath, [BENCH, '--transfers', '0'], { encoding: 'utf8', timeout: 30_000 });
  t.equal(r.status, 2);
  t.match(r.stderr, /--transfers 0: expected a whole number of at least 1/);
});
