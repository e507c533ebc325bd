// `npm run bench -- growth`, run briefly as a user runs it: a node in its own process,
// the load from this side, a line per window of intents recorded, then a restart timed
// to ready with everything it had recorded, the four verdicts, and the same figures in
// the JSON file asked for.
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { REPO } from './support/process.js';

t.setTimeout(180_000);

t.test('three windows, a restart with every intent, the verdicts and the JSON file', async (t) => {
  const out = mkdtempSync(join(tmpdir(), 'apl-bench-growth-'));
  t.teardown(() => rmSync(out, { recursive: true, force: true }));
  const json = join(out, 'growth.json');
  const r = spawnSync(process.execPath, [join(REPO, 'test/dist/bench/growth.bench.js'), '--intents', '1500', '--window', '500', '--warmup', '100', '--parties', '8', '--concurrency', '8', '--json', json], { encoding: 'utf8', timeout: 150_000 });
  t.equal(r.status, 0, r.stderr);
  t.match(r.stdout, /^100 intents of warm-up \(connections opened, code compiled\), then 1,500 intents at 8 in flight, a line per 500$/m);
  const row = (label: string) => new RegExp(`^\\| ${label} \\| ([\\d,]+) \\| [\\d.]+ ms \\| [\\d.]+ ms \\| \\d+ ms \\| [\\d.]+ s \\| (\\d+) MiB \\| (\\d+) MiB \\| [\\d.]+ / [\\d.]+ / [\\d.]+ ms \\| \\d+ MiB / \\d+ MiB \\| \\d+ \\(\\d+ / \\d+\\) \\| (200: \\d+.*) \\|$`, 'm');
  t.match(r.stdout, row('100 \\(warm-up\\)'), 'the warm-up, on a line of its own');
  for (const recorded of ['600', '1,100', '1,600']) {
    const m = row(recorded).exec(r.stdout);
    t.ok(m, `the window to ${recorded} intents recorded`);
    t.ok(Number(m?.[1]?.replace(/,/g, '')) > 0, `${m?.[1]} intents/s`);
    t.ok(Number(m?.[2]) > 0, `server RSS ${m?.[2]} MiB`);
  }
  // Everything recorded is there after the restart: the bootstrap's operations and every intent.
  const restart = /^restart of the 1,600-intent node: ready in ([\d.]+) s \(applied index (\d+)\)$/m.exec(r.stdout);
  t.ok(restart, 'the restart, timed');
  t.ok(Number(restart?.[2]) >= 1600, `applied index ${restart?.[2]} after the restart, with all 1,600 intents`);
  t.match(r.stdout, /^last window \d+\/s against the first's \d+\/s: (met|MISSED)$/m);
  t.match(r.stdout, /^max latency \d+ ms after the warm-up \(target 250\): (met|MISSED); in the warm-up \d+ ms$/m);
  t.match(r.stdout, /^503 answers: 0: met$/m, 'no answer was a 503');
  t.match(r.stdout, /^peak heap \d+ MiB; restart [\d.]+ s \(target 5\): (met|MISSED)$/m);

  const saved = JSON.parse(readFileSync(json, 'utf8')) as { warmup: { intents: number }; rows: { recorded: number; intents: number; rssBytes: number }[]; restartMs: number };
  t.equal(saved.warmup.intents, 100);
  t.same(saved.rows.map((w) => w.recorded), [600, 1100, 1600], 'a row per window, by intents recorded');
  t.same(saved.rows.map((w) => w.intents), [500, 500, 500]);
  t.ok(saved.rows.every((w) => w.rssBytes > 0));
  t.equal((saved.restartMs / 1000).toFixed(2), restart?.[1], 'the restart, as printed');
});
