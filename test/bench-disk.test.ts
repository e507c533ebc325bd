// `npm run bench -- disk`, run briefly as a user runs it: synced 4 KiB writes appended
// and over zeros, alone and beside a writer shaped like LevelDB's compactions, in the
// directory given; nothing is left there, and the writer is gone after.
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { REPO } from './support/process.js';

t.setTimeout(120_000);

t.test('six timed rows, and the directory left as it was', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'apl-bench-disk-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const r = spawnSync(process.execPath, [join(REPO, 'test/dist/bench/disk.bench.js'), '--seconds', '1', '--table-mib', '1', '--dir', dir], { encoding: 'utf8', timeout: 100_000 });
  t.equal(r.status, 0, r.stderr);
  t.match(r.stdout, new RegExp(`^synced 4 KiB writes \\(write \\+ fdatasync\\), 1 s each, in ${dir}/apl-disk-\\w+; the background writer: 1 MiB files, about 50 MB/s\\n`));
  const rows = [...r.stdout.matchAll(/^\| (append|over zeros) \| (alone|beside the writer) \| ([\d,]+) \| ([\d.]+) ms \| ([\d.]+) ms \| ([\d.]+) ms \| ([\d.]+) ms \| (\d+) \/ (\d+) \|$/gm)];
  t.same(rows.map((m) => `${m[1]} ${m[2]}`), [
    'append alone', 'over zeros alone', 'append beside the writer', 'over zeros beside the writer', 'append beside the writer', 'over zeros beside the writer',
  ]);
  for (const m of rows) {
    t.ok(Number(m[3]!.replace(/,/g, '')) > 0, `${m[1]} ${m[2]}: ${m[3]} writes/s`);
    const [p50, p99, p999, max] = m.slice(4, 8).map(Number) as [number, number, number, number];
    // The percentiles are printed to 0.01 ms and the maximum to 0.1 ms: a p99.9 that is the maximum may print 0.05 above it.
    t.ok(p50 <= p99 && p99 <= p999 && p999 <= max + 0.05, `${m[1]} ${m[2]}: p50 ${p50} <= p99 ${p99} <= p99.9 ${p999} <= max ${max}`);
  }
  t.same(readdirSync(dir), [], 'the files written and the writer\'s are removed');
  const running = readdirSync('/proc').filter((pid) => /^\d+$/.test(pid) && commandLine(pid).includes(dir));
  t.same(running, [], 'no process runs in the directory');
});

/** A process's command line, or '' once it is gone. */
function commandLine(pid: string): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8');
  } catch {
    return '';
  }
}
