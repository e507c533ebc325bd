/**
 * How long a node takes to start, as an operator who starts or restarts one sees it:
 * from the process's spawn to its `node_started` line (both planes listen, and a
 * standalone node is its own primary), and the CPU the process spent until then, all
 * its threads together.
 *
 * `--starts` starts on a fresh data directory each; then one node records `--intents`
 * intents of the benchmark's mix and stops, and is restarted `--starts` times on that
 * directory. Each start is stopped (SIGTERM) before the next. `--main` runs another
 * build's server, to compare two builds on one machine.
 *
 * Usage: npm run bench -- start [--starts 10] [--intents 2000] [--parties 16] [--main <main.js>] [--json <file>]
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ScriptArgs } from '../support/args.js';
import { removeOnExit } from '../support/cleanup.js';
import { SERVER_ARGS, serverOptions } from './support/server-args.js';

const USAGE = 'npm run bench -- start [--starts 10] [--intents 2000] [--parties 16] [--main <main.js>] [--json <file>]';
const args = new ScriptArgs(USAGE, {
  starts: { type: 'string', default: '10' },
  intents: { type: 'string', default: '2000' },
  parties: { type: 'string', default: '16' },
  json: { type: 'string' },
  main: SERVER_ARGS.main,
  'server-env': SERVER_ARGS['server-env'],
});
const a = args.values;
const starts = args.int('starts', 1);
const intents = args.int('intents', 1);
const parties = args.int('parties', 1);
const serverOpts = serverOptions(a, (why) => args.refuse(why));
// The options are good: now what the run needs (the node's packages among them).
const { Client, TOKENS, testCerts } = await import('../support/node.js');
const { runLoad } = await import('./support/load.js');
const { startBenchServer } = await import('./support/server.js');
const { cpuSeconds } = await import('./support/proc.js');
const { percentile } = await import('./support/percentile.js');
const { Mix, bootstrapWorkload } = await import('./support/workload.js');

testCerts(); // made once, before any start is timed

type Server = Awaited<ReturnType<typeof startBenchServer>>;
interface Start { ms: number; cpuMs: number }

/** The node's applied index, from the admin plane. */
async function appliedIndex(server: Server): Promise<number> {
  const admin = new Client(server.proc.adminUrl, server.ca);
  try {
    const r = await admin.request('GET', '/admin/v1/log/digest', { token: TOKENS.operator });
    if (r.status !== 200) throw new Error(`GET /admin/v1/log/digest answered ${r.status}: ${r.text}`);
    return Number(r.body.applied_index);
  } finally {
    admin.close();
  }
}

/** Starts a server on `dataDir` (a fresh one if undefined), timed up to its `node_started` line. */
async function timedStart(dataDir: string | undefined): Promise<{ server: Server; start: Start }> {
  const t0 = performance.now();
  const server = await startBenchServer({ ...serverOpts, ...(dataDir === undefined ? {} : { dataDir }) });
  const ms = performance.now() - t0;
  return { server, start: { ms, cpuMs: cpuSeconds(server.proc.pid) * 1000 } };
}

const fresh: Start[] = [];
for (let i = 0; i < starts; i++) {
  const { server, start } = await timedStart(undefined);
  fresh.push(start);
  await server.stop();
}

const dataDir = removeOnExit(mkdtempSync(join(tmpdir(), 'apl-bench-start-')));
const first = await timedStart(dataDir);
const runId = `t${Date.now().toString(36)}`;
const mix = new Mix(await bootstrapWorkload(first.server.admin, parties, runId), runId);
await runLoad({ urls: [first.server.proc.agentUrl], ca: first.server.ca, concurrency: 16, mix, intents });
const applied = await appliedIndex(first.server);
await first.server.stop({ keepData: true });
const restarts: Start[] = [];
for (let i = 0; i < starts; i++) {
  const { server, start } = await timedStart(dataDir);
  restarts.push(start);
  // Each restart is measured with everything it held: a start that lost entries would be quicker.
  const after = await appliedIndex(server);
  if (after < applied) throw new Error(`restart ${i + 1}: applied index ${after}, below the ${applied} the node had applied before it stopped`);
  await server.stop({ keepData: true });
}
rmSync(dataDir, { recursive: true, force: true });

const row = (what: string, s: Start[]) => {
  const ms = Float64Array.from(s, (x) => x.ms).sort();
  const cpu = Float64Array.from(s, (x) => x.cpuMs).sort();
  const f = (v: number) => `${Math.round(v).toLocaleString('en-US')} ms`;
  console.log(`| ${what} | ${s.length} | ${f(percentile(ms, 50))} | ${f(ms[ms.length - 1]!)} | ${f(percentile(cpu, 50))} |`);
  return { starts: s.length, p50Ms: percentile(ms, 50), maxMs: ms[ms.length - 1]!, cpuP50Ms: percentile(cpu, 50), each: s };
};
console.log(`starts of a standalone node${serverOpts.mainJs === undefined ? '' : ` (${serverOpts.mainJs})`}: from the spawn to its node_started line; each restart held the ${applied.toLocaleString('en-US')} entries applied before (checked)`);
console.log('| data directory | starts | p50 | max | CPU by then, p50 |');
console.log('|---|---:|---:|---:|---:|');
const figures = {
  fresh: row('fresh', fresh),
  restart: row(`holding ${intents.toLocaleString('en-US')} intents`, restarts),
};
if (a.json !== undefined) writeFileSync(a.json, `${JSON.stringify({ intents, applied, ...figures }, null, 2)}\n`);
