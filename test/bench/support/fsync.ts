/**
 * The disk's synced-write rate: how many times a second one process can append 4 KiB
 * to a file and fsync it, in the directory the node writes its data to. Every batch
 * of intents costs the node at least one such write (the Raft log is synced before an
 * intent is acknowledged), so this is the ceiling of Readies per second, and
 * intents/s divided by it is the mean number of intents one fsync carries.
 *
 * It also gives the latency of those synced writes (p50, p99, max): a node cannot
 * acknowledge an intent sooner than the sync that makes it durable, so the disk's own
 * p99 is the floor of the node's.
 *
 * Run as a program (`node fsync.js <dir> <ms>`) it measures and prints the figures as
 * JSON; `syncedWrites` runs it in its own process, so the loop never shares a thread
 * with the load generator or the server.
 */
import { execFileSync } from 'node:child_process';
import { closeSync, fsyncSync, openSync, rmSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';

const BLOCK = Buffer.alloc(4096, 0x61);

export interface SyncedWrites {
  perSecond: number;
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
}

/** Appends and fsyncs for `ms` milliseconds in `dir`; the file is removed after. */
export function measure(dir: string, ms: number): SyncedWrites {
  const file = join(dir, `fsync-probe-${process.pid}.tmp`);
  const fd = openSync(file, 'w');
  const took: number[] = [];
  const start = performance.now();
  try {
    for (let now = start; now - start < ms;) {
      writeSync(fd, BLOCK);
      fsyncSync(fd);
      const after = performance.now();
      took.push(after - now);
      now = after;
    }
  } finally {
    closeSync(fd);
    rmSync(file, { force: true });
  }
  took.sort((x, y) => x - y);
  const at = (q: number) => took[Math.min(took.length - 1, Math.floor(q * took.length))] ?? NaN;
  return { perSecond: took.length / ((performance.now() - start) / 1000), p50Ms: at(0.5), p99Ms: at(0.99), maxMs: took[took.length - 1] ?? NaN };
}

/** The disk's synced writes in `dir`: their rate and latency, measured for `ms` in a separate process. */
export function syncedWrites(dir: string, ms = 3000): SyncedWrites {
  const out = execFileSync(process.execPath, [fileURLToPath(import.meta.url), dir, String(ms)], { encoding: 'utf8' });
  return JSON.parse(out) as SyncedWrites;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const [dir, ms] = process.argv.slice(2);
  process.stdout.write(`${JSON.stringify(measure(dir!, Number(ms ?? 3000)))}\n`);
}
