// `npm run bench -- cluster`, run briefly as a user runs it: three members as processes
// on free ports of 127.0.0.1, the load from this side, one row of the table with each
// member's memory, CPU per request (the primary's marked), synced writes per intent
// and the share of the disk's synced-write rate, measured first; then one failover
// timed from the primary's SIGKILL to the next commit; the table and the figures
// written to the directory asked for, and to the JSON file asked for.
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { REPO } from './support/process.js';

t.setTimeout(180_000);

t.test('one level of load and one failover, in the table and in the files', async (t) => {
  const out = mkdtempSync(join(tmpdir(), 'apl-bench-cluster-'));
  t.teardown(() => rmSync(out, { recursive: true, force: true }));
  const json = join(out, 'cluster.json');
  const r = spawnSync(process.execPath, [join(REPO, 'test/dist/bench/cluster.bench.js'), '--concurrency', '4', '--seconds', '2', '--parties', '4', '--kills', '1', '--out', out, '--label', 't', '--json', json], { encoding: 'utf8', timeout: 150_000 });
  t.equal(r.status, 0, r.stderr);
  t.match(r.stdout, /^three-node cluster on Node\.js v\d+\.\d+\.\d+; primary n[123]; 4 agents; requests to every replica in turn; \d+ CPUs \(.+\)$/m);
  const disk = /^disk: ([\d,]+) synced writes\/s \(4 KiB append \+ fsync, in the primary's data directory\), each p50 [\d.]+ ms, p99 [\d.]+ ms, max \d+ ms$/m.exec(r.stdout);
  t.ok(disk, 'the disk\'s synced-write rate, measured first');
  const row = /^\| 4 \| ([\d,]+) \| ([\d.]+) ms \| ([\d.]+) ms \| (\d+) ms \| ([\d.]+) ms \| (.*) \| (\d+) \/ (\d+) \/ (\d+) MiB \| (\S+) \/ (\S+) \/ (\S+) ms \| ([\d.]+) ms \| ([\d.]+) \/ ([\d.]+) \/ ([\d.]+) \| ([\d.]+) \|$/m.exec(r.stdout);
  t.ok(row, `the row at 4 in flight, under its heading:\n${r.stdout}`);
  if (!row) return;
  t.ok(Number(row[1]!.replace(/,/g, '')) > 0, `${row[1]} intents/s`);
  t.match(row[6], /^200: \d+/, 'the answers, counted by status');
  for (const rss of row.slice(7, 10)) t.ok(Number(rss) > 0 && Number(rss) < 8192, `each member's resident memory in MiB: ${rss}`);
  const cpu = row.slice(10, 13);
  t.equal(cpu.filter((c) => c.endsWith('*')).length, 1, `one member is marked the primary: ${cpu.join(' / ')}`);
  for (const c of cpu) t.ok(Number(c.replace('*', '')) > 0, `CPU per request ${c}`);
  t.ok(Number(row[13]) > 0, 'the load generator\'s CPU per request');
  for (const s of row.slice(14, 17)) t.ok(Number(s) > 0, `synced writes per intent ${s}`);
  const share = Number(row[1]!.replace(/,/g, '')) / Number(disk?.[1]?.replace(/,/g, ''));
  t.ok(Math.abs(Number(row[17]) - share) < 0.01 + share * 0.01, `intents/s ÷ the disk's synced writes/s: ${row[17]}, from the figures printed ${share.toFixed(3)}`);

  // Each member's CPU per request by thread, a line per member under the table.
  const threads = [...r.stdout.matchAll(/^ {2}4 in flight, (n[123])( \(primary\))?: (.*)$/gm)];
  t.same(threads.map((m) => m[1]).sort(), ['n1', 'n2', 'n3'], 'a line of threads per member');
  t.equal(threads.filter((m) => m[2] !== undefined).length, 1, 'one of them the primary');
  for (const m of threads) {
    t.match(m[3], /^[^;,]+ \d+\.\d{3} ms, slept \d+\.\d×(; [^;,]+ \d+\.\d{3} ms, slept \d+\.\d×)*$/, `${m[1]}: each thread's CPU and sleeps: ${m[3]}`);
    t.match(m[3], /(^|; )main \d/, `${m[1]}: its JavaScript thread among them`);
    t.match(m[3], /; apl-agent \d|^apl-agent \d/, `${m[1]}: and its agent plane's thread`);
  }
  const failover = /^failover \(SIGKILL of the primary to the first intent committed by the next\): (\d+) ms; median (\d+) ms, max (\d+) ms$/m.exec(r.stdout);
  t.ok(failover, 'the failover, timed');
  t.ok(Number(failover?.[1]) > 0 && failover?.[1] === failover?.[3], `one failover: ${failover?.[0]}`);

  t.same(readdirSync(out).sort(), ['cluster-t.json', 'cluster-t.md', 'cluster.json'], 'the table and the figures, under --out and --label');
  const table = readFileSync(join(out, 'cluster-t.md'), 'utf8');
  for (const line of [disk?.[0], row[0], failover?.[0]]) t.ok(line !== undefined && table.includes(`${line}\n`), `the markdown file has: ${line}`);
  t.notMatch(table, /written:/, 'and not the line that names it');
  const saved = JSON.parse(readFileSync(json, 'utf8')) as { runtime: string; fsyncPerSecond: number; rows: { concurrency: number; intents: number; rssBytes: number[]; cpuMsPerRequest: number[]; cpuByThread: { name: string; ms: number; sleeps: number }[][]; fsyncShare: number }[]; failoverMs: number[] };
  t.same(saved, JSON.parse(readFileSync(join(out, 'cluster-t.json'), 'utf8')), 'the JSON file asked for is the one written under --out');
  t.equal(saved.runtime, process.version);
  t.equal(Math.round(saved.fsyncPerSecond).toLocaleString('en-US'), disk?.[1]);
  t.equal(saved.rows[0]!.fsyncShare.toFixed(2), row[17]);
  t.equal(saved.rows.length, 1);
  t.equal(saved.rows[0]!.concurrency, 4);
  t.ok(saved.rows[0]!.intents > 0);
  t.equal(saved.rows[0]!.rssBytes.length, 3, 'one memory figure per member');
  t.equal(saved.rows[0]!.cpuMsPerRequest.length, 3, 'one CPU figure per member');
  t.same(saved.rows[0]!.cpuByThread.map((threads) => threads.some((x) => x.name === 'main' && x.ms > 0)), [true, true, true], "and each member's threads, its JavaScript thread among them");
  t.same(saved.failoverMs, [Number(failover?.[1])], 'the failover, as printed');
});
