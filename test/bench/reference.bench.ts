/**
 * The reference the standalone target is set against, measured on this machine: the
 * database core of a PostgreSQL ledger. Each transaction inserts a transaction row and
 * two postings and updates two balances, durably (PostgreSQL's defaults: fsync, and
 * synchronous commit), with no HTTP, no authentication and no policy. pgbench drives it
 * closed loop, one connection per client, from its own process, at the same levels as
 * `npm run bench -- intents`; the server listens on a Unix socket in a directory of its
 * own, never on a network address, and is removed afterwards.
 *
 *   npm run bench -- reference [options]    (USAGE below; --help lists the options)
 *
 * It prints, per level, transactions per second, the latency p50, p99 and max (from
 * pgbench's log of every transaction), PostgreSQL's CPU time per transaction (the
 * postmaster and every process it started, from /proc) and pgbench's own, and the
 * disk's synced-write rate in the same directory, measured first as the intents
 * benchmark measures it. Set beside that benchmark's table (docs/BENCHMARKS.md), it
 * tells what part of a difference between two hosts is the host's.
 *
 * It needs PostgreSQL's server programs (Debian: `apt-get install postgresql`); they
 * are found under /usr/lib/postgresql/<version>/bin, or where --pg-bin says. Run as
 * root, the server runs as the `postgres` user (initdb refuses root).
 */
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { chownSync, existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { onExit } from 'signal-exit';
import { ScriptArgs } from '../support/args.js';
import { killOnExit } from '../support/cleanup.js';
import { syncedWrites } from './support/fsync.js';
import { REPORT_ARGS, Report } from './support/report.js';
import { percentile } from './support/percentile.js';
import { childrenCpuSeconds, childrenOf, cpuSeconds, reapedCpuSeconds } from './support/proc.js';

const USAGE = `npm run bench -- reference [--concurrency 1,16,64,256] [--seconds 15] [--accounts 128]
                         [--pg-bin /usr/lib/postgresql/15/bin] [--out bench-results] [--label name] [--json out.json]`;
const args = new ScriptArgs(USAGE, {
  concurrency: { type: 'string', default: '1,16,64,256' },
  seconds: { type: 'string', default: '15' },
  accounts: { type: 'string', default: '128' },
  'pg-bin': { type: 'string' },
  ...REPORT_ARGS,
});
const a = args.values;
const concurrencies = args.ints('concurrency');
const seconds = args.int('seconds', 1);
const accounts = args.int('accounts', 2);
const bin: string = a['pg-bin'] ?? findServerBin()
  ?? args.refuse("PostgreSQL's server programs were not found under /usr/lib/postgresql/<version>/bin: install them (Debian: apt-get install postgresql), or name their directory with --pg-bin");
for (const program of ['initdb', 'pg_ctl', 'pgbench', 'psql']) {
  if (!existsSync(join(bin, program))) args.refuse(`--pg-bin ${bin}: no ${program} there`);
}
/** Who runs the server: initdb refuses root, so root hands it to the `postgres` user. */
const runAs = process.getuid?.() === 0 ? serverUser() : null;
if (runAs === undefined) args.refuse('run as root, the server needs a `postgres` user to run as (Debian\'s postgresql package makes one)');

const PORT = 5432; // names the socket file in the server's own directory; no network address is opened
const USER = 'bench';

/** One transaction of the ledger's core; the debited account is below the credited one, so two never deadlock. */
const SCRIPT = `\\set amount random(1, 100000)
\\set a random(1, ${Math.floor(accounts / 2)})
\\set b random(${Math.floor(accounts / 2) + 1}, ${accounts})
BEGIN;
INSERT INTO transactions (party) VALUES (:a) RETURNING id \\gset
INSERT INTO postings (txn, account, side, amount) VALUES (:id, :a, 'D', :amount), (:id, :b, 'C', :amount);
UPDATE balances SET debit = debit + :amount WHERE account = :a;
UPDATE balances SET credit = credit + :amount WHERE account = :b;
COMMIT;
`;

const SCHEMA = `
CREATE TABLE balances (account int PRIMARY KEY, debit numeric(39,0) NOT NULL DEFAULT 0, credit numeric(39,0) NOT NULL DEFAULT 0);
CREATE TABLE transactions (id bigserial PRIMARY KEY, party int NOT NULL, recorded_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE postings (txn bigint NOT NULL REFERENCES transactions (id), account int NOT NULL REFERENCES balances (account),
  side char(1) NOT NULL, amount numeric(39,0) NOT NULL, PRIMARY KEY (txn, account, side));
INSERT INTO balances (account) SELECT g FROM generate_series(1, ${accounts}) g;
`;

interface Row {
  clients: number;
  transactions: number;
  perSecond: number;
  p50: number;
  p99: number;
  max: number;
  serverCpuMsPerTransaction: number;
  pgbenchCpuMsPerTransaction: number;
  fsyncShare: number;
}

const dir = mkdtempSync(join(tmpdir(), 'apl-pgref-'));
const data = join(dir, 'data');
// A run stopped by a signal (Ctrl-C, or one npm run bench passes on) stops the server
// it started, then removes its directory (which the server needs to be stopped);
// pgbench is killed (support/cleanup.ts).
onExit(() => {
  try {
    stopServer('immediate');
  } catch {
    // pg_ctl failed: the directory goes all the same
  }
  rmSync(dir, { recursive: true, force: true });
});
if (runAs) chownSync(dir, runAs.uid, runAs.gid);
const report = new Report('reference');
const print = report.print;
const rows: Row[] = [];
let started = false;
let disk: ReturnType<typeof syncedWrites> | null = null;
let version = '';
try {
  server('initdb', ['-D', data, '-A', 'trust', '-U', USER, '--no-sync']);
  const maxClients = Math.max(...concurrencies, 16);
  server('pg_ctl', ['-D', data, '-w', '-l', join(dir, 'server.log'), '-o', `-p ${PORT} -k ${dir} -c listen_addresses='' -c max_connections=${maxClients + 10} -c shared_buffers=128MB`, 'start']);
  started = true;
  version = psql('SHOW server_version').trim();
  psql(SCHEMA);
  const scriptFile = join(dir, 'ledger.sql');
  writeFileSync(scriptFile, SCRIPT);
  await run(16, 3, scriptFile, 'warmup'); // warm-up: connections, plans, the tables' first pages
  disk = syncedWrites(dir);
  print(`PostgreSQL ${version}; pgbench from ${bin}; ${accounts} accounts; ${cpus().length} CPUs (${cpus()[0]?.model ?? 'unknown'})`);
  print(`disk: ${Math.round(disk.perSecond).toLocaleString('en-US')} synced writes/s (4 KiB append + fsync, in the server's directory), each p50 ${disk.p50Ms.toFixed(2)} ms, p99 ${disk.p99Ms.toFixed(1)} ms, max ${disk.maxMs.toFixed(0)} ms`);
  print('');
  print('| clients | transactions/s | p50 | p99 | max | server CPU/transaction | pgbench CPU/transaction | transactions/s ÷ the disk\'s synced writes/s |');
  print('|---:|---:|---:|---:|---:|---:|---:|---:|');
  for (const clients of concurrencies) {
    const r = await run(clients, seconds, scriptFile, `c${clients}`);
    const row = { ...r, fsyncShare: r.perSecond / disk.perSecond };
    rows.push(row);
    print(`| ${clients} | ${Math.round(r.perSecond).toLocaleString('en-US')} | ${r.p50.toFixed(1)} ms | ${r.p99.toFixed(1)} ms | ${r.max.toFixed(0)} ms | ${r.serverCpuMsPerTransaction.toFixed(2)} ms | ${r.pgbenchCpuMsPerTransaction.toFixed(2)} ms | ${row.fsyncShare.toFixed(2)} |`);
  }
} finally {
  stopServer('fast');
  rmSync(dir, { recursive: true, force: true });
}
report.write(a, { postgres: version, cpus: cpus().length, cpuModel: cpus()[0]?.model ?? null, accounts, seconds, disk, rows });

/** Stops the server this run started, if it runs (`mode`: pg_ctl's shutdown mode). */
function stopServer(mode: 'fast' | 'immediate'): void {
  if (!started) return;
  started = false;
  server('pg_ctl', ['-D', data, '-w', '-m', mode, 'stop']);
}

/**
 * pgbench at `clients` for `secs`: the figures from its log of every transaction, and
 * the CPU both sides spent. It runs asynchronously, so that a signal to this process is
 * acted on at once rather than when pgbench ends.
 */
async function run(clients: number, secs: number, scriptFile: string, tag: string): Promise<Omit<Row, 'fsyncShare'>> {
  const prefix = join(dir, `log-${tag}`);
  const idle = childrenOf(postmaster()).length; // the background processes, no client connected
  const serverBefore = serverCpuSeconds(idle);
  const selfBefore = childCpuSeconds();
  const child = spawn(join(bin, 'pgbench'), [
    '-h', dir, '-p', String(PORT), '-U', USER, '-n', '-M', 'prepared', '-c', String(clients), '-j', String(Math.min(clients, cpus().length)),
    '-T', String(secs), '-f', scriptFile, '--log', `--log-prefix=${prefix}`, 'postgres',
  ], { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] });
  killOnExit(child);
  const r = { stdout: '', stderr: '' };
  child.stdout.setEncoding('utf8').on('data', (c: string) => (r.stdout += c));
  child.stderr.setEncoding('utf8').on('data', (c: string) => (r.stderr += c));
  const [status, signal] = (await once(child, 'close')) as [number | null, NodeJS.Signals | null];
  if (status !== 0) throw new Error(`pgbench failed (${status ?? signal}): ${r.stderr.trim()}`);
  const pgbenchCpu = childCpuSeconds() - selfBefore;
  const latencies = readLatencies(prefix);
  const serverCpu = serverCpuSeconds(idle) - serverBefore;
  const tps = /tps = ([0-9.]+) \(without initial connection time\)/.exec(r.stdout);
  if (!tps) throw new Error(`pgbench printed no rate:\n${r.stdout}`);
  return {
    clients,
    transactions: latencies.length,
    perSecond: Number(tps[1]),
    p50: percentile(latencies, 50),
    p99: percentile(latencies, 99),
    max: latencies.at(-1) ?? 0,
    serverCpuMsPerTransaction: (serverCpu * 1000) / latencies.length,
    pgbenchCpuMsPerTransaction: (pgbenchCpu * 1000) / latencies.length,
  };
}

/** Every transaction's latency in ms, sorted, from pgbench's per-thread logs (`client transaction latency_us ...`). */
function readLatencies(prefix: string): Float64Array {
  const name = prefix.slice(dir.length + 1);
  const ms: number[] = [];
  for (const f of readdirSync(dir).filter((f) => f.startsWith(`${name}.`))) {
    for (const line of readFileSync(join(dir, f), 'utf8').split('\n')) {
      const fields = line.split(' ');
      if (fields.length >= 3) ms.push(Number(fields[2]) / 1000);
    }
  }
  return Float64Array.from(ms).sort();
}

/**
 * The CPU time of the server so far: the postmaster's, what it has reaped of the
 * backends that ended (fields 16 and 17 of /proc/<pid>/stat), and its live children's.
 * It first waits (up to 5 s) for the children to be back to `idle`, so that after a run
 * the backends of pgbench's connections have ended and all of their CPU is counted.
 */
function serverCpuSeconds(idle: number): number {
  const pid = postmaster();
  for (let waited = 0; childrenOf(pid).length > idle && waited < 50; waited++) spawnSync('sleep', ['0.1']);
  return cpuSeconds(pid) + reapedCpuSeconds(pid) + childrenCpuSeconds(pid);
}

function postmaster(): number {
  return Number(readFileSync(join(data, 'postmaster.pid'), 'utf8').split('\n')[0]);
}

/** This process's ended children's CPU seconds (pgbench, once it has been waited for). */
function childCpuSeconds(): number {
  return reapedCpuSeconds(process.pid);
}

/** Runs one of the server's programs, as the server's user when this process is root. */
function server(program: string, argv: string[]): string {
  const [file, rest] = runAs ? ['runuser', ['-u', runAs.name, '--', join(bin, program), ...argv]] : [join(bin, program), argv];
  const r = spawnSync(file, rest, { encoding: 'utf8', cwd: dir });
  if (r.status !== 0) throw new Error(`${program} failed (${r.status ?? r.signal}): ${(r.stderr || r.stdout).trim()}`);
  return r.stdout;
}

function psql(sql: string): string {
  const r = spawnSync(join(bin, 'psql'), ['-h', dir, '-p', String(PORT), '-U', USER, '-d', 'postgres', '-X', '-q', '-t', '-A', '-v', 'ON_ERROR_STOP=1', '-c', sql], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`psql failed: ${r.stderr.trim()}`);
  return r.stdout;
}

/** The newest PostgreSQL's server programs in Debian's layout, or null. */
function findServerBin(): string | null {
  const root = '/usr/lib/postgresql';
  if (!existsSync(root)) return null;
  const versions = readdirSync(root).filter((v) => existsSync(join(root, v, 'bin', 'initdb'))).sort((x, y) => Number(y) - Number(x));
  return versions.length === 0 ? null : join(root, versions[0]!, 'bin');
}

/** The `postgres` user's ids, or undefined when there is none. */
function serverUser(): { name: string; uid: number; gid: number } | undefined {
  try {
    const uid = Number(execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' }).trim());
    const gid = Number(execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8' }).trim());
    return { name: 'postgres', uid, gid };
  } catch {
    return undefined;
  }
}
