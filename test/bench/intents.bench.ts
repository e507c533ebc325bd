/**
 * Intents over HTTPS against a standalone node, measured as its users would: the
 * server is its own process (started as `npm start` starts it), the load generator
 * is this one, closed loop, with the realistic mix of support/workload.ts.
 *
 *   npm run bench -- intents [--concurrency 1,16,64,256] [--seconds 15] [--parties 64]
 *                            [--runtime /path/to/node] [--profile] [--json out.json]
 *
 * For each concurrency it prints intents per second and the latency p50, p99 and max
 * of intents, the reads' p99, the answers by status, and the server's RSS after it.
 * With --profile the server runs under --cpu-prof and the top costs are printed,
 * with the share of the JSON parser (the inclusive time of parseJson).
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { runLoad, type LoadStats } from './support/load.js';
import { printSummary, summarize } from './support/profile.js';
import { newestProfile, startBenchServer } from './support/server.js';
import { Mix, bootstrapWorkload } from './support/workload.js';

const { values: a } = parseArgs({
  options: {
    concurrency: { type: 'string', default: '1,16,64,256' },
    seconds: { type: 'string', default: '15' },
    parties: { type: 'string', default: '64' },
    runtime: { type: 'string' },
    profile: { type: 'boolean', default: false },
    json: { type: 'string' },
  },
});

const runtime = a.runtime ?? process.execPath;
const version = execFileSync(runtime, ['--version'], { encoding: 'utf8' }).trim();
const profileDir = a.profile ? mkdtempSync(join(tmpdir(), 'apl-prof-')) : undefined;
const server = await startBenchServer({ execPath: runtime, ...(profileDir === undefined ? {} : { cpuProfDir: profileDir }) });
const rows: (LoadStats & { concurrency: number; rssBytes: number })[] = [];
try {
  const runId = `b${Date.now().toString(36)}`;
  const fixtures = await bootstrapWorkload(server.admin, Number(a.parties), runId);
  const mix = new Mix(fixtures, runId);
  const load = (concurrency: number, durationMs: number) => runLoad({ urls: [server.proc.agentUrl], ca: server.ca, concurrency, durationMs, mix });
  await load(16, 3000); // warm-up: JIT, caches, connections
  console.log(`server on Node.js ${version}; load generator on ${process.version}; ${fixtures.agents.length} agents`);
  console.log('| in flight | intents/s | p50 | p99 | max | read p99 | answers | server RSS |');
  console.log('|---:|---:|---:|---:|---:|---:|---|---:|');
  for (const c of a.concurrency.split(',').map(Number)) {
    const s = await load(c, Number(a.seconds) * 1000);
    const rssBytes = server.rss();
    rows.push({ ...s, concurrency: c, rssBytes });
    const answers = Object.entries(s.statuses).map(([k, v]) => `${k}: ${v}`).join(', ');
    console.log(`| ${c} | ${Math.round(s.intentsPerSecond).toLocaleString('en-US')} | ${s.p50.toFixed(1)} ms | ${s.p99.toFixed(1)} ms | ${s.max.toFixed(0)} ms | ${s.readP99.toFixed(1)} ms | ${answers} | ${(rssBytes / 2 ** 20).toFixed(0)} MB |`);
  }
} finally {
  await server.stop();
}
if (profileDir !== undefined) {
  printSummary(summarize(newestProfile(profileDir), {
    'JSON parser (parseJson)': (fn, url) => fn === 'parseJson' && url.includes('/core/'),
  }));
}
if (a.json) writeFileSync(a.json, `${JSON.stringify({ runtime: version, rows }, null, 2)}\n`);
