/**
 * Where a slow answer's time went, seen from outside the server: a sampler in the load
 * generator's process reads, every few milliseconds, what the kernel says of the
 * server's JavaScript thread (/proc/<pid>/task/<pid>/schedstat: time on a CPU, time
 * runnable but waiting for one) and of the machine (/proc/stat: time stolen by the
 * hypervisor, idle, waiting on I/O). Over the span of a slow answer this tells a thread
 * that was working (on CPU) from one that was starved (runnable, waiting) and from one
 * that was waiting on the disk or on nothing (neither).
 */
import { readFileSync, readdirSync, readlinkSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { threadCpu } from './proc.js';

interface Sample {
  at: number;
  /** the thread's time on a CPU and waiting in a run queue, in ns. */
  onCpuNs: number;
  waitNs: number;
  /** the machine's steal, idle and I/O-wait time summed over its CPUs, in clock ticks. */
  steal: number;
  idle: number;
  iowait: number;
  /** what the JavaScript thread was doing when it was neither running nor waiting for events: its syscall and kernel stack; null otherwise. */
  blocked: string | null;
  /** the server's other threads in uninterruptible sleep (disk), by name. */
  diskWaits: string[];
  /** CPU time of the server's threads by name (their time on a CPU, in ns), and of this process (the load generator). */
  threadNs: Record<string, number>;
  generatorNs: number;
}

export interface SchedSpan {
  ms: number;
  /** of that span: the server's JavaScript thread on a CPU, and runnable but waiting for one. */
  mainOnCpuMs: number;
  mainWaitingMs: number;
  /** the machine's CPU time in the span (both CPUs summed): stolen, idle, waiting on I/O. */
  stealMs: number;
  idleMs: number;
  iowaitMs: number;
  /** how many samples found the JavaScript thread blocked, by syscall and kernel stack. */
  blocked: Record<string, number>;
  /** how many samples found other threads in uninterruptible sleep, by thread name. */
  diskWaits: Record<string, number>;
  /**
   * CPU time in the span of the server's threads by name (the JavaScript thread is
   * MainThread, LevelDB's thread and its background compaction apl-level, V8's helpers
   * V8Worker, libuv's pool libuv-worker) and of the load generator (this process, the
   * sampler's own reads of /proc included), in ms: who had the CPUs while the
   * JavaScript thread waited for one.
   */
  threadsMs: Record<string, number>;
  samples: number;
}

/** x86-64 syscall numbers that mean "waiting for events" (the idle loop), and names for the common others. */
const IDLE_SYSCALLS = new Set(['232', '281', '441']);
const SYSCALL_NAMES: Record<string, string> = {
  0: 'read', 1: 'write', 3: 'close', 9: 'mmap', 10: 'mprotect', 11: 'munmap', 17: 'pread64', 18: 'pwrite64', 20: 'writev',
  28: 'madvise', 74: 'fsync', 75: 'fdatasync', 285: 'fallocate', 295: 'preadv', 296: 'pwritev', 202: 'futex', 257: 'openat', 426: 'io_uring_enter',
};

const TICK_MS = 10; // USER_HZ is 100 on Linux

export class SchedSampler {
  private readonly samples: Sample[] = [];
  private readonly timer: NodeJS.Timeout;

  constructor(private readonly pid: number, private readonly intervalMs = 20, private readonly keep = 60_000) {
    this.timer = setInterval(() => this.sample(), intervalMs);
    this.timer.unref();
    this.sample();
  }

  stop(): void {
    clearInterval(this.timer);
  }

  /** The span [from, to] (performance.now() times of this process), from the samples around it; null when not sampled. */
  span(from: number, to: number): SchedSpan | null {
    let before: Sample | null = null;
    for (let k = this.samples.length - 1; k >= 0 && before === null; k--) if (this.samples[k]!.at <= from) before = this.samples[k]!;
    // The last sample may be a little before `to` when the generator's loop was busy.
    const after = this.samples.find((s) => s.at >= to) ?? this.samples.at(-1) ?? null;
    if (before === null || after === null) return null;
    const blocked: Record<string, number> = {};
    const diskWaits: Record<string, number> = {};
    let samples = 0;
    for (const x of this.samples) {
      if (x.at < before.at || x.at > after.at) continue;
      samples++;
      if (x.blocked !== null) blocked[x.blocked] = (blocked[x.blocked] ?? 0) + 1;
      for (const t of x.diskWaits) diskWaits[t] = (diskWaits[t] ?? 0) + 1;
    }
    const threadsMs: Record<string, number> = {};
    for (const [name, ns] of Object.entries(after.threadNs)) {
      const ms = (ns - (before.threadNs[name] ?? 0)) / 1e6;
      if (ms > 0) threadsMs[name] = ms;
    }
    threadsMs['load generator'] = (after.generatorNs - before.generatorNs) / 1e6;
    return {
      blocked, diskWaits, samples, threadsMs,
      ms: after.at - before.at,
      mainOnCpuMs: (after.onCpuNs - before.onCpuNs) / 1e6,
      mainWaitingMs: (after.waitNs - before.waitNs) / 1e6,
      stealMs: (after.steal - before.steal) * TICK_MS,
      idleMs: (after.idle - before.idle) * TICK_MS,
      iowaitMs: (after.iowait - before.iowait) * TICK_MS,
    };
  }

  /**
   * The kernel's account summed over many spans (the slow answers of a run): spans that
   * overlap, or lie closer than two samples apart, are merged first, so that no stretch
   * of time (no interval between two samples) is counted twice.
   */
  spans(list: { from: number; to: number }[]): SchedSpan | null {
    const merged: { from: number; to: number }[] = [];
    for (const s of [...list].sort((x, y) => x.from - y.from)) {
      const last = merged.at(-1);
      if (last !== undefined && s.from <= last.to + 2 * this.intervalMs) last.to = Math.max(last.to, s.to);
      else merged.push({ ...s });
    }
    let sum: SchedSpan | null = null;
    for (const m of merged) {
      const s = this.span(m.from, m.to);
      if (s === null) continue;
      if (sum === null) {
        sum = s;
        continue;
      }
      sum.ms += s.ms;
      sum.mainOnCpuMs += s.mainOnCpuMs;
      sum.mainWaitingMs += s.mainWaitingMs;
      sum.stealMs += s.stealMs;
      sum.idleMs += s.idleMs;
      sum.iowaitMs += s.iowaitMs;
      sum.samples += s.samples;
      for (const [k, n] of Object.entries(s.blocked)) sum.blocked[k] = (sum.blocked[k] ?? 0) + n;
      for (const [k, n] of Object.entries(s.diskWaits)) sum.diskWaits[k] = (sum.diskWaits[k] ?? 0) + n;
      for (const [k, ms] of Object.entries(s.threadsMs)) sum.threadsMs[k] = (sum.threadsMs[k] ?? 0) + ms;
    }
    return sum;
  }

  private sample(): void {
    let onCpuNs: number;
    let waitNs: number;
    try {
      [onCpuNs, waitNs] = readFileSync(`/proc/${this.pid}/task/${this.pid}/schedstat`, 'utf8').split(' ').map(Number) as [number, number];
    } catch {
      return; // the server has gone (a restart); the next one is sampled by a new sampler
    }
    // cpu  user nice system idle iowait irq softirq steal guest guest_nice
    const cpu = readFileSync('/proc/stat', 'utf8').slice(0, 200).split('\n')[0]!.trim().split(/\s+/).slice(1).map(Number);
    const usage = process.cpuUsage();
    this.samples.push({
      at: performance.now(), onCpuNs, waitNs, idle: cpu[3]!, iowait: cpu[4]!, steal: cpu[7]!, blocked: this.mainBlocked(), diskWaits: this.diskWaits(),
      threadNs: this.threadNs(), generatorNs: (usage.user + usage.system) * 1000,
    });
    if (this.samples.length > this.keep) this.samples.splice(0, this.samples.length - this.keep);
  }

  private mainBlocked(): string | null {
    const task = `/proc/${this.pid}/task/${this.pid}`;
    try {
      const nr = readFileSync(`${task}/syscall`, 'utf8').split(' ')[0]!.trim();
      if (nr === 'running' || IDLE_SYSCALLS.has(nr)) return null;
      const stack = readFileSync(`${task}/stack`, 'utf8').split('\n').slice(0, 3).map((l) => l.replace(/^\[<\w+>\] /, '').replace(/\+0x.*$/, '')).filter(Boolean);
      return `${SYSCALL_NAMES[nr] ?? `syscall ${nr}`} [${stack.join(' < ')}]`;
    } catch {
      return null;
    }
  }

  /** The server's threads' time on a CPU, summed by thread name. A thread that ended no longer counts. */
  private threadNs(): Record<string, number> {
    const out: Record<string, number> = {};
    for (const { name, ns } of threadCpu(this.pid)) out[name] = (out[name] ?? 0) + ns;
    return out;
  }

  private diskWaits(): string[] {
    const out: string[] = [];
    try {
      for (const tid of readdirSync(`/proc/${this.pid}/task`)) {
        const stat = readFileSync(`/proc/${this.pid}/task/${tid}/stat`, 'utf8');
        const close = stat.lastIndexOf(')');
        if (stat[close + 2] !== 'D') continue;
        const where = this.inSyscall(tid);
        if (where !== 'running') out.push(`${stat.slice(stat.indexOf('(') + 1, close)} ${where}`); // running by the time it was read: not a disk sleep
      }
    } catch {
      // a thread ended between the listing and the read
    }
    return out;
  }

  /** A thread's syscall and the file it is on (its first argument, when that is a descriptor), e.g. "fdatasync wal/<16 digits>.wal". */
  private inSyscall(tid: string): string {
    try {
      const [nr, arg] = readFileSync(`/proc/${this.pid}/task/${tid}/syscall`, 'utf8').trim().split(' ');
      // "running": the thread was on a CPU when read (its state changed since), in no syscall.
      if (nr === 'running') return 'running';
      const name = SYSCALL_NAMES[nr!] ?? `syscall ${nr}`;
      const fd = Number.parseInt(arg ?? '', 16);
      if (!Number.isSafeInteger(fd) || fd < 0 || fd > 65535) return name;
      const path = readlinkSync(`/proc/${this.pid}/fd/${fd}`);
      return `${name} ${path.split('/').slice(-2).join('/').replace(/[0-9a-f]{6,}/g, (d) => `<${d.length} digits>`)}`;
    } catch {
      return '?';
    }
  }
}

export function describeSpan(s: SchedSpan | null): string {
  if (s === null) return 'not sampled';
  const cpu = Object.entries(s.threadsMs).sort((a, b) => b[1] - a[1]).map(([k, ms]) => `${k} ${ms.toFixed(0)}`).join(', ');
  return `over its ${s.ms.toFixed(0)} ms the JavaScript thread ran ${s.mainOnCpuMs.toFixed(0)} ms and waited for a CPU ${s.mainWaitingMs.toFixed(0)} ms; the machine's two CPUs were stolen ${s.stealMs} ms, idle ${s.idleMs} ms, waiting on I/O ${s.iowaitMs} ms; CPU ms by thread: ${cpu}; of ${s.samples} samples, the JavaScript thread blocked in ${tally(s.blocked)}; other threads in disk sleep: ${tally(s.diskWaits)}`;
}

function tally(counts: Record<string, number>): string {
  const e = Object.entries(counts).sort((a, b) => b[1] - a[1]);
  return e.length === 0 ? 'none' : e.map(([k, n]) => `${k} ×${n}`).join(', ');
}
