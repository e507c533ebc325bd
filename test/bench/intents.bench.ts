/**
 * Intents over HTTPS against a standalone node, measured as its users would: the
 * server is its own process (started as `npm start` starts it), the load generator
 * is this one, closed loop, with the realistic mix of support/workload.ts (postings,
 * refusals, usage moves and reads). One run measures every concurrency of the matrix
 * against the same node, one after another.
 *
 *   npm run bench -- intents [options]    (USAGE below; --help lists the options)
 *
 * For each concurrency it prints intents per second, the latency p50, p99 and max of
 * intents (with when the slowest was sent: at 0.0 s it was a first request, which waits
 * for its connection's TLS handshake, each level opening its connections afresh), the
 * reads' p99, the answers by status, the server's RSS after it, the server's CPU time
 * per request (all its threads, and its JavaScript thread alone,
 * from /proc), the load generator's own CPU time per request (it shares the machine),
 * and the throughput as a fraction of the disk's synced-write rate, measured first in
 * a separate process in the node's data directory, with the latency of one such write.
 * Under the table, the server's CPU time and sleeps per request thread by thread (its
 * JavaScript thread, the agent plane's, the state store's, libuv's pool, V8's helpers)
 * beside the load generator's CPU: which of the two CPUs' consumers grew. The table goes to stdout and, with
 * the figures as JSON, to `<out>/intents-<label>.{md,json}`.
 *
 * Then, unless --no-half-peak, the same node at half the peak throughput of the matrix,
 * open loop (requests sent on a fixed schedule, latency counted from when each was due),
 * for the target "p99 at most 25 ms at half of peak": a closed loop at a lower
 * concurrency is not the same, since it slows its sending when the server slows.
 * --half-peak-rps N sends N requests/s there instead, to compare builds at one load.
 * It also says where the slow answers' time went: how late the generator itself sent,
 * and the kernel's account (support/sched.ts) of the server's JavaScript thread over the
 * whole load and over the spans of the intents slower than the target.
 *
 * --main, --wal-dir and --server-env choose the server as in the growth benchmark: another
 * build, the Raft log on another filesystem, the server's configuration.
 *
 * With --profile the server runs under
 * --cpu-prof and the top costs are printed, with the share of the JSON parser. With
 * --alloc-profile it runs with V8's sampling heap profiler over the matrix's levels
 * (support/alloc-sampler.ts), and where it allocated is printed: what the collector has
 * to clear, which a CPU profile shows only as the collector's own time.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { syncedWrites, type SyncedWrites } from './support/fsync.js';
import { REPORT_ARGS, Report } from './support/report.js';
import type { LoadStats, OpenLoopStats } from './support/load.js';
import type { SchedSpan } from './support/sched.js';
import { printAllocations, printSummary, summarizeAllocations, summarize } from './support/profile.js';
import { ScriptArgs } from '../support/args.js';
import { removeOnExit } from '../support/cleanup.js';
import { SERVER_ARGS, serverOptions } from './support/server-args.js';
import { NODE_THREADS, cpuPerRequestByThread, describeThreads } from './support/proc.js';
import type { Gauges } from './support/server.js';

const USAGE = `npm run bench -- intents [--concurrency 1,16,64,256] [--seconds 15] [--parties 64]
                         [--runtime /path/to/node] [--profile] [--alloc-profile] [--out bench-results] [--label name] [--json out.json]
                         [--no-half-peak | --half-peak-rps N]
                         [--main /other/checkout/packages/node/dist/main.js] [--wal-dir /other/device/dir]
                         [--server-env APL_NAME=value ...]`;
const args = new ScriptArgs(USAGE, {
  concurrency: { type: 'string', default: '1,16,64,256' },
  seconds: { type: 'string', default: '15' },
  parties: { type: 'string', default: '64' },
  runtime: { type: 'string' },
  profile: { type: 'boolean', default: false },
  'alloc-profile': { type: 'boolean', default: false },
  ...REPORT_ARGS,
  'no-half-peak': { type: 'boolean', default: false },
  'half-peak-rps': { type: 'string' },
  ...SERVER_ARGS,
});
const a = args.values;
const concurrencies = args.ints('concurrency');
const seconds = args.int('seconds', 1);
const parties = args.int('parties', 1);
const fixedRate = args.positive('half-peak-rps') ?? null;
const serverOpts = serverOptions(a, (why) => args.refuse(why));

/** The p99 target at half of peak (docs/BENCHMARKS.md, "The targets"). */
const HALF_PEAK_P99_MS = 25;

type ByThread = ReturnType<typeof cpuPerRequestByThread>;
type Row = LoadStats & { concurrency: number; rssBytes: number; cpuMsPerRequest: number; mainCpuMsPerRequest: number; loadCpuMsPerRequest: number; fsyncShare: number; cpuByThread: ByThread };

/** `main 0.130 ms, slept 1.9×; …; the load generator 0.066 ms`: CPU and sleeps per request by thread. */
function describeWithLoad(byThread: ByThread, loadMs: number): string {
  return `${describeThreads(byThread)}; the load generator ${loadMs.toFixed(3)} ms`;
}

const runtime = a.runtime ?? process.execPath;
let version = '';
try {
  version = execFileSync(runtime, ['--version'], { encoding: 'utf8' }).trim();
} catch (err) {
  args.refuse(`--runtime ${runtime}: it does not run as a Node.js (${(err as Error).message.split('\n')[0]})`);
}
// The options are good: now what the run needs (the node's packages among them).
const { countsSince, fsyncsSince, newestProfile, startBenchServer, storeBackgroundWrites } = await import('./support/server.js');
const { runLoad, runOpenLoop } = await import('./support/load.js');
const { SchedSampler, describeSpan } = await import('./support/sched.js');
const { Mix, bootstrapWorkload } = await import('./support/workload.js');
const profileDir = a.profile ? mkdtempSync(join(tmpdir(), 'apl-prof-')) : undefined;
const allocDir = a['alloc-profile'] ? removeOnExit(mkdtempSync(join(tmpdir(), 'apl-alloc-'))) : undefined;
const server = await startBenchServer({
  ...serverOpts,
  execPath: runtime,
  ...(profileDir === undefined ? {} : { cpuProfDir: profileDir }),
  ...(allocDir === undefined ? {} : { allocProfDir: allocDir }),
});
let allocations: { file: string; requests: number } | null = null;
const rows: Row[] = [];
const report = new Report('intents');
const print = report.print;
let disk: SyncedWrites | null = null;
let halfPeak: (Omit<OpenLoopStats, 'slow'> & { cpuByThread: ByThread; loadCpuMsPerRequest: number; slow: number; whole: SchedSpan | null; slowSpans: SchedSpan | null; requestsPerSecond: number; peakIntentsPerSecond: number; fsyncs: Gauges['fsyncs']; loopDelay: { p99Ms: number; maxMs: number }; storeWriteWaits: number; over25ms: Record<string, { all: number; over: number }>; gc: Record<string, { all: number; over: number }> }) | null = null;
try {
  const runId = `b${Date.now().toString(36)}`;
  const fixtures = await bootstrapWorkload(server.admin, parties, runId);
  const mix = new Mix(fixtures, runId);
  const load = (concurrency: number, durationMs: number) => runLoad({ urls: [server.proc.agentUrl], ca: server.ca, concurrency, durationMs, mix });
  await load(16, 3000); // warm-up: JIT, caches, connections
  disk = syncedWrites(server.dataDir);
  const fsyncPerSecond = disk.perSecond;
  print(`server on Node.js ${version}; load generator on ${process.version}; ${fixtures.agents.length} agents; ${cpus().length} CPUs (${cpus()[0]?.model ?? 'unknown'})`);
  print(`disk: ${Math.round(fsyncPerSecond).toLocaleString('en-US')} synced writes/s (4 KiB append + fsync, in the data directory), each p50 ${disk.p50Ms.toFixed(2)} ms, p99 ${disk.p99Ms.toFixed(1)} ms, max ${disk.maxMs.toFixed(0)} ms`);
  print('');
  print('| in flight | intents/s | p50 | p99 | max (sent at) | read p99 | answers | server RSS | server CPU/request (main thread) | load generator CPU/request | intents/s ÷ the disk\'s synced writes/s |');
  print('|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|');
  if (allocDir !== undefined) await server.toggleAllocSampling();
  for (const c of concurrencies) {
    const [cpuBefore, mainBefore, threadsBefore, loadBefore] = [server.cpuSeconds(), server.mainThreadCpuSeconds(), server.threadCpuByName(), process.cpuUsage()];
    const s = await load(c, seconds * 1000);
    const cpuMsPerRequest = ((server.cpuSeconds() - cpuBefore) * 1000) / s.requests;
    const mainCpuMsPerRequest = ((server.mainThreadCpuSeconds() - mainBefore) * 1000) / s.requests;
    const cpuByThread = cpuPerRequestByThread(threadsBefore, server.threadCpuByName(), s.requests);
    const loadUsage = process.cpuUsage(loadBefore);
    const loadCpuMsPerRequest = (loadUsage.user + loadUsage.system) / 1000 / s.requests;
    const rssBytes = server.rss();
    const row = { ...s, concurrency: c, rssBytes, cpuMsPerRequest, mainCpuMsPerRequest, loadCpuMsPerRequest, fsyncShare: s.intentsPerSecond / fsyncPerSecond, cpuByThread };
    rows.push(row);
    const answers = Object.entries(s.statuses).map(([k, v]) => `${k}: ${v}`).join(', ');
    print(`| ${c} | ${Math.round(s.intentsPerSecond).toLocaleString('en-US')} | ${s.p50.toFixed(1)} ms | ${s.p99.toFixed(1)} ms | ${s.max.toFixed(0)} ms (${s.maxAtSeconds.toFixed(1)} s) | ${s.readP99.toFixed(1)} ms | ${answers} | ${(rssBytes / 2 ** 20).toFixed(0)} MiB | ${cpuMsPerRequest.toFixed(2)} ms (${mainCpuMsPerRequest.toFixed(2)} ms) | ${loadCpuMsPerRequest.toFixed(2)} ms | ${row.fsyncShare.toFixed(2)} |`);
  }
  print('');
  print(`CPU per request by thread, and how many times each went to sleep (and had to be woken: \`npm run bench -- wake\`); ${NODE_THREADS}:`);
  for (const r of rows) print(`  ${r.concurrency} in flight: ${describeWithLoad(r.cpuByThread, r.loadCpuMsPerRequest)}`);
  if (allocDir !== undefined) allocations = { file: (await server.toggleAllocSampling())!, requests: rows.reduce((n, r) => n + r.requests, 0) };
  const peak = rows.reduce<Row | null>((best, r) => (best === null || r.intentsPerSecond > best.intentsPerSecond ? r : best), null);
  if (!a['no-half-peak'] && peak !== null) {
    // A rate given holds the open loop's load still between runs whose peaks differ (an A/B of two builds).
    const requestsPerSecond = fixedRate ?? peak.requests / peak.seconds / 2;
    const { fsyncs: before, over25ms: slowBefore, gc: gcBefore } = await server.gauges(); // also starts the event loop's delay afresh
    const waitsBefore = storeBackgroundWrites(server.dataDir).writeWaits;
    const sched = new SchedSampler(server.proc.pid);
    const [threadsBefore, loadBefore] = [server.threadCpuByName(), process.cpuUsage()];
    const loadStart = performance.now();
    const s = await runOpenLoop({ urls: [server.proc.agentUrl], ca: server.ca, mix, requestsPerSecond, durationMs: seconds * 1000, connections: 64, slowMs: HALF_PEAK_P99_MS });
    const whole = sched.span(loadStart, performance.now() - 50);
    const cpuByThread = cpuPerRequestByThread(threadsBefore, server.threadCpuByName(), s.requests);
    const loadUsage = process.cpuUsage(loadBefore);
    const loadCpuMsPerRequest = (loadUsage.user + loadUsage.system) / 1000 / s.requests;
    const slowSpans = sched.spans(s.slow.map((x) => ({ from: x.at, to: x.at + x.ms })));
    sched.stop();
    const { fsyncs: after, loopDelay, over25ms: slowAfter, gc: gcAfter } = await server.gauges();
    const gc = countsSince(gcBefore, gcAfter);
    const slow = countsSince(slowBefore, slowAfter);
    const fsyncs = fsyncsSince(before, after);
    const storeWriteWaits = storeBackgroundWrites(server.dataDir).writeWaits - waitsBefore;
    halfPeak = { ...s, slow: s.slow.length, whole, slowSpans, requestsPerSecond, peakIntentsPerSecond: peak.intentsPerSecond, fsyncs, loopDelay, storeWriteWaits, over25ms: slow, gc, cpuByThread, loadCpuMsPerRequest };
    const answers = Object.entries(s.statuses).map(([k, v]) => `${k}: ${v}`).join(', ');
    print('');
    const heading = fixedRate === null ? 'half of peak' : 'the rate given (--half-peak-rps), against a peak';
    print(`${heading} (${Math.round(peak.intentsPerSecond).toLocaleString('en-US')} intents/s at ${peak.concurrency} in flight), open loop at ${Math.round(requestsPerSecond).toLocaleString('en-US')} requests/s: `
      + `${Math.round(s.intentsPerSecond).toLocaleString('en-US')} intents/s, p50 ${s.p50.toFixed(1)} ms, p99 ${s.p99.toFixed(1)} ms, max ${s.max.toFixed(0)} ms, read p99 ${s.readP99.toFixed(1)} ms (${answers}); `
      + `p99 target ${HALF_PEAK_P99_MS} ms: ${s.p99 <= HALF_PEAK_P99_MS ? 'met' : 'MISSED'}`);
    print(`  meanwhile in the node: ${fsyncs.all.toLocaleString('en-US')} synced writes of the Raft log, ${fsyncs.over25ms} over 25 ms and ${fsyncs.over100ms} over 100 ms; `
      + `event-loop delay p99 ${loopDelay.p99Ms.toFixed(1)} ms, max ${loopDelay.maxMs.toFixed(0)} ms; ${storeWriteWaits} state-store writes waited for LevelDB's background work`);
    print(`  over 25 ms, as the node timed them: ${Object.entries(slow).map(([k, v]) => `${k} ${v.over} of ${v.all.toLocaleString('en-US')}`).join(', ')}`);
    print(`  garbage collections over 10 ms: ${Object.entries(gc).map(([k, v]) => `${k} ${v.over} of ${v.all.toLocaleString('en-US')}`).join(', ')}`);
    print(`  CPU per request by thread: ${describeWithLoad(cpuByThread, loadCpuMsPerRequest)}`);
    print(`  the load generator sent late (its own delay, counted in the latency): p99 ${s.sendLateP99.toFixed(1)} ms, max ${s.sendLateMax.toFixed(0)} ms`);
    print(`  the kernel, over the whole load: ${describeSpan(whole)}`);
    print(`  the kernel, over the ${s.slow.length.toLocaleString('en-US')} intents slower than ${HALF_PEAK_P99_MS} ms (their spans merged): ${describeSpan(slowSpans)}`);
  }
} finally {
  await server.stop();
}
if (allocations !== null) {
  print('');
  print(`allocation over the matrix (${allocations.requests.toLocaleString('en-US')} requests), V8's sampling heap profiler:`);
  printAllocations(summarizeAllocations(allocations.file), allocations.requests, print);
  rmSync(allocDir!, { recursive: true, force: true });
}
if (profileDir !== undefined) {
  printSummary(summarize(newestProfile(profileDir), {
    'JSON parser (parseJson)': (fn, url) => fn === 'parseJson' && url.includes('/core/'),
  }), print);
  print(`the profile, for a viewer (Chrome's DevTools, speedscope): ${newestProfile(profileDir)}`);
}
report.write(a, { runtime: version, cpus: cpus().length, cpuModel: cpus()[0]?.model ?? null, fsyncPerSecond: disk?.perSecond ?? NaN, disk, seconds, rows, halfPeak });
