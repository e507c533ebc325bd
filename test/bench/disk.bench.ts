/**
 * Why the Raft log is a write-ahead log of zero-filled segments (docs/raft.md §5): the
 * synced write the node waits for, timed two ways, alone and beside a writer with the
 * shape of LevelDB's compactions.
 *
 * - append: 4 KiB appended to a growing file, then `fdatasync`. The file's size
 *   changes, so the sync must commit the filesystem's journal (LevelDB's log, the Raft
 *   log before the write-ahead log).
 * - over zeros: 4 KiB written over a file filled with zeros and synced beforehand,
 *   then `fdatasync`. No size change, no block allocated: the sync flushes the pages
 *   only (a segment of the write-ahead log).
 * - the background writer, in its own process: files of 2 MiB (by default) written and
 *   fsynced, about 50 MB/s (LevelDB writing and syncing compaction output), the oldest
 *   deleted, and an unsynced append of 3 KB records (the state store's own log).
 *
 * Usage: npm run bench -- disk [--seconds 20] [--table-mib 2] [--dir <a directory on the disk to test>]
 * (`--table-mib 32` writes files the size of the state store's memtable flushes.)
 */
import { fork } from 'node:child_process';
import { closeSync, existsSync, fdatasyncSync, fsyncSync, mkdirSync, mkdtempSync, openSync, rmSync, unlinkSync, writeSync, ftruncateSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { ScriptArgs } from '../support/args.js';

const BLOCK = Buffer.alloc(4096, 0x61);
const FILE_BYTES = 64 << 20;

interface Timing {
  perSecond: number;
  p50: number;
  p99: number;
  p999: number;
  max: number;
  over25: number;
  over100: number;
}

/** Synced 4 KiB writes for `seconds`, appended or over zeros, each timed. */
function timeWrites(dir: string, mode: 'append' | 'zeros', seconds: number): Timing {
  const file = join(dir, `disk-${mode}-${process.pid}.tmp`);
  const fd = openSync(file, 'w');
  try {
    if (mode === 'zeros') {
      const zeros = Buffer.alloc(1 << 20);
      for (let at = 0; at < FILE_BYTES; at += zeros.length) writeSync(fd, zeros, 0, zeros.length, at);
      fsyncSync(fd);
    }
    const took: number[] = [];
    const start = performance.now();
    let offset = 0;
    for (let now = start; now - start < seconds * 1000;) {
      writeSync(fd, BLOCK, 0, BLOCK.length, mode === 'zeros' ? offset % FILE_BYTES : offset);
      fdatasyncSync(fd);
      offset += BLOCK.length;
      const after = performance.now();
      took.push(after - now);
      now = after;
    }
    took.sort((x, y) => x - y);
    const at = (q: number) => took[Math.min(took.length - 1, Math.floor(q * took.length))]!;
    return {
      perSecond: took.length / seconds, p50: at(0.5), p99: at(0.99), p999: at(0.999), max: took.at(-1)!,
      over25: took.filter((x) => x > 25).length, over100: took.filter((x) => x > 100).length,
    };
  } finally {
    closeSync(fd);
    rmSync(file, { force: true });
  }
}

/** The background writer, `tableMib` MiB files about 50 MB/s: runs until killed. */
function backgroundWriter(dir: string, tableMib: number): void {
  mkdirSync(dir, { recursive: true });
  // A parent stopped by a signal cannot kill it: the end of the IPC channel says it is gone,
  // and the writer removes the run's directory (its own is inside it) and stops.
  process.on('disconnect', () => {
    rmSync(dirname(dir), { recursive: true, force: true });
    process.exit(0);
  });
  const table = Buffer.alloc(tableMib << 20, 0x62);
  const record = Buffer.alloc(3000, 0x63);
  const log = openSync(join(dir, 'log'), 'w');
  const tables: string[] = [];
  let logBytes = 0;
  let n = 0;
  const step = () => {
    for (let i = 0; i < 30; i++) logBytes += writeSync(log, record);
    if (logBytes > 32 << 20) {
      ftruncateSync(log, 0);
      logBytes = 0;
    }
    const path = join(dir, `table-${n++}`);
    const fd = openSync(path, 'w');
    writeSync(fd, table);
    fsyncSync(fd);
    closeSync(fd);
    tables.push(path);
    if (tables.length > Math.max(4, 200 / tableMib)) unlinkSync(tables.shift()!);
    setTimeout(step, 20 * tableMib);
  };
  step();
}

function main(): void {
  const args = new ScriptArgs('npm run bench -- disk [--seconds 20] [--table-mib 2] [--dir <directory>]', {
    seconds: { type: 'string', default: '20' },
    'table-mib': { type: 'string', default: '2' },
    dir: { type: 'string' },
  });
  const seconds = args.int('seconds', 1);
  const tableMib = args.int('table-mib', 1);
  if (args.values.dir !== undefined && !existsSync(args.values.dir)) args.refuse(`--dir ${args.values.dir}: no such directory`);
  const dir = mkdtempSync(join(args.values.dir ?? tmpdir(), 'apl-disk-'));
  const rows: string[] = [];
  const row = (mode: string, load: string, t: Timing) => rows.push(`| ${mode} | ${load} | ${Math.round(t.perSecond).toLocaleString('en-US')} | ${t.p50.toFixed(2)} ms | ${t.p99.toFixed(2)} ms | ${t.p999.toFixed(2)} ms | ${t.max.toFixed(1)} ms | ${t.over25} / ${t.over100} |`);
  try {
    for (const mode of ['append', 'zeros'] as const) row(mode === 'append' ? 'append' : 'over zeros', 'alone', timeWrites(dir, mode, seconds));
    const writer = fork(fileURLToPath(import.meta.url), ['--writer', join(dir, 'background'), String(tableMib)], { stdio: 'inherit' });
    try {
      for (const mode of ['append', 'zeros', 'append', 'zeros'] as const) row(mode === 'append' ? 'append' : 'over zeros', 'beside the writer', timeWrites(dir, mode, seconds));
    } finally {
      writer.kill('SIGKILL');
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  console.log(`synced 4 KiB writes (write + fdatasync), ${seconds} s each, in ${dir}; the background writer: ${tableMib} MiB files, about 50 MB/s\n`);
  console.log('| write | load | writes/s | p50 | p99 | p99.9 | max | over 25 / 100 ms |');
  console.log('|---|---|---:|---:|---:|---:|---:|---:|');
  for (const r of rows) console.log(r);
}

if (process.argv[2] === '--writer') backgroundWriter(process.argv[3]!, Number(process.argv[4]));
else main();
