// `npm run bench -- start`, run briefly as a user runs it: starts on fresh data
// directories, then restarts of one holding intents, then restarts of it after a write
// torn by a crash (the benchmark checks that each holds what was applied before it
// stopped, and that the torn write was dropped); a row for each phase, and the same
// figures in the JSON file.
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { REPO } from './support/process.js';

t.setTimeout(180_000);

t.test('two fresh starts, two restarts holding the intents, two after a torn write, and the JSON file', async (t) => {
  const out = mkdtempSync(join(tmpdir(), 'apl-bench-start-'));
  t.teardown(() => rmSync(out, { recursive: true, force: true }));
  const json = join(out, 'start.json');
  const r = spawnSync(process.execPath, [join(REPO, 'test/dist/bench/start.bench.js'), '--starts', '2', '--intents', '200', '--parties', '4', '--json', json], { encoding: 'utf8', timeout: 150_000 });
  t.equal(r.status, 0, r.stderr);
  const head = /^starts of a standalone node: from the spawn to its node_started line; each restart held the ([\d,]+) entries applied before \(checked\)$/m.exec(r.stdout);
  t.ok(head, 'the header');
  t.ok(Number(head?.[1]?.replace(/,/g, '')) > 200, `${head?.[1]} entries applied: the intents and the bootstrap's operations`);
  for (const label of ['fresh', 'holding 200 intents', 'the same, after a write torn by a crash']) {
    const m = new RegExp(`^\\| ${label} \\| 2 \\| ([\\d,]+) ms \\| ([\\d,]+) ms \\| ([\\d,]+) ms \\|$`, 'm').exec(r.stdout);
    t.ok(m, `the row ${label}`);
    const [p50, max, cpu] = (m?.slice(1) ?? []).map((v) => Number(v.replace(/,/g, '')));
    t.ok(p50! > 0 && p50! <= max!, `${label}: p50 ${p50} <= max ${max}`);
    t.ok(cpu! > 0, `${label}: ${cpu} ms of CPU by then`);
  }
  type Phase = { starts: number; each: { ms: number; cpuMs: number }[] };
  const saved = JSON.parse(readFileSync(json, 'utf8')) as { intents: number; applied: number; fresh: Phase; restart: Phase; tornWrite: Phase };
  t.equal(saved.intents, 200);
  t.equal(saved.applied, Number(head?.[1]?.replace(/,/g, '')), 'the JSON says as the header');
  t.same([saved.fresh, saved.restart, saved.tornWrite].map((p) => [p.starts, p.each.length]), [[2, 2], [2, 2], [2, 2]], 'each start, in each phase');
});

t.test('options it cannot take are refused, naming the option', async (t) => {
  const r = spawnSync(process.execPath, [join(REPO, 'test/dist/bench/start.bench.js'), '--starts', '0'], { encoding: 'utf8' });
  t.equal(r.status, 2);
  t.match(r.stderr, /--starts 0: expected a whole number of at least 1/);
});
