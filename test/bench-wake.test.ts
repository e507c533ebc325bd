// `npm run bench -- wake`, run briefly as a user runs it: a row for each handoff, with
// the CPU it cost each side and how long it took.
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { REPO } from './support/process.js';

t.test('the wake benchmark prints a row per handoff', async (t) => {
  const r = spawnSync(process.execPath, [join(REPO, 'test/dist/bench/wake.bench.js'), '--count', '500'], { encoding: 'utf8', timeout: 60_000 });
  t.equal(r.status, 0, r.stderr);
  t.match(r.stdout, /^500 handoffs of each kind, 1 ms apart/m);
  const rows = r.stdout.split('\n').filter((l) => /^\| (a|messages) /.test(l));
  t.equal(rows.length, 3, 'a sleeping worker, libuv\'s pool, a worker awake');
  for (const row of rows) {
    const cells = row.split('|').slice(2, 6).map((c) => c.trim());
    t.ok(cells.every((c) => /^-?\d+\.\d µs$/.test(c)), `figures in µs: ${row}`);
    t.ok(Number(cells[2]!.split(' ')[0]) > 0, 'each handoff took some time');
  }
});

t.test('fewer handoffs than its figures need are refused', async (t) => {
  const r = spawnSync(process.execPath, [join(REPO, 'test/dist/bench/wake.bench.js'), '--count', '20'], { encoding: 'utf8', timeout: 60_000 });
  t.equal(r.status, 2);
  t.match(r.stderr, /--count 20: expected a whole number of at least 500/);
});
