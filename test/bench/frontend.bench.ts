/**
 * What the agent plane's front end costs the node's JavaScript thread, set beside what
 * the whole node costs it: how much a front end on a thread of its own (TLS, HTTP,
 * Express, the body, its parse and its schema) could take off the thread that runs
 * Raft and `apply`, at most.
 *
 *   npm run bench -- frontend [options]    (USAGE below; --help lists the options)
 *
 * First the node, started as `npm start` starts it but with its front end on the
 * thread that runs Raft and `apply` (`agent_plane_thread: false`, unless --server-env
 * says otherwise), takes the realistic mix (support/workload.ts) at one level of
 * requests in flight, closed loop, from this process; its CPU per request is read
 * from /proc (all threads, and the JavaScript thread), and the first answer of each kind
 * of request is kept. Then a process of the front end alone (support/frontend-server.ts:
 * the node's own front end and listener, with a backend that answers those answers in
 * place of the node's state) takes the same mix at the same level, and is measured the
 * same way. The figures are printed and written to `<out>/frontend-<label>.{md,json}`.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { ScriptArgs } from '../support/args.js';
import { killOnExit, removeOnExit } from '../support/cleanup.js';
import { FRONTEND_KINDS, kindOfRequest, type FrontendKind } from './support/frontend-kinds.js';
import type { LoadStats } from './support/load.js';
import { cpuSeconds } from './support/proc.js';
import { REPORT_ARGS, Report } from './support/report.js';
import { SERVER_ARGS, serverOptions } from './support/server-args.js';
import type { BenchRequest, Fixtures, Mix as MixType } from './support/workload.js';

const USAGE = `npm run bench -- frontend [--concurrency 64] [--seconds 15] [--parties 64]
                         [--out bench-results] [--label name] [--json out.json]
                         [--main /other/checkout/packages/node/dist/main.js] [--wal-dir /other/device/dir] [--server-env APL_NAME=value ...]`;
const args = new ScriptArgs(USAGE, {
  concurrency: { type: 'string', default: '64' },
  seconds: { type: 'string', default: '15' },
  parties: { type: 'string', default: '64' },
  ...REPORT_ARGS,
  ...SERVER_ARGS,
});
const a = args.values;
const concurrency = args.int('concurrency', 1);
const seconds = args.int('seconds', 1);
const parties = args.int('parties', 1);
const serverOpts = serverOptions(a, (why) => args.refuse(why));
// The options are good: now what the run needs (the node's packages among them).
const { testCerts } = await import('../support/node.js');
const { runLoad } = await import('./support/load.js');
const { startBenchServer } = await import('./support/server.js');
const { Mix, bootstrapWorkload } = await import('./support/workload.js');

/** The mix, keeping the first answer 200 of each kind of request. */
class SamplingMix extends Mix {
  readonly answers = new Map<FrontendKind, string>();
  override observe(req: BenchRequest, status: number, body: string): void {
    super.observe(req, status, body);
    const kind = kindOfRequest(req);
    if (status === 200 && !this.answers.has(kind)) this.answers.set(kind, body);
  }
}

interface Row extends LoadStats {
  what: string;
  cpuMsPerRequest: number;
  mainCpuMsPerRequest: number;
}

/** Runs the mix against `url` and reads the CPU `pid` spent per request meanwhile. */
async function measure(what: string, url: string, pid: number, mix: MixType): Promise<Row> {
  const ca = testCerts().ca;
  await runLoad({ urls: [url], ca, concurrency: 16, durationMs: 3000, mix }); // warm-up: JIT, connections
  const [before, mainBefore] = [cpuSeconds(pid), cpuSeconds(pid, pid)];
  const s = await runLoad({ urls: [url], ca, concurrency, durationMs: seconds * 1000, mix });
  return { ...s, what, cpuMsPerRequest: ((cpuSeconds(pid) - before) * 1000) / s.requests, mainCpuMsPerRequest: ((cpuSeconds(pid, pid) - mainBefore) * 1000) / s.requests };
}

const runId = `f${Date.now().toString(36)}`;
const rows: Row[] = [];
let fixtures: Fixtures;
let answers: Map<FrontendKind, string>;
const node = await startBenchServer({ ...serverOpts, env: { APL_AGENT_PLANE_THREAD: 'false', ...serverOpts.env } });
try {
  fixtures = await bootstrapWorkload(node.admin, parties, runId);
  const mix = new SamplingMix(fixtures, runId);
  rows.push(await measure('the node, its front end on its JavaScript thread', node.proc.agentUrl, node.proc.pid, mix));
  answers = mix.answers;
} finally {
  await node.stop();
}
const missing = FRONTEND_KINDS.filter((k) => !answers.has(k));
if (missing.length > 0) throw new Error(`the node gave no answer 200 to a request of kind ${missing.join(', ')}: run longer (--seconds)`);

const dir = removeOnExit(mkdtempSync(join(tmpdir(), 'apl-frontend-')));
const frontend = await startFrontend(dir, answers);
try {
  rows.push(await measure('the front end alone', frontend.url, frontend.pid, new Mix(fixtures, runId)));
} finally {
  frontend.stop();
  rmSync(dir, { recursive: true, force: true });
}

const [whole, front] = rows as [Row, Row];
const lines = [
  `Node.js ${process.version}; ${fixtures.agents.length} agents; ${concurrency} in flight; ${cpus().length} CPUs (${cpus()[0]?.model ?? 'unknown'})`,
  '',
  '| | requests/s | p50 | p99 | max | CPU/request, all threads | CPU/request, JavaScript thread |',
  '|---|---:|---:|---:|---:|---:|---:|',
  ...rows.map((r) => `| ${r.what} | ${Math.round(r.requests / r.seconds).toLocaleString('en-US')} | ${r.p50.toFixed(1)} ms | ${r.p99.toFixed(1)} ms | ${r.max.toFixed(0)} ms | ${r.cpuMsPerRequest.toFixed(3)} ms | ${r.mainCpuMsPerRequest.toFixed(3)} ms |`),
  '',
  `The front end alone costs its JavaScript thread ${(100 * front.mainCpuMsPerRequest / whole.mainCpuMsPerRequest).toFixed(0)} % of what a request costs the node's: at most that could move to a thread of its own.`,
];
const report = new Report('frontend');
for (const line of lines) report.print(line);
report.write(a, { runtime: process.version, cpus: cpus().length, cpuModel: cpus()[0]?.model ?? null, concurrency, seconds, rows, share: front.mainCpuMsPerRequest / whole.mainCpuMsPerRequest });

/** Starts the front-end process with the node's answers; its request lines are read here, as the node's are. */
async function startFrontend(workDir: string, given: Map<FrontendKind, string>): Promise<{ url: string; pid: number; stop(): void }> {
  const file = join(workDir, 'answers.json');
  writeFileSync(file, JSON.stringify(Object.fromEntries(given)));
  const certs = testCerts();
  const child = spawn(process.execPath, ['--v8-pool-size=0', new URL('./support/frontend-server.js', import.meta.url).pathname, file, certs.cert, certs.key], { stdio: ['ignore', 'pipe', 'inherit'] });
  killOnExit(child);
  const stop = () => {
    if (child.exitCode === null) child.kill('SIGTERM');
  };
  const port = await new Promise<number>((resolvePort, reject) => {
    const timer = setTimeout(() => reject(new Error('the front end did not start in 15 s')), 15_000);
    child.once('exit', (code) => reject(new Error(`the front end exited before it started (${code})`)));
    createInterface({ input: child.stdout! }).on('line', (line) => {
      if (!line.includes('"frontend_started"')) return;
      clearTimeout(timer);
      resolvePort((JSON.parse(line) as { port: number }).port);
    });
  }).catch((err: unknown) => {
    stop();
    throw err;
  });
  return { url: `https://127.0.0.1:${port}`, pid: child.pid!, stop };
}
