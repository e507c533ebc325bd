/**
 * What it costs one thread to wake another on this machine: the handoff the node makes
 * several times for every Raft Ready (the Raft log's write to libuv's pool, the state
 * store's batch and reads to its thread, the answers to the agent plane's thread) and
 * the agent plane once more per request. A thread that is already running takes a
 * message for a few microseconds; one asleep must be woken, and on a virtual machine
 * that may cost the waker an exit to the hypervisor. Where a wake is dear, every
 * thread spends more per request at a moderate load, when few requests share a
 * handoff, than at the peak, when many do (docs/BENCHMARKS.md, "What a wake costs").
 *
 * Each handoff is made `--count` times, `--spacing-ms` apart so that the other side
 * has gone to sleep, and the CPU time of each thread of this process over all of them
 * is read from the kernel (schedstat), less what the same loop spends without the
 * handoff; a single handoff cannot be timed so, since the kernel brings a running
 * thread's count up to date only when it is scheduled. Also the time until the answer
 * is back. The handoffs:
 *
 * - a message posted to a sleeping worker thread (postMessage), which answers;
 * - a 16 KiB file write handed to libuv's sleeping pool (fs/promises);
 * - messages posted back to back to a worker thread already awake.
 *
 * Usage: npm run bench -- wake [--count 2000] [--spacing-ms 1]
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { Worker } from 'node:worker_threads';
import { ScriptArgs } from '../support/args.js';
import { removeOnExit } from '../support/cleanup.js';
import { percentile } from './support/percentile.js';
import { threadCpu } from './support/proc.js';

const args = new ScriptArgs('npm run bench -- wake [--count 2000] [--spacing-ms 1]', {
  count: { type: 'string', default: '2000' },
  'spacing-ms': { type: 'string', default: '1' },
});
const count = args.int('count', 500); // fewer: the kernel's counts (in scheduler ticks) leave the per-handoff figures in the noise, even below zero
const spacingMs = args.int('spacing-ms', 1);

/** CPU time of each thread of this process (the JavaScript thread as `caller`), in ns. */
function threadsNs(): Map<string, number> {
  const out = new Map<string, number>();
  for (const { tid, name, ns } of threadCpu(process.pid)) {
    const key = tid === process.pid ? 'caller' : name;
    out.set(key, (out.get(key) ?? 0) + ns);
  }
  return out;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Runs `step` `count` times, `spacingMs` apart, and returns µs of CPU per step by
 * thread (the caller, the rest), with the loop's own cost (a step that does nothing)
 * taken off, and the steps' own times in µs.
 */
async function measure(step: () => Promise<void>, idle: { caller: number; others: number } | null): Promise<{ caller: number; others: number; took: number[] }> {
  const took: number[] = [];
  await sleep(50);
  const before = threadsNs();
  for (let k = 0; k < count; k++) {
    await sleep(spacingMs);
    const t0 = performance.now();
    await step();
    took.push((performance.now() - t0) * 1000);
  }
  await sleep(50); // every thread asleep again: their counts are up to date
  const after = threadsNs();
  let caller = 0;
  let others = 0;
  for (const [name, ns] of after) {
    const d = (ns - (before.get(name) ?? 0)) / 1000 / count;
    if (name === 'caller') caller += d;
    else others += d;
  }
  return { caller: caller - (idle?.caller ?? 0), others: others - (idle?.others ?? 0), took };
}

const worker = new Worker(
  "const { parentPort } = require('node:worker_threads'); parentPort.on('message', (m) => parentPort.postMessage(m.length));",
  { eval: true },
);
const message = 'x'.repeat(1024);
const answered: (() => void)[] = [];
worker.on('message', () => answered.shift()?.());
const post = () => {
  const back = new Promise<void>((r) => answered.push(r));
  worker.postMessage(message);
  return back;
};
const dir = removeOnExit(mkdtempSync(join(tmpdir(), 'apl-wake-')));
const rows: [string, { caller: number; others: number; took: number[] }][] = [];
try {
  await post(); // the worker started
  const idle = await measure(async () => undefined, null);
  rows.push(['a message to a sleeping worker thread, and its answer', await measure(post, idle)]);
  const fh = await open(join(dir, 'wake.bin'), 'w');
  const bytes = Buffer.alloc(16 << 10, 0x61);
  try {
    rows.push(["a 16 KiB write handed to libuv's sleeping pool", await measure(async () => void (await fh.write(bytes, 0, bytes.length, 0)), idle)]);
  } finally {
    await fh.close();
  }
  // 50 at a time: the worker is awake for all but the first, so this is near a message's own cost.
  const burst = 50;
  const awake = await measure(async () => void (await Promise.all(Array.from({ length: burst }, post))), idle);
  rows.push([`messages to a worker thread already awake (${burst} back to back, per message)`, { caller: awake.caller / burst, others: awake.others / burst, took: awake.took.map((t) => t / burst) }]);
} finally {
  await worker.terminate();
  rmSync(dir, { recursive: true, force: true });
}

console.log(`${count.toLocaleString('en-US')} handoffs of each kind, ${spacingMs} ms apart; CPU per handoff from the kernel's count of each thread, less the loop's own:`);
console.log('');
console.log('| handoff | the caller\'s CPU | the other side\'s CPU | done, p50 | done, p99 |');
console.log('|---|---:|---:|---:|---:|');
const us = (x: number) => `${x.toFixed(1)} µs`;
for (const [what, r] of rows) {
  const took = Float64Array.from(r.took).sort();
  console.log(`| ${what} | ${us(r.caller)} | ${us(r.others)} | ${us(percentile(took, 50))} | ${us(percentile(took, 99))} |`);
}
