// `npm run bench -- intents --alloc-profile`, run briefly as a user runs it: the server
// samples its allocations over the matrix's level, and the benchmark prints where they
// came from, leaving no profile and no data behind; and each of the server's threads'
// CPU per request; then the open loop at a rate given, headed as such.
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { REPO } from './support/process.js';

t.setTimeout(180_000);

t.test('--alloc-profile prints the allocation by area and by function', async (t) => {
  const out = mkdtempSync(join(tmpdir(), 'apl-bench-out-'));
  t.teardown(() => rmSync(out, { recursive: true, force: true }));
  const before = new Set(readdirSync(tmpdir()).filter((f) => f.startsWith('apl-alloc-')));
  const r = spawnSync(process.execPath, [join(REPO, 'test/dist/bench/intents.bench.js'), '--concurrency', '4', '--seconds', '2', '--half-peak-rps', '40', '--alloc-profile', '--out', out, '--label', 't'], { encoding: 'utf8', timeout: 150_000 });
  t.equal(r.status, 0, r.stderr);
  const m = /allocated (\d+) MB while sampled, about (\d+) KB per request/.exec(r.stdout);
  t.ok(m, 'the total and the share of a request');
  t.ok(Number(m?.[2]) > 0, `${m?.[2]} KB per request`);
  t.match(r.stdout, /by area \(allocated in the function itself\):\n {4} +\d+\.\d %  \S/);
  t.match(r.stdout, /top functions:\n {4} +\d+\.\d %  \S/);
  t.match(r.stdout, /@apl\/core/, 'the core is among the areas');
  // Under the table, each of the server's threads by name: the JavaScript thread and the agent plane's at least.
  const threads = /\n {2}4 in flight: (.*); the load generator (\d+\.\d{3}) ms\n/.exec(r.stdout);
  t.ok(threads, 'the CPU per request by thread');
  const named = new Map((threads?.[1] ?? '').split('; ').map((p) => {
    const m = /^(\S+) (\d+\.\d{3}) ms, slept (\d+\.\d)×$/.exec(p);
    return [m?.[1] ?? p, { ms: Number(m?.[2]), sleeps: Number(m?.[3]) }] as const;
  }));
  t.ok((named.get('main')?.ms ?? 0) > 0, `the JavaScript thread: ${JSON.stringify(named.get('main'))}`);
  t.ok((named.get('apl-agent')?.ms ?? 0) > 0, `the agent plane's thread: ${JSON.stringify(named.get('apl-agent'))}`);
  t.ok((named.get('main')?.sleeps ?? 0) > 0, 'the JavaScript thread slept between requests');
  // The open loop at the rate given is headed as such, not as half of the peak it did not run at.
  t.match(r.stdout, /\nthe rate given \(--half-peak-rps\), against a peak \([\d,]+ intents\/s at 4 in flight\), open loop at 40 requests\/s: [\d,]+ intents\/s, p50 [\d.]+ ms, p99 [\d.]+ ms, .*p99 target 25 ms: (met|MISSED)\n/);
  t.notMatch(r.stdout, /\nhalf of peak/, 'and not as half of peak');
});
