/**
 * How long a node takes to start, as an operator who starts or restarts one sees it:
 * from the process's spawn to its `node_started` line (both planes listen, and a
 * standalone node is its own primary), and the CPU the process spent until then, all
 * its threads together.
 *
 * `--starts` starts on a fresh data directory each; then one node records `--intents`
 * intents of the benchmark's mix and stops, and is restarted `--starts` times on that
 * directory; then `--starts` times more, each after a write torn by a crash is put at
 * the end of its Raft log (the head of an entry that follows the last one, its body
 * never written), which the node drops after searching the rest of the segment for
 * whole entries behind it. Each start is stopped (SIGTERM) before the next. `--main`
 * runs another build's server, to compare two builds on one machine.
 *
 * Usage: npm run bench -- start [--starts 10] [--intents 2000] [--parties 16] [--main <main.js>] [--json <file>]
 */
import { closeSync, mkdtempSync, openSync, readdirSync, readFileSync, readSync, rmSync, writeFileSync, writeSync } from 'node:fs';
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
const torn: Start[] = [];
for (let i = 0; i < starts; i++) {
  const at = tearLog(join(dataDir, 'wal'));
  const { server, start } = await timedStart(dataDir);
  torn.push(start);
  const after = await appliedIndex(server);
  if (after < applied) throw new Error(`restart ${i + 1} after a torn write: applied index ${after}, below the ${applied} the node had applied before it stopped`);
  const dropped = server.proc.output().split('\n').some((l) => l.includes('"event":"wal_tail_dropped"') && l.includes(`"offset":${at.pos}`));
  await server.stop({ keepData: true });
  if (!dropped) throw new Error(`restart ${i + 1}: the node did not log the torn write at byte ${at.pos} of ${at.file} as dropped (wal_tail_dropped)`);
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
  tornWrite: row(`the same, after a write torn by a crash`, torn),
};
if (a.json !== undefined) writeFileSync(a.json, `${JSON.stringify({ intents, applied, ...figures }, null, 2)}\n`);

/**
 * Puts a torn write at the end of the Raft log in `walDir`, as a crash during a write
 * leaves it: the header of a record whose body (500 bytes) never reached the disk but
 * for its first 17 bytes, an entry of the index after the last one, so that it still
 * reads as the log's next entry. Records are a u32 length, a u32 CRC-32 and the body
 * (a type byte, 1 for an entry, then its index and its term, each a u64); a length of
 * zero ends them (packages/raft/src/wal-store.ts). Says where it put it.
 */
function tearLog(walDir: string): { file: string; pos: number } {
  const segments = readdirSync(walDir).filter((n) => n.endsWith('.wal')).sort().map((n) => join(walDir, n));
  const written = segments.filter((f) => !isZero(f, 0, 8));
  const file = written.at(-1);
  if (file === undefined) throw new Error(`no segment in ${walDir} holds a record`);
  const bytes = readFileSync(file);
  let pos = 0;
  let last: { index: bigint; term: bigint } | null = null;
  while (pos + 8 <= bytes.length && bytes.readUInt32BE(pos) !== 0) {
    if (bytes[pos + 8] === 1) last = { index: bytes.readBigUInt64BE(pos + 9), term: bytes.readBigUInt64BE(pos + 17) };
    pos += 8 + bytes.readUInt32BE(pos);
  }
  if (last === null) throw new Error(`the last segment written, ${file}, holds no entry`);
  const head = Buffer.alloc(8 + 17);
  head.writeUInt32BE(500, 0);
  head.writeUInt32BE(0xdeadbeef, 4);
  head[8] = 1;
  head.writeBigUInt64BE(last.index + 1n, 9);
  head.writeBigUInt64BE(last.term, 17);
  const fd = openSync(file, 'r+');
  try {
    writeSync(fd, head, 0, head.length, pos);
  } finally {
    closeSync(fd);
  }
  return { file, pos };
}

/** Whether `length` bytes of `file` at `pos` are all zeros. */
function isZero(file: string, pos: number, length: number): boolean {
  const fd = openSync(file, 'r');
  try {
    const b = Buffer.alloc(length);
    readSync(fd, b, 0, length, pos);
    return b.every((x) => x === 0);
  } finally {
    closeSync(fd);
  }
}

