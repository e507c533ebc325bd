// `npm run bench -- frontend`, run briefly as a user runs it: the node, then the front end
// alone with the node's answers, each under the same mix; the share of the JavaScript
// thread the front end alone takes is printed, and nothing is left running.
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { REPO } from './support/process.js';

t.setTimeout(180_000);

t.test('the front end alone is measured beside the node, under the same mix', async (t) => {
  const out = mkdtempSync(join(tmpdir(), 'apl-bench-out-'));
  t.teardown(() => rmSync(out, { recursive: true, force: true }));
  const before = new Set(readdirSync(tmpdir()).filter((f) => f.startsWith('apl-frontend-')));
  const r = spawnSync(process.execPath, [join(REPO, 'test/dist/bench/frontend.bench.js'), '--concurrency', '4', '--seconds', '2', '--out', out, '--label', 't'], { encoding: 'utf8', timeout: 150_000 });
  t.equal(r.status, 0, r.stderr);
  const report = JSON.parse(readFileSync(join(out, 'frontend-t.json'), 'utf8')) as { rows: { what: string; requests: number; statuses: Record<string, number>; mainCpuMsPerRequest: number }[]; share: number };
  t.same(report.rows.map((row) => row.what), ['the node, its front end on its JavaScript thread', 'the front end alone']);
  for (const row of report.rows) {
    t.ok(row.requests > 0, `${row.what}: ${row.requests} requests`);
    t.same(Object.keys(row.statuses), ['200'], `${row.what}: every answer 200`);
    t.ok(row.mainCpuMsPerRequest > 0, `${row.what}: ${row.mainCpuMsPerRequest} ms of the JavaScript thread per request`);
  }
  t.ok(report.share > 0 && report.share < 1, `the front end is part of a request's cost: ${report.share}`);
  t.match(r.stdout, /The front end alone costs its JavaScript thread \d+ % of what a request costs the node's/);
  t.same(readdirSync(tmpdir()).filter((f) => f.startsWith('apl-frontend-') && !before.has(f)), [], 'its directory is removed');
  t.equal(spawnSync('pgrep', ['-f', 'frontend-server.js'], { encoding: 'utf8' }).stdout.trim(), '', 'no front end left running');
});
