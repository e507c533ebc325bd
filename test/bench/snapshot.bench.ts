/**
 * How long a member behind compaction waits for the whole store, and what sending and
 * receiving it costs the two members: a failover whose surviving quorum needs such a
 * member lasts as long as this (docs/BENCHMARKS.md).
 *
 * A standalone node records `--intents` intents of the benchmark's mix and stops; then
 * two processes, each a member's peer mesh and state store (support/snapshot-peer.ts),
 * stream that store from one to the other over mutual TLS `--transfers` times, as a
 * primary streams it to a member behind. The receiver checks every chunk and the state
 * hash, as a member does, and does not install it. Per transfer: the store's size, the
 * time from the Raft message to the receiver's acknowledgement, the rate, and the CPU of
 * each process, and of its JavaScript thread, the one that runs Raft and `apply` in a
 * node.
 *
 * Usage: npm run bench -- snapshot [--intents 25000] [--transfers 3] [--parties 64] [--main <main.js>] [--json <file>]
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { ScriptArgs } from '../support/args.js';
import { killOnExit, removeOnExit } from '../support/cleanup.js';
import { SERVER_ARGS, serverOptions } from './support/server-args.js';

const USAGE = 'npm run bench -- snapshot [--intents 25000] [--transfers 3] [--parties 64] [--main <main.js>] [--json <file>]';
const args = new ScriptArgs(USAGE, {
  intents: { type: 'string', default: '25000' },
  transfers: { type: 'string', default: '3' },
  parties: { type: 'string', default: '64' },
  json: { type: 'string' },
  main: SERVER_ARGS.main,
  'server-env': SERVER_ARGS['server-env'],
});
const a = args.values;
const intents = args.int('intents', 100);
const transfers = args.int('transfers', 1);
const parties = args.int('parties', 1);
const serverOpts = serverOptions(a, (why) => args.refuse(why));
// The options are good: now what the run needs (the node's packages among them).
const { freePort } = await import('../support/cluster.js');
const { testCerts } = await import('../support/node.js');
const { runLoad } = await import('./support/load.js');
const { startBenchServer } = await import('./support/server.js');
const { Mix, bootstrapWorkload } = await import('./support/workload.js');
// The peers load the same build as the server: beside its main.js, or this checkout's.
const dist = resolve(serverOpts.mainJs === undefined ? new URL('../../../packages/node/dist/', import.meta.url).pathname : dirname(serverOpts.mainJs));
const PEER = new URL('./support/snapshot-peer.js', import.meta.url).pathname;

const dataDir = removeOnExit(mkdtempSync(join(tmpdir(), 'apl-bench-snapshot-')));
const server = await startBenchServer({ ...serverOpts, dataDir });
const runId = `s${Date.now().toString(36)}`;
const mix = new Mix(await bootstrapWorkload(server.admin, parties, runId), runId);
const load = await runLoad({ urls: [server.proc.agentUrl], ca: server.ca, concurrency: 64, mix, intents });
await server.stop({ keepData: true });
console.log(`a store of ${intents.toLocaleString('en-US')} intents (${Math.round(load.intentsPerSecond).toLocaleString('en-US')} intents/s at 64 in flight), streamed ${transfers} times from one member's process to another's`);

interface Peer { lines: AsyncIterator<string>; stop: () => void; exited: Promise<number | null> }
function peer(argv: string[]): Peer {
  const child = spawn(process.execPath, ['--enable-source-maps', PEER, ...argv], { stdio: ['ignore', 'pipe', 'inherit'] });
  killOnExit(child);
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
  return { lines: createInterface({ input: child.stdout! })[Symbol.asyncIterator](), stop: () => child.kill('SIGTERM'), exited };
}
async function line(p: Peer, who: string): Promise<Record<string, number | string | boolean>> {
  const next = await p.lines.next();
  if (next.done) throw new Error(`the ${who} ended before it answered`);
  return JSON.parse(next.value) as Record<string, number | string | boolean>;
}

const ports = [String(await freePort()), String(await freePort())];
const certs = testCerts().dir;
const receiver = peer(['recv', dist, certs, ...ports, removeOnExit(mkdtempSync(join(tmpdir(), 'apl-bench-snapshot-recv-')))]);
await line(receiver, 'receiver');
const sender = peer(['send', dist, certs, ...ports, join(dataDir, 'ledger'), String(transfers)]);
const mib = (b: number) => b / 2 ** 20;
const rows: { mib: number; seconds: number; mibPerSecond: number; sender: { cpuMs: number; loopCpuMs: number }; receiver: { cpuMs: number; loopCpuMs: number } }[] = [];
console.log('| transfer | store | time | rate | sender CPU: process / event loop | receiver CPU: process / event loop |');
console.log('|---:|---:|---:|---:|---:|---:|');
for (let i = 1; i <= transfers; i++) {
  const sent = await line(sender, 'sender');
  const got = await line(receiver, 'receiver');
  const [size, seconds] = [mib(sent.bytes as number), (sent.ms as number) / 1000];
  rows.push({ mib: size, seconds, mibPerSecond: size / seconds, sender: { cpuMs: sent.cpuMs as number, loopCpuMs: sent.loopCpuMs as number }, receiver: { cpuMs: got.cpuMs as number, loopCpuMs: got.loopCpuMs as number } });
  const ms = (v: unknown) => `${Math.round(v as number).toLocaleString('en-US')} ms`;
  console.log(`| ${i} | ${size.toFixed(1)} MiB | ${seconds.toFixed(2)} s | ${(size / seconds).toFixed(0)} MiB/s | ${ms(sent.cpuMs)} / ${ms(sent.loopCpuMs)} | ${ms(got.cpuMs)} / ${ms(got.loopCpuMs)} |`);
}
const senderCode = await sender.exited;
receiver.stop();
await receiver.exited;
if (senderCode !== 0) throw new Error(`the sender exited with ${senderCode}`);
if (a.json !== undefined) writeFileSync(a.json, `${JSON.stringify({ intents, transfers: rows }, null, 2)}\n`);
