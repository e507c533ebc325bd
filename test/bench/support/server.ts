/**
 * The server under load: the real process (`packages/node/dist/main.js`), started as
 * `npm start` starts it but on free ports and its own data directory, optionally on
 * another Node.js binary or with a CPU profile. Its memory is read from outside
 * (/proc) and from its own metrics, never from inside the load generator.
 */
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { Client, TOKENS, testCerts } from '../../support/node.js';
import { removeOnExit } from '../../support/cleanup.js';
import { nodeEnv, spawnNode, type NodeProcess } from '../../support/process.js';
import { cpuSeconds, residentBytes, threadCpuByName, threadCpuSeconds, type ThreadCpu, type ThreadUse } from './proc.js';
import type { ServerOptions } from './server-args.js';
import type { AdminCall } from './workload.js';

export interface BenchServer {
  proc: NodeProcess;
  dataDir: string;
  ca: string;
  admin: AdminCall;
  /** resident set size of the server process, in bytes. */
  rss(): number;
  /** CPU time the server process has used (all its threads, user and system), in seconds. */
  cpuSeconds(): number;
  /** CPU time of the server's JavaScript thread alone, in seconds: the part no other core can take. */
  mainThreadCpuSeconds(): number;
  /** CPU time by thread kind (see `threadCpuSeconds`), in seconds. */
  threadCpuSeconds(): ThreadCpu;
  /** CPU time (seconds) and sleeps by thread name (see `threadCpuByName`). */
  threadCpuByName(): Record<string, ThreadUse>;
  /**
   * from the server's own metrics: V8 heap used, in bytes, and how many synced writes
   * of the Raft log it has made, in all and above 25, 100 and 250 ms; the event loop's delay.
   */
  gauges(): Promise<Gauges>;
  /**
   * starts the allocation sampler (a server started with allocProfDir), or stops it and
   * resolves with the profile it wrote.
   */
  toggleAllocSampling(): Promise<string | null>;
  /** stops the server gracefully (a CPU profile is written then) and removes its data unless kept. */
  stop(opts?: { keepData?: boolean }): Promise<void>;
}

export interface Gauges {
  heapBytes: number;
  fsyncs: { all: number; over25ms: number; over100ms: number; over250ms: number };
  /** the event loop's delay since the metrics were last read (prom-client resets it on each read), in ms. */
  loopDelay: { p99Ms: number; maxMs: number };
  /**
   * from the node's histograms, how many took over 25 ms, of: intents as the server
   * timed them, Raft Readies, and the apply stages of a batch (prefetch, apply, store_write).
   */
  over25ms: Record<'intent' | 'ready' | 'prefetch' | 'apply' | 'store_write', { all: number; over: number }>;
  /** garbage collections by the kinds the node reports (minor, major, incremental, weakcb): how many, and how many took over 10 ms. */
  gc: Record<string, { all: number; over: number }>;
  /** the same collections: how many took over 100 ms. */
  gcOver100ms: Record<string, { all: number; over: number }>;
}

/** The gauges from a Prometheus text exposition; NaN where a metric is absent. */
export function parseGauges(text: string): Gauges {
  const lines = text.split('\n');
  // A sample of a metric with these labels, in whatever order the exposition writes them.
  const sample = (metric: string, labels: string[] = []) => {
    for (const line of lines) {
      const name = line.slice(0, line.search(/[{ ]/));
      if (name === metric && labels.every((l) => line.includes(l))) return Number(line.slice(line.lastIndexOf(' ') + 1));
    }
    return NaN;
  };
  // How many observations of a histogram, and how many above the bucket `le` (in seconds).
  const over = (histogram: string, labels: string[], le: string) => {
    const all = sample(`${histogram}_count`, labels);
    return { all, over: all - sample(`${histogram}_bucket`, [...labels, `le="${le}"`]) };
  };
  const fsync = (le: string) => over('apl_log_fsync_duration_seconds', [], le).over;
  const stage = (name: string) => over('apl_apply_stage_duration_seconds', [`stage="${name}"`], '0.025');
  const gcOver = (le: string) => ['minor', 'major', 'incremental', 'weakcb']
    .map((kind) => [kind, over('nodejs_gc_duration_seconds', [`kind="${kind}"`], le)] as const)
    .filter(([, n]) => !Number.isNaN(n.all));
  return {
    heapBytes: sample('nodejs_heap_size_used_bytes'),
    fsyncs: { all: sample('apl_log_fsync_duration_seconds_count'), over25ms: fsync('0.025'), over100ms: fsync('0.1'), over250ms: fsync('0.25') },
    loopDelay: { p99Ms: sample('nodejs_eventloop_lag_p99_seconds') * 1000, maxMs: sample('nodejs_eventloop_lag_max_seconds') * 1000 },
    over25ms: {
      intent: over('apl_http_request_duration_seconds', ['plane="agent"', 'route="/api/v1/intents"'], '0.025'),
      ready: over('apl_raft_ready_duration_seconds', [], '0.025'),
      prefetch: stage('prefetch'), apply: stage('apply'), store_write: stage('store_write'),
    },
    gc: Object.fromEntries(gcOver('0.01')),
    gcOver100ms: Object.fromEntries(gcOver('0.1')),
  };
}

/** What the Raft log's synced-write counts grew by between two readings. */
export function fsyncsSince(before: Gauges['fsyncs'], after: Gauges['fsyncs']): Gauges['fsyncs'] {
  return { all: after.all - before.all, over25ms: after.over25ms - before.over25ms, over100ms: after.over100ms - before.over100ms, over250ms: after.over250ms - before.over250ms };
}

/** What each histogram count grew by between two readings (see Gauges.over25ms and Gauges.gc). */
export function countsSince(before: Record<string, { all: number; over: number }>, after: Record<string, { all: number; over: number }>): Record<string, { all: number; over: number }> {
  return Object.fromEntries(Object.entries(after).map(([k, v]) => [k, { all: v.all - (before[k]?.all ?? 0), over: v.over - (before[k]?.over ?? 0) }]));
}

/**
 * What a benchmark's server takes from the node's own defaults, as `npm start` runs it,
 * where the tests' environment (nodeEnv) sets another value: the Raft log's segment
 * size (the tests use 1 MiB segments; a node's are 64 MiB).
 */
export const SERVER_DEFAULTS: Record<string, undefined> = { APL_RAFT_WAL_SEGMENT_BYTES: undefined };

export async function startBenchServer(o: ServerOptions = {}): Promise<BenchServer> {
  const dataDir = o.dataDir ?? removeOnExit(mkdtempSync(join(tmpdir(), 'apl-bench-')));
  // The log goes to a directory of its own made inside the one named (a mount point, say),
  // so that removing it afterwards removes nothing that was there before.
  let walDir: string | undefined;
  if (o.walDir !== undefined && o.dataDir === undefined) {
    mkdirSync(resolve(o.walDir), { recursive: true });
    walDir = removeOnExit(mkdtempSync(join(resolve(o.walDir), 'apl-bench-wal-')));
    symlinkSync(walDir, join(dataDir, 'wal'));
  }
  const nodeArgs = [
    ...(o.cpuProfDir === undefined ? [] : ['--cpu-prof', `--cpu-prof-dir=${o.cpuProfDir}`]),
    ...(o.allocProfDir === undefined ? [] : [`--import=${new URL('./alloc-sampler.js', import.meta.url).href}`]),
  ];
  const env = { ...SERVER_DEFAULTS, ...o.env, ...(o.allocProfDir === undefined ? {} : { BENCH_ALLOC_DIR: o.allocProfDir }) };
  const proc = await spawnNode(nodeEnv(dataDir, env), {
    ...(o.execPath === undefined ? {} : { execPath: o.execPath }),
    ...(o.mainJs === undefined ? {} : { mainJs: o.mainJs }),
    nodeArgs,
    startTimeoutMs: o.startTimeoutMs ?? 60_000,
  }).catch((err: unknown) => {
    // A server that did not start leaves no data directory behind.
    if (o.dataDir === undefined) {
      rmSync(dataDir, { recursive: true, force: true });
      if (walDir !== undefined) rmSync(walDir, { recursive: true, force: true });
    }
    throw err;
  });
  const ca = testCerts().ca;
  const client = new Client(proc.adminUrl, ca);
  let allocSampling = false;
  const admin: AdminCall = async (who, path, body) => {
    const r = await client.request('POST', path, { body, token: TOKENS[who] });
    return { status: r.status, text: r.text };
  };
  return {
    proc, dataDir, ca, admin,
    rss: () => residentBytes(proc.pid),
    cpuSeconds: () => cpuSeconds(proc.pid),
    mainThreadCpuSeconds: () => cpuSeconds(proc.pid, proc.pid),
    threadCpuSeconds: () => threadCpuSeconds(proc.pid),
    threadCpuByName: () => threadCpuByName(proc.pid),
    gauges: async () => {
      const r = await client.request('GET', '/metrics', { token: TOKENS.operator });
      return parseGauges(r.text);
    },
    toggleAllocSampling: async () => {
      if (o.allocProfDir === undefined) throw new Error('the server was started without allocProfDir');
      const file = join(o.allocProfDir, `alloc-${proc.pid}.heapprofile`);
      allocSampling = !allocSampling;
      process.kill(proc.pid, 'SIGUSR2');
      if (allocSampling) return null;
      for (let waited = 0; !existsSync(file); waited += 100) {
        if (waited > 30_000) throw new Error(`the allocation sampler wrote no profile into ${o.allocProfDir}`);
        await new Promise((r) => setTimeout(r, 100));
      }
      return file;
    },
    stop: async (s = {}) => {
      client.close();
      await proc.stop();
      if (!s.keepData && o.dataDir === undefined) {
        rmSync(dataDir, { recursive: true, force: true });
        if (walDir !== undefined) rmSync(walDir, { recursive: true, force: true });
      }
    },
  };
}

/**
 * What LevelDB has written in the background for the state store of a data directory,
 * in bytes, read from its info log (`LOG`): memtables flushed to level 0, and the
 * output of its compactions; and how many times a write waited for the background
 * (a full memtable still being flushed, or too many level-0 files). The log starts
 * again when the store is opened. NaN for a build without a state store.
 */
export function storeBackgroundWrites(dataDir: string): { flushed: number; compacted: number; writeWaits: number } {
  const dir = join(dataDir, 'ledger');
  if (!existsSync(join(dir, 'CURRENT'))) return { flushed: NaN, compacted: NaN, writeWaits: NaN };
  const log = join(dir, readFileSync(join(dir, 'CURRENT'), 'utf8').trim(), 'LOG');
  let flushed = 0;
  let compacted = 0;
  let writeWaits = 0;
  for (const line of readFileSync(log, 'utf8').split('\n')) {
    const f = /Level-0 table #\d+: (\d+) bytes OK/.exec(line);
    if (f) flushed += Number(f[1]);
    const c = /Compacted .* => (\d+) bytes/.exec(line);
    if (c) compacted += Number(c[1]);
    if (/waiting\.\.\./.test(line)) writeWaits++;
  }
  return { flushed, compacted, writeWaits };
}

/** The newest CPU profile a server wrote into `dir`. */
export function newestProfile(dir: string): string {
  const files = readdirSync(dir).filter((f) => f.endsWith('.cpuprofile')).sort();
  if (files.length === 0) throw new Error(`no CPU profile in ${dir}`);
  return join(dir, files[files.length - 1]!);
}
