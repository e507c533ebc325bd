// Runs the compiled benchmarks (test/dist/bench/*.bench.js) whose name contains the
// filter, each in its own process, one after another, so that they do not compete for
// the cores of a small machine. Arguments after the filter go to every benchmark.
// Usage: npm run bench [-- <name-filter> [--option value ...]]; npm run bench -- --help lists them.
import { readdirSync } from 'node:fs';
import { spawn } from 'node:child_process';
import { constants } from 'node:os';
import { join } from 'node:path';

const dir = new URL('../test/dist/bench/', import.meta.url).pathname;
const ABOUT = {
  intents: 'a standalone node over HTTPS: 1, 16, 64 and 256 in flight, then half of the peak, open loop',
  growth: 'a million intents on one node, a line per 100,000, then a restart',
  start: "a node's start, on a fresh data directory and on one holding intents: time to node_started, and its CPU",
  cluster: 'a three-node cluster at 1 to 256 in flight, then failovers (SIGKILL of the primary)',
  snapshot: "a node's store streamed to a member behind compaction, process to process: time, rate, each side's CPU",
  disk: "the disk's synced writes, appended and over zeros, alone and beside a compaction-shaped writer",
  ledger: "the core's apply alone, then a node in this process (quick; not as users measure)",
  raft: 'the Raft core in a simulated three-node group, in memory',
  frontend: "the agent plane's front end alone (TLS, HTTP, parse, schemas) beside the whole node: what a thread of its own could take",
  wake: 'what waking another thread costs the waker here (the handoffs the node makes for every Ready)',
  etcd: "the cluster target's reference on this machine: a three-member etcd committing small writes, closed loop (needs etcd)",
  reference: "the standalone target's reference on this machine: a PostgreSQL ledger's core under pgbench (needs PostgreSQL)",
};
const all = readdirSync(dir).filter((f) => f.endsWith('.bench.js')).sort();
const [filter = '', ...args] = process.argv.slice(2);
if (filter === '--help' || filter === '-h' || filter === 'help') {
  console.log('usage: npm run bench [-- <name> [options]]   every benchmark whose name contains <name>, one after another');
  console.log('       npm run bench -- <name> --help        the options of one\n');
  for (const f of all) {
    const name = f.replace(/\.bench\.js$/, '');
    console.log(`  ${name.padEnd(9)} ${ABOUT[name] ?? ''}`);
  }
  console.log('\nThe figures and how to read them: docs/BENCHMARKS.md');
  process.exit(0);
}
const files = all.filter((f) => f.includes(filter));
if (files.length === 0) {
  console.error(`no benchmark matches "${filter}" (npm run bench -- --help lists them)`);
  process.exit(2);
}
// A signal to this process (Ctrl-C, a kill) goes to the benchmark running, which stops
// its servers and removes its directories; no later benchmark starts.
let running = null;
let stoppedBy = null;
for (const signal of ['SIGINT', 'SIGTERM']) {
  process.on(signal, () => {
    stoppedBy = signal;
    running?.kill(signal);
  });
}
const codes = [];
for (const f of files) {
  if (stoppedBy !== null) break;
  console.log(`\n== ${f.replace(/\.bench\.js$/, '')}`);
  codes.push(await new Promise((resolveCode) => {
    running = spawn(process.execPath, ['--enable-source-maps', join(dir, f), ...args], { stdio: 'inherit' });
    running.once('exit', (code, signal) => resolveCode(code ?? 128 + (constants.signals[signal] ?? 0)));
  }));
  running = null;
}
// One benchmark's own status (2: its options refused); several: 0 when all passed, else 1.
if (stoppedBy !== null) process.exit(128 + constants.signals[stoppedBy]);
process.exit(codes.length === 1 ? codes[0] : codes.every((c) => c === 0) ? 0 : 1);
