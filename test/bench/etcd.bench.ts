/**
 * The reference the cluster target is set against, measured on this machine: a
 * three-member etcd committing small writes. The target names "a three-member etcd on
 * this machine commits about 3,600 small writes per second"; this measures what it
 * commits on the machine at hand, so that a cluster's figures can be read beside it, as
 * `npm run bench -- reference` does for the standalone target.
 *
 *   npm run bench -- etcd [options]    (USAGE below; --help lists the options)
 *
 * Three etcd members run as processes of their own on 127.0.0.1, each with a data
 * directory in one temporary directory (removed afterwards), with etcd's defaults: the
 * log synced before a write is acknowledged, a heartbeat of 100 ms. As the node's
 * cluster runs, the peers speak mutual TLS and the clients TLS, with certificates made
 * by certs/dev-certs.sh (`--plain`: neither). This process drives them closed loop over
 * gRPC (KV.Put, one HTTP/2 connection per member), at the same levels as `npm run bench
 * -- cluster`, every client sending to the members in turn (`--to leader`: all to the
 * leader), as etcd's own benchmark spreads its connections over the endpoints.
 *
 * It prints, per level, puts per second, the latency p50, p99 and max, each member's CPU
 * per put (all its threads, from /proc) and this process's, and each member's synced
 * log writes per put (etcd's `etcd_disk_wal_fsync_duration_seconds_count`); the disk's
 * synced-write rate is measured first in the same directory. At the end it checks that
 * the store's revision rose by exactly the puts acknowledged, and fails if not.
 *
 * It needs etcd (Debian: `apt-get install etcd-server`), found on the PATH or where
 * --etcd-bin says.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { closeSync, existsSync, mkdtempSync, openSync, readFileSync, rmSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { ScriptArgs } from '../support/args.js';
import { killOnExit, removeOnExit } from '../support/cleanup.js';
import { syncedWrites } from './support/fsync.js';
import { percentile } from './support/percentile.js';
import { cpuSeconds, onPath } from './support/proc.js';
import { REPORT_ARGS, Report } from './support/report.js';

const USAGE = `npm run bench -- etcd [--concurrency 1,16,64,256] [--seconds 15] [--to all|leader] [--plain]
                    [--key-bytes 8] [--value-bytes 256] [--keys 100000] [--etcd-bin /usr/bin/etcd]
                    [--out bench-results] [--label name] [--json out.json]`;
const args = new ScriptArgs(USAGE, {
  concurrency: { type: 'string', default: '1,16,64,256' },
  seconds: { type: 'string', default: '15' },
  to: { type: 'string', default: 'all' },
  plain: { type: 'boolean', default: false },
  'key-bytes': { type: 'string', default: '8' },
  'value-bytes': { type: 'string', default: '256' },
  keys: { type: 'string', default: '100000' },
  'etcd-bin': { type: 'string' },
  ...REPORT_ARGS,
});
const a = args.values;
const concurrencies = args.ints('concurrency');
const seconds = args.int('seconds', 1);
const keyBytes = args.int('key-bytes', 8);
const valueBytes = args.int('value-bytes', 0);
const keySpace = args.int('keys', 1);
if (a.to !== 'all' && a.to !== 'leader') args.refuse(`--to ${a.to}: expected all or leader`);
if (String(keySpace - 1).length + 1 > keyBytes) args.refuse(`--keys ${keySpace}: its largest key needs more than --key-bytes ${keyBytes}`);
const bin = a['etcd-bin'] ?? onPath('etcd') ?? args.refuse('etcd was not found on the PATH: install it (Debian: apt-get install etcd-server), or name it with --etcd-bin');
if (!existsSync(bin)) args.refuse(`--etcd-bin ${bin}: no such file`);
const versionLine = spawnSync(bin, ['--version'], { encoding: 'utf8' }).stdout?.split('\n')[0] ?? '';
if (!versionLine.startsWith('etcd Version:')) args.refuse(`--etcd-bin ${bin}: it does not run as etcd (its --version does not begin "etcd Version:")`);
const version = versionLine.replace(/^etcd Version:\s*/, '');

// The options are good: now what the run needs.
const grpc = await import('@grpc/grpc-js');
const { Reader, Writer } = (await import('protobufjs/minimal.js')).default;
const { testCerts } = await import('../support/node.js');
const { freePort } = await import('../support/cluster.js');

const MEMBERS = ['m1', 'm2', 'm3'] as const;
/** The longest a member may take to answer its health check after it starts. */
const READY_MS_MAX = 30_000;
const dir = removeOnExit(mkdtempSync(join(tmpdir(), 'apl-etcdref-')));
const certs = a.plain ? null : testCerts();
const scheme = a.plain ? 'http' : 'https';

interface Member {
  name: string;
  client: number;
  peer: number;
  metrics: number;
  process: ChildProcess;
}

interface Row {
  concurrency: number;
  puts: number;
  perSecond: number;
  p50: number;
  p99: number;
  max: number;
  /** Each member's CPU (all its threads) per put, in the order of the members. */
  cpuMsPerPut: number[];
  loadCpuMsPerPut: number;
  /** Each member's synced log writes per put. */
  syncsPerPut: number[];
  fsyncShare: number;
}

const report = new Report('etcd');
const print = report.print;
const members: Member[] = [];
const rows: Row[] = [];
let disk: ReturnType<typeof syncedWrites> | null = null;
let leader = '';
let revisions = { before: 0, after: 0, acknowledged: 0 };
const clients: InstanceType<typeof grpc.Client>[] = [];
try {
  const ports = await Promise.all(MEMBERS.map(async () => ({ client: await freePort(), peer: await freePort(), metrics: await freePort() })));
  const cluster = MEMBERS.map((name, k) => `${name}=${scheme}://127.0.0.1:${ports[k]!.peer}`).join(',');
  for (const [k, name] of MEMBERS.entries()) members.push({ name, ...ports[k]!, process: startMember(name, ports[k]!, cluster) });
  await Promise.all(members.map((m) => ready(m)));
  const credentials = certs ? grpc.credentials.createSsl(readFileSync(certs.ca)) : grpc.credentials.createInsecure();
  // The certificates name localhost too: a name, not the address, for TLS's server name.
  const names = certs ? { 'grpc.ssl_target_name_override': 'localhost', 'grpc.default_authority': 'localhost' } : {};
  for (const m of members) clients.push(new grpc.Client(`127.0.0.1:${m.client}`, credentials, names));
  leader = await leaderName();
  const targets = a.to === 'all' ? clients : [clients[members.findIndex((m) => m.name === leader)]!];

  const acknowledged = { puts: 0 };
  revisions.before = await revision(clients[0]!);
  // A warm-up (connections, the members' first pages), no longer than a level.
  await load(targets, 16, Math.min(3000, seconds * 1000), acknowledged);
  disk = syncedWrites(dir);
  print(`etcd ${version}; three members; leader ${leader}; ${a.plain ? 'no TLS' : 'mutual TLS between members, TLS to clients'}; puts of a ${keyBytes}-byte key (${keySpace.toLocaleString('en-US')} keys) and a ${valueBytes}-byte value; ${a.to === 'all' ? 'clients sent to every member in turn' : 'every put to the leader'}; load from this process on Node.js ${process.version}; ${cpus().length} CPUs (${cpus()[0]?.model ?? 'unknown'})`);
  print(`disk: ${Math.round(disk.perSecond).toLocaleString('en-US')} synced writes/s (4 KiB append + fsync, in the members' directory), each p50 ${disk.p50Ms.toFixed(2)} ms, p99 ${disk.p99Ms.toFixed(1)} ms, max ${disk.maxMs.toFixed(0)} ms`);
  print('');
  print(`| in flight | puts/s | p50 | p99 | max | CPU/put ${MEMBERS.join(' / ')} (* leader) | load generator CPU/put | synced writes/put ${MEMBERS.join(' / ')} | puts/s ÷ the disk's synced writes/s |`);
  print('|---:|---:|---:|---:|---:|---|---:|---|---:|');
  for (const n of concurrencies) {
    const syncsBefore = await Promise.all(members.map((m) => walSyncs(m)));
    const [cpuBefore, loadBefore] = [members.map((m) => cpuSeconds(m.process.pid!)), process.cpuUsage()];
    const s = await load(targets, n, seconds * 1000, acknowledged);
    const loadUsage = process.cpuUsage(loadBefore);
    const cpuMsPerPut = members.map((m, k) => ((cpuSeconds(m.process.pid!) - cpuBefore[k]!) * 1000) / s.puts);
    const syncsPerPut = (await Promise.all(members.map((m) => walSyncs(m)))).map((x, k) => (x - syncsBefore[k]!) / s.puts);
    const row: Row = { concurrency: n, ...s, cpuMsPerPut, loadCpuMsPerPut: (loadUsage.user + loadUsage.system) / 1000 / s.puts, syncsPerPut, fsyncShare: s.perSecond / disk.perSecond };
    rows.push(row);
    const cpu = cpuMsPerPut.map((ms, k) => `${ms.toFixed(2)}${members[k]!.name === leader ? '*' : ''}`).join(' / ');
    print(`| ${n} | ${Math.round(s.perSecond).toLocaleString('en-US')} | ${s.p50.toFixed(1)} ms | ${s.p99.toFixed(1)} ms | ${s.max.toFixed(0)} ms | ${cpu} ms | ${row.loadCpuMsPerPut.toFixed(2)} ms | ${syncsPerPut.map((x) => x.toFixed(2)).join(' / ')} | ${row.fsyncShare.toFixed(2)} |`);
  }
  revisions = { before: revisions.before, after: await revision(clients[0]!), acknowledged: acknowledged.puts };
  const rose = revisions.after - revisions.before;
  print('');
  print(`the store's revision rose by ${rose.toLocaleString('en-US')} for ${acknowledged.puts.toLocaleString('en-US')} puts acknowledged`);
  if (rose !== acknowledged.puts) throw new Error(`the revision rose by ${rose}, not by the ${acknowledged.puts} puts acknowledged`);
} finally {
  for (const c of clients) c.close();
  await Promise.all(members.map((m) => stop(m.process)));
  rmSync(dir, { recursive: true, force: true });
}
report.write(a, { etcd: version, cpus: cpus().length, cpuModel: cpus()[0]?.model ?? null, tls: !a.plain, to: a.to, keyBytes, valueBytes, keys: keySpace, seconds, leader, disk, rows, revisions });

/** Starts one member; its output goes to a file in the run's directory. */
function startMember(name: string, p: { client: number; peer: number; metrics: number }, cluster: string): ChildProcess {
  const tls = certs === null ? [] : [
    '--cert-file', certs.cert, '--key-file', certs.key,
    '--peer-cert-file', certs.cert, '--peer-key-file', certs.key, '--peer-trusted-ca-file', certs.ca, '--peer-client-cert-auth',
  ];
  const out = openSync(join(dir, `${name}.log`), 'a');
  const child = spawn(bin, [
    '--name', name, '--data-dir', join(dir, name),
    '--listen-client-urls', `${scheme}://127.0.0.1:${p.client}`, '--advertise-client-urls', `${scheme}://127.0.0.1:${p.client}`,
    '--listen-peer-urls', `${scheme}://127.0.0.1:${p.peer}`, '--initial-advertise-peer-urls', `${scheme}://127.0.0.1:${p.peer}`,
    '--listen-metrics-urls', `http://127.0.0.1:${p.metrics}`,
    '--initial-cluster', cluster, '--initial-cluster-state', 'new', '--initial-cluster-token', 'apl-etcdref',
    '--logger', 'zap', '--log-level', 'warn',
    ...tls,
  ], { stdio: ['ignore', out, out] });
  closeSync(out);
  killOnExit(child);
  return child;
}

/** Waits until the member answers its health check with the cluster's leader known. */
async function ready(m: Member): Promise<void> {
  const deadline = performance.now() + READY_MS_MAX;
  for (;;) {
    if (m.process.exitCode !== null || m.process.signalCode !== null) {
      // The run's directory goes with the run: the log's end is said here.
      const log = readFileSync(join(dir, `${m.name}.log`), 'utf8').trimEnd().split('\n').slice(-5).join('\n');
      throw new Error(`etcd member ${m.name} exited (${m.process.exitCode ?? m.process.signalCode}); the end of its log:\n${log}`);
    }
    const health = await fetch(`http://127.0.0.1:${m.metrics}/health`).then((r) => r.text(), () => '');
    if (/"health":\s*"true"/.test(health)) return;
    if (performance.now() > deadline) throw new Error(`etcd member ${m.name} was not healthy within ${READY_MS_MAX} ms`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** A member's Prometheus text, from its metrics listener. */
async function metrics(m: Member): Promise<string> {
  const r = await fetch(`http://127.0.0.1:${m.metrics}/metrics`);
  if (!r.ok) throw new Error(`etcd member ${m.name}'s metrics answered ${r.status}`);
  return r.text();
}

function metric(text: string, name: string): number {
  const m = new RegExp(`^${name} (\\S+)$`, 'm').exec(text);
  if (!m) throw new Error(`etcd's metrics have no ${name}`);
  return Number(m[1]);
}

/** How many synced writes of its log the member has made. */
async function walSyncs(m: Member): Promise<number> {
  return metric(await metrics(m), 'etcd_disk_wal_fsync_duration_seconds_count');
}

async function leaderName(): Promise<string> {
  for (const m of members) if (metric(await metrics(m), 'etcd_server_is_leader') === 1) return m.name;
  throw new Error('no etcd member says it leads');
}

/** PutRequest: key (1) and value (2), as bytes. */
function putRequest(key: Buffer, value: Buffer): Buffer {
  return Buffer.from(Writer.create().uint32(10).bytes(key).uint32(18).bytes(value).finish());
}

/** The revision in a response's header (field 1: ResponseHeader, whose field 3 is the revision). */
function headerRevision(bytes: Buffer): number {
  const r = Reader.create(bytes);
  while (r.pos < r.len) {
    const tag = r.uint32();
    if (tag >>> 3 !== 1) {
      r.skipType(tag & 7);
      continue;
    }
    const h = Reader.create(r.bytes());
    while (h.pos < h.len) {
      const t = h.uint32();
      if (t >>> 3 === 3) return Number(h.int64().toString());
      h.skipType(t & 7);
    }
  }
  throw new Error('a response without a revision');
}

function unary(client: InstanceType<typeof grpc.Client>, method: string, body: Buffer): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    client.makeUnaryRequest(method, (b: Buffer) => b, (b: Buffer) => b, body, (err, res) => (err ? reject(err) : resolve(res!)));
  });
}

/** The store's revision now (a Range of one key, counted only, read linearizably). */
async function revision(client: InstanceType<typeof grpc.Client>): Promise<number> {
  // RangeRequest: key (1) "rev", count_only (9) true.
  const body = Buffer.from(Writer.create().uint32(10).bytes(Buffer.from('rev')).uint32(72).bool(true).finish());
  return headerRevision(await unary(client, '/etcdserverpb.KV/Range', body));
}

/** `concurrency` clients putting one after another for `ms`, client k to target k mod their number. */
async function load(targets: InstanceType<typeof grpc.Client>[], concurrency: number, ms: number, acknowledged: { puts: number }): Promise<{ puts: number; perSecond: number; p50: number; p99: number; max: number }> {
  const value = Buffer.alloc(valueBytes, 'v');
  const latencies: number[] = [];
  const start = performance.now();
  const end = start + ms;
  await Promise.all(Array.from({ length: concurrency }, async (_, k) => {
    const client = targets[k % targets.length]!;
    while (performance.now() < end) {
      const key = Buffer.from(`k${String(Math.floor(Math.random() * keySpace)).padStart(keyBytes - 1, '0')}`);
      const sent = performance.now();
      await unary(client, '/etcdserverpb.KV/Put', putRequest(key, value));
      latencies.push(performance.now() - sent);
      acknowledged.puts++;
    }
  }));
  const took = (performance.now() - start) / 1000;
  const sorted = Float64Array.from(latencies).sort();
  return { puts: sorted.length, perSecond: sorted.length / took, p50: percentile(sorted, 50), p99: percentile(sorted, 99), max: sorted.at(-1) ?? 0 };
}

/**
 * Stops a member and waits for it to exit. SIGKILL: its directory is removed next, and a
 * member stopped by SIGTERM first hands its leadership on, or waits to, while the others
 * stop too (seven seconds here).
 */
async function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = once(child, 'exit');
  child.kill('SIGKILL');
  await exited;
}
