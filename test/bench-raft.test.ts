// `npm run bench -- raft`, run as a user runs it: the Raft core in a simulated group of
// three, one line per batch size. The counts are the simulation's own, so they are
// exact: the leader syncs its log once per batch it proposes, and at one entry per
// batch each entry costs three syncs in the group and eight messages.
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { REPO } from './support/process.js';

t.setTimeout(120_000);

t.test('a line per batch size, with the syncs and messages an entry costs', async (t) => {
  const r = spawnSync(process.execPath, [join(REPO, 'test/dist/bench/raft.bench.js')], { encoding: 'utf8', timeout: 100_000 });
  t.equal(r.status, 0, r.stderr);
  t.match(r.stdout, /^raft core: 3 nodes, in-memory network and disk, 128-byte entries, node v\d+\.\d+\.\d+\nbatch  committed\/s  fsyncs\/entry \(group\)  fsyncs\/entry \(leader\)  messages\/entry  entries  seconds\n/);
  const rows = [...r.stdout.matchAll(/^ +(\d+) +([\d,]+) +([\d.]+) +([\d.]+) +([\d.]+) +(\d+) +([\d.]+)$/gm)].map((m) => ({
    batch: Number(m[1]), perSecond: Number(m[2]!.replace(/,/g, '')), group: m[3], leader: m[4], messages: m[5], entries: Number(m[6]),
  }));
  t.same(rows.map((x) => x.batch), [1, 16, 256], 'batches of 1, 16 and 256 entries');
  for (const x of rows) {
    t.ok(x.perSecond > 0, `batch ${x.batch}: ${x.perSecond} committed/s`);
    t.equal(x.leader, (1 / x.batch).toFixed(4), `batch ${x.batch}: the leader syncs once per batch`);
    t.ok(x.entries >= (x.batch === 1 ? 30_000 : x.batch === 16 ? 300_000 : 1_000_000), `batch ${x.batch}: ${x.entries} entries committed`);
  }
  t.equal(rows[0]?.group, '3.0000', 'one entry at a time: every member syncs it');
  t.equal(rows[0]?.messages, '8.000', 'and it costs eight messages');
});
