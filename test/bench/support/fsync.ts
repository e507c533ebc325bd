/**
 * The disk's synced-write rate: how many times a second one process can append 4 KiB
 * to a file and fsync it, in the directory the node writes its data to. Every batch
 * of intents costs the node at least one such write (the Raft log is synced before an
 * intent is acknowledged), so this is the ceiling of Readies per second, and
 * intents/s divided by it is the mean number of intents one fsync carries.
 *
 * Run as a program (`node fsync.js <dir> <ms>`) it measures and prints
 * `{"writes": n, "seconds": s}`; `syncedWriteRate` runs it in its own process, so the
 * loop never shares a thread with the load generator or the server.
 */
import { execFileSync } from 'node:child_process';
import { closeSync, fsyncSync, openSync, rmSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';

const BLOCK = Buffer.alloc(4096, 0x61);

/** Appends and fsyncs for `ms` milliseconds in `dir`; the file is removed after. */
export function measure(dir: string, ms: number): { writes: number; seconds: number } {
  const file = join(dir, `fsync-probe-${process.pid}.tmp`);
  const fd = openSync(file, 'w');
  let writes = 0;
  const start = performance.now();
  try {
    while (performance.now() - start < ms) {
      writeSync(fd, BLOCK);
      fsyncSync(fd);
      writes++;
    }
  } finally {
    closeSync(fd);
    rmSync(file, { force: true });
  }
  return { writes, seconds: (performance.now() - start) / 1000 };
}

/** Synced writes per second in `dir`, measured for `ms` in a separate process. */
export function syncedWriteRate(dir: string, ms = 3000): number {
  const out = execFileSync(process.execPath, [fileURLToPath(import.meta.url), dir, String(ms)], { encoding: 'utf8' });
  const r = JSON.parse(out) as { writes: number; seconds: number };
  return r.writes / r.seconds;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const [dir, ms] = process.argv.slice(2);
  process.stdout.write(`${JSON.stringify(measure(dir!, Number(ms ?? 3000)))}\n`);
}
