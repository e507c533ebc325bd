/**
 * Intents over HTTPS against a three-node cluster of real processes on this machine,
 * measured as its users would: the load generator is this process, closed loop, with
 * the realistic mix of support/workload.ts, sending to every replica in turn (two
 * thirds of the writes are forwarded by a follower to the primary). Then the time to
 * recover: the primary is SIGKILLed while 16 requests are in flight at the survivors,
 * and the time from the kill to the first intent committed by the new primary is
 * measured, `--kills` times (the killed member is restarted and caught up between).
 * Beside each row, every replica's CPU time per request (all its threads, from /proc;
 * the primary's marked) and the load generator's own, and each replica's synced writes
 * of its Raft log per intent (one per Ready that persisted something: how well the
 * proposals were batched), and intents/s divided by the disk's synced-write rate,
 * measured first in a separate process in the primary's data directory (the three
 * members share that disk). The table goes to stdout and, with the figures as JSON, to
 * `<out>/cluster-<label>.{md,json}` (`--json` writes the JSON to a file of its own too).
 *
 *   npm run bench -- cluster [options]    (USAGE below; --help lists the options)
 *
 * --to primary sends every request to the primary (as a client that follows the
 * primary would), so that the followers' figures are what replicating costs them.
 * --main runs every member from another build's main.js (a checkout beside this one),
 * to set two builds side by side on the same machine.
 * --profile runs every member under `node --cpu-prof`, stops them gracefully after the
 * load, and prints where each one's JavaScript thread spent its time; no failover is
 * timed then (`--kills` is ignored).
 */
import { existsSync, mkdtempSync, readFileSync, readdirSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import type { Cluster } from '../support/cluster.js';
import type { LoadStats } from './support/load.js';
import { ScriptArgs } from '../support/args.js';
import { syncedWrites, type SyncedWrites } from './support/fsync.js';
import { REPORT_ARGS, Report } from './support/report.js';
import { NODE_THREADS, cpuPerRequestByThread, cpuSeconds, describeThreads, residentBytes, threadCpuByName } from './support/proc.js';
import { printSummary, summarize } from './support/profile.js';
import type { Fixtures } from './support/workload.js';

const USAGE = `npm run bench -- cluster [--concurrency 1,16,64,256] [--seconds 15] [--parties 64] [--kills 5]
                         [--to all|primary] [--profile] [--out bench-results] [--label name] [--json out.json]
                         [--main /other/checkout/packages/node/dist/main.js]`;
const args = new ScriptArgs(USAGE, {
  concurrency: { type: 'string', default: '1,16,64,256' },
  seconds: { type: 'string', default: '15' },
  parties: { type: 'string', default: '64' },
  kills: { type: 'string', default: '5' },
  ...REPORT_ARGS,
  to: { type: 'string', default: 'all' },
  profile: { type: 'boolean', default: false },
  main: { type: 'string' },
});
const a = args.values;
const concurrencies = args.ints('concurrency');
const seconds = args.int('seconds', 1);
const parties = args.int('parties', 1);
const kills = args.int('kills');
if (a.to !== 'all' && a.to !== 'primary') args.refuse(`--to ${a.to}: expected all or primary`);
if (a.main !== undefined && !existsSync(a.main)) args.refuse(`--main ${a.main}: no such file`);
// The options are good: now what the run needs (the node's packages among them).
const { Pool } = await import('undici');
const { startCluster } = await import('../support/cluster.js');
const { TOKENS, testCerts } = await import('../support/node.js');
const { runLoad } = await import('./support/load.js');
const { SERVER_DEFAULTS, parseGauges } = await import('./support/server.js');
const { Mix, bootstrapWorkload } = await import('./support/workload.js');

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** The longest a failover, or a restarted member's catching up, may take before the run fails. */
const RECOVERY_MS_MAX = 30_000;
const profileDir = a.profile ? mkdtempSync(join(tmpdir(), 'apl-prof-')) : undefined;
const profileEnv = profileDir === undefined ? {} : { NODE_OPTIONS: `--cpu-prof --cpu-prof-dir=${profileDir}` };
const c = await startCluster({ env: { ...SERVER_DEFAULTS, APL_LOG_LEVEL: 'info', APL_TICK_INTERVAL_MS: '1000', ...profileEnv }, ...(a.main === undefined ? {} : { mainJs: a.main }) });
/** cpuMsPerRequest: each replica's CPU time (all its threads) per request answered, in the order of the members. */
/** cpuByThread: each replica's CPU and sleeps per request by thread, in the order of the members. */
const rows: (LoadStats & { concurrency: number; rssBytes: number[]; cpuMsPerRequest: number[]; cpuByThread: ReturnType<typeof cpuPerRequestByThread>[]; loadCpuMsPerRequest: number; syncsPerIntent: number[]; fsyncShare: number })[] = [];
const failovers: number[] = [];
let disk: SyncedWrites | null = null;
const report = new Report('cluster');
const print = report.print;
try {
  const leader = await c.leader(15_000);
  const admin = c.handle(leader);
  const runId = `k${Date.now().toString(36)}`;
  const fixtures = await bootstrapWorkload((who, path, body) => admin.admin.request('POST', path, { body, token: TOKENS[who] }), parties, runId);
  const mix = new Mix(fixtures, runId);
  const urls = c.members.filter((m) => a.to === 'all' || m.id === leader).map((m) => m.agent_url);
  const ca = testCerts().ca;
  const load = (concurrency: number, durationMs: number) => runLoad({ urls, ca, concurrency, durationMs, mix });
  await load(16, 3000);
  disk = syncedWrites(c.dirs[leader]!);
  print(`three-node cluster on Node.js ${process.version}; primary ${leader}; ${fixtures.agents.length} agents; ${a.to === 'all' ? 'requests to every replica in turn' : 'every request to the primary'}; ${cpus().length} CPUs (${cpus()[0]?.model ?? 'unknown'})`);
  print(`disk: ${Math.round(disk.perSecond).toLocaleString('en-US')} synced writes/s (4 KiB append + fsync, in the primary's data directory), each p50 ${disk.p50Ms.toFixed(2)} ms, p99 ${disk.p99Ms.toFixed(1)} ms, max ${disk.maxMs.toFixed(0)} ms`);
  print('');
  print('| in flight | intents/s | p50 | p99 | max | read p99 | answers | RSS n1 / n2 / n3 | CPU/request n1 / n2 / n3 (* primary) | load generator CPU/request | synced writes/intent n1 / n2 / n3 | intents/s ÷ the disk\'s synced writes/s |');
  print('|---:|---:|---:|---:|---:|---:|---|---|---|---:|---|---:|');
  // The Raft log's synced writes of each member (one per Ready that persisted something): how well proposals are batched.
  const syncs = () => Promise.all(c.members.map(async (m) => {
    const r = await c.handle(m.id).admin.request('GET', '/metrics', { token: TOKENS.operator });
    return parseGauges(r.text).fsyncs.all;
  }));
  const pids = () => c.members.map((m) => c.process(m.id)!.pid);
  for (const n of concurrencies) {
    const syncsBefore = await syncs();
    const [cpuBefore, threadsBefore, loadBefore] = [pids().map((pid) => cpuSeconds(pid)), pids().map((pid) => threadCpuByName(pid)), process.cpuUsage()];
    const s = await load(n, seconds * 1000);
    const cpuMsPerRequest = pids().map((pid, k) => ((cpuSeconds(pid) - cpuBefore[k]!) * 1000) / s.requests);
    const cpuByThread = pids().map((pid, k) => cpuPerRequestByThread(threadsBefore[k]!, threadCpuByName(pid), s.requests));
    const syncsPerIntent = (await syncs()).map((x, k) => (x - syncsBefore[k]!) / s.intents);
    const loadUsage = process.cpuUsage(loadBefore);
    const loadCpuMsPerRequest = (loadUsage.user + loadUsage.system) / 1000 / s.requests;
    const rssBytes = pids().map((pid) => residentBytes(pid));
    const fsyncShare = s.intentsPerSecond / disk.perSecond;
    rows.push({ ...s, concurrency: n, rssBytes, cpuMsPerRequest, cpuByThread, loadCpuMsPerRequest, syncsPerIntent, fsyncShare });
    const answers = Object.entries(s.statuses).map(([k, v]) => `${k}: ${v}`).join(', ');
    const cpu = cpuMsPerRequest.map((ms, k) => `${ms.toFixed(2)}${c.members[k]!.id === leader ? '*' : ''}`).join(' / ');
    print(`| ${n} | ${Math.round(s.intentsPerSecond).toLocaleString('en-US')} | ${s.p50.toFixed(1)} ms | ${s.p99.toFixed(1)} ms | ${s.max.toFixed(0)} ms | ${s.readP99.toFixed(1)} ms | ${answers} | ${rssBytes.map((b) => (b / 2 ** 20).toFixed(0)).join(' / ')} MiB | ${cpu} ms | ${loadCpuMsPerRequest.toFixed(2)} ms | ${syncsPerIntent.map((x) => x.toFixed(2)).join(' / ')} | ${fsyncShare.toFixed(2)} |`);
  }
  print('');
  print(`CPU per request by thread, and how many times each went to sleep (and had to be woken: \`npm run bench -- wake\`); ${NODE_THREADS}:`);
  for (const r of rows) {
    for (const [k, m] of c.members.entries()) print(`  ${r.concurrency} in flight, ${m.id}${m.id === leader ? ' (primary)' : ''}: ${describeThreads(r.cpuByThread[k]!)}`);
  }
  if (profileDir !== undefined) {
    // A profile is written when its process exits on its own: stop each member gracefully.
    // Profiles are named CPU.<date>.<time>.<pid>.<thread>.<seq>.cpuprofile; thread 0 is
    // the JavaScript thread (1 is the state store's LevelDB thread).
    const members = c.members.map((m) => ({ id: m.id, pid: c.process(m.id)!.pid }));
    await Promise.all(c.members.map((m) => c.process(m.id)!.stop()));
    const files = readdirSync(profileDir);
    for (const m of members) {
      const file = files.find((f) => f.split('.')[3] === String(m.pid) && f.split('.')[4] === '0');
      print('');
      print(`${m.id}${m.id === leader ? ' (primary)' : ''}:`);
      if (file === undefined) print('  no profile was written');
      else printSummary(summarize(join(profileDir, file)), print);
    }
    print('');
    print(`profiles: ${profileDir}`);
  } else {
    for (let k = 0; k < kills; k++) failovers.push(await failover(c, fixtures, runId, k));
  }
  const sorted = [...failovers].sort((x, y) => x - y);
  if (sorted.length > 0) {
    print('');
    print(`failover (SIGKILL of the primary to the first intent committed by the next): ${failovers.map((f) => `${f} ms`).join(', ')}; median ${sorted[Math.floor(sorted.length / 2)]} ms, max ${sorted[sorted.length - 1]} ms`);
  }
} finally {
  await c.close();
}
report.write(a, { runtime: process.version, cpus: cpus().length, cpuModel: cpus()[0]?.model ?? null, to: a.to, fsyncPerSecond: disk?.perSecond ?? NaN, disk, seconds, rows, failoverMs: failovers });

/**
 * Kills the primary while 16 workers send intents to the two survivors, and answers
 * the milliseconds from the kill to the first intent answered 200 after it, then
 * restarts the member and waits until it has caught up.
 */
async function failover(cl: Cluster, fixtures: Fixtures, runId: string, round: number): Promise<number> {
  const primary = await cl.leader(15_000);
  const survivors = cl.members.filter((m) => m.id !== primary);
  const ca = readFileSync(testCerts().ca);
  const pools = survivors.map((m) => new Pool(m.agent_url, { connections: 8, connect: { ca } }));
  const mix = new Mix(fixtures, `${runId}f${round}`, round + 7, 0);
  let killedAt = Infinity;
  let recovered = -1;
  let stop = false;
  const worker = async (k: number) => {
    while (!stop) {
      const req = mix.next();
      const sentAt = performance.now();
      const res = await pools[k % pools.length]!.request({ method: req.method, path: req.path, headers: req.headers, ...(req.body === undefined ? {} : { body: req.body }) }).catch(() => null);
      const text = res ? await res.body.text() : '';
      if (res?.statusCode === 200) {
        mix.observe(req, 200, text);
        // Only an intent sent after the kill proves the next primary commits.
        if (sentAt > killedAt && recovered < 0) recovered = performance.now() - killedAt;
      } else {
        await sleep(20);
      }
    }
  };
  const workers = Array.from({ length: 16 }, (_, k) => worker(k));
  await sleep(1000);
  killedAt = performance.now();
  await cl.kill(primary);
  const deadline = performance.now() + RECOVERY_MS_MAX;
  while (recovered < 0 && performance.now() < deadline) await sleep(10);
  stop = true;
  await Promise.all(workers);
  await Promise.all(pools.map((p) => p.close()));
  if (recovered < 0) throw new Error(`failover ${round + 1}: no intent was committed in the ${RECOVERY_MS_MAX / 1000} s after ${primary}, the primary, was killed`);
  await cl.start(primary);
  await caughtUp(cl, primary);
  return Math.round(recovered);
}

/**
 * Waits until `id`, restarted, has applied what the primary had applied when it came
 * back, so that the next round starts from three members in step; throws after
 * RECOVERY_MS_MAX.
 */
async function caughtUp(cl: Cluster, id: string): Promise<void> {
  const applied = async (member: string) => {
    const r = await cl.handle(member).admin.request('GET', '/admin/v1/log/digest', { token: TOKENS.operator });
    if (r.status !== 200) throw new Error(`${member}: GET /admin/v1/log/digest answered ${r.status}: ${r.text}`);
    return Number(r.body.applied_index);
  };
  const target = await applied(await cl.leader(RECOVERY_MS_MAX));
  const deadline = performance.now() + RECOVERY_MS_MAX;
  for (;;) {
    const at = await applied(id).catch(() => -1);
    if (at >= target) return;
    if (performance.now() > deadline) throw new Error(`${id}, restarted, applied index ${at} after ${RECOVERY_MS_MAX / 1000} s, short of the primary's ${target}`);
    await sleep(50);
  }
}
