/**
 * A process's resident memory and CPU time, read from /proc from outside it: all its
 * threads, or thread by thread, with how often each went to sleep. Nothing here loads
 * the node's packages, so a benchmark can use it before its options are checked.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { delimiter, join } from 'node:path';

export function residentBytes(pid: number): number {
  const m = /^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) * 1024 : NaN;
}

/** Clock ticks per second, the unit of the CPU times in /proc/<pid>/stat. */
const CLOCK_TICKS = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;

/**
 * The fields of a `stat` file of /proc after the command name, from field 3 on: [0] is
 * the state, [1] the parent's pid, [11] and [12] the user and system time, [13] and
 * [14] those of the children waited for. The command name (field 2) may hold spaces,
 * so the fields are split from its closing parenthesis.
 */
function statFields(path: string): string[] {
  const stat = readFileSync(path, 'utf8');
  return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
}

/**
 * User and system CPU time of a process, all threads, in seconds (fields 14 and 15 of
 * /proc/<pid>/stat); or of one of its threads (the main thread's id is the pid).
 */
export function cpuSeconds(pid: number, thread?: number): number {
  return cpuOf(statFields(thread === undefined ? `/proc/${pid}/stat` : `/proc/${pid}/task/${thread}/stat`));
}

/** The user and system time in a stat file's fields (statFields), in seconds. */
const cpuOf = (fields: string[]): number => (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS;

/** CPU seconds of the ended children that `pid` has waited for (cutime and cstime, fields 16 and 17 of /proc/<pid>/stat). */
export function reapedCpuSeconds(pid: number): number {
  const fields = statFields(`/proc/${pid}/stat`);
  return (Number(fields[13]) + Number(fields[14])) / CLOCK_TICKS;
}

/** The stat fields (statFields) of every process alive now; one that ends while the list is read is left out. */
function* processes(): Generator<{ pid: number; fields: string[] }> {
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    let fields: string[];
    try {
      fields = statFields(`/proc/${entry}/stat`);
    } catch {
      continue; // it ended after it was listed
    }
    yield { pid: Number(entry), fields };
  }
}

/** The processes whose parent is `pid`, alive now. */
export function childrenOf(pid: number): number[] {
  const children: number[] = [];
  for (const p of processes()) if (Number(p.fields[1]) === pid) children.push(p.pid);
  return children;
}

/**
 * CPU seconds of the processes whose parent is `pid`, alive now, each read from the one
 * stat file that names its parent. A child that has ended is not among them: once its
 * parent has waited for it, its time is in the parent's reapedCpuSeconds.
 */
export function childrenCpuSeconds(pid: number): number {
  let sum = 0;
  for (const p of processes()) if (Number(p.fields[1]) === pid) sum += cpuOf(p.fields);
  return sum;
}

/** CPU seconds of a Node.js process by thread kind. */
export interface ThreadCpu {
  /** the JavaScript thread. */
  main: number;
  /** V8's helper threads (`V8Worker`): concurrent marking and sweeping, compilation. */
  v8: number;
  /**
   * every other thread: libuv's pool (file system calls, LevelDB reads and batches,
   * crypto), LevelDB's own background thread, which flushes memtables and compacts, and
   * the node's worker threads (the agent plane's and the state store's; threadCpuByName
   * tells them apart).
   */
  native: number;
}

/** A thread's CPU time in seconds, and how many times it went to sleep (voluntary context switches). */
export interface ThreadUse {
  seconds: number;
  sleeps: number;
}

/**
 * CPU seconds and sleeps of a Node.js process by thread name (the JavaScript thread
 * as `main`): the node's own threads (`apl-agent`, the agent plane's; `apl-level`,
 * the state store's), libuv's pool with LevelDB's background thread (`libuv-worker`),
 * V8's helpers (`V8Worker`). A thread that sleeps must be woken for its next work,
 * which costs the waker too (`npm run bench -- wake`). Threads alive now, as
 * threadCpuSeconds.
 */
export function threadCpuByName(pid: number): Record<string, ThreadUse> {
  const by: Record<string, ThreadUse> = {};
  for (const { tid, name, ns, sleeps } of threadCpu(pid, { sleeps: true })) {
    const u = (by[tid === pid ? 'main' : name] ??= { seconds: 0, sleeps: 0 });
    u.seconds += ns / 1e9;
    u.sleeps += sleeps;
  }
  return by;
}

/** The threads of a node process, as the benchmarks name them after their tables. */
export const NODE_THREADS = "`main` is the JavaScript thread, `apl-agent` the agent plane's, `apl-level` the state store's; `libuv-worker` libuv's pool with LevelDB's compaction; `V8Worker` V8's helpers";

/** `main 0.130 ms, slept 1.9×; …`: CPU and sleeps per request by thread (cpuPerRequestByThread). */
export function describeThreads(byThread: readonly { name: string; ms: number; sleeps: number }[]): string {
  return byThread.map((x) => `${x.name} ${x.ms.toFixed(3)} ms, slept ${x.sleeps.toFixed(1)}×`).join('; ');
}

/**
 * What each thread spent per request between two readings of threadCpuByName: ms of
 * CPU and sleeps, the costliest first; threads under 0.001 ms per request are left out.
 */
export function cpuPerRequestByThread(before: Record<string, ThreadUse>, after: Record<string, ThreadUse>, requests: number): { name: string; ms: number; sleeps: number }[] {
  return Object.entries(after)
    .map(([name, u]) => ({
      name,
      ms: ((u.seconds - (before[name]?.seconds ?? 0)) * 1000) / requests,
      sleeps: (u.sleeps - (before[name]?.sleeps ?? 0)) / requests,
    }))
    .filter((x) => x.ms >= 0.001)
    .sort((x, y) => y.ms - x.ms);
}

/** A thread that has ended no longer counts, so the figures are of the threads alive now. */
export function threadCpuSeconds(pid: number): ThreadCpu {
  const t: ThreadCpu = { main: 0, v8: 0, native: 0 };
  for (const { tid, name, ns } of threadCpu(pid)) {
    const s = ns / 1e9;
    if (tid === pid) t.main += s;
    else if (name === 'V8Worker') t.v8 += s;
    else t.native += s;
  }
  return t;
}

/**
 * Each live thread of a process: its id, its name, its time on a CPU in ns (the
 * kernel's schedstat, not rounded to clock ticks) and how many times it went to sleep
 * (its voluntary context switches; NaN unless `sleeps`, which reads one more file per
 * thread). A thread that ends between the listing and the read is left out; a process
 * that has gone has none.
 */
export function threadCpu(pid: number, opts: { sleeps?: boolean } = {}): { tid: number; name: string; ns: number; sleeps: number }[] {
  let tids: string[];
  try {
    tids = readdirSync(`/proc/${pid}/task`);
  } catch {
    return [];
  }
  const out: { tid: number; name: string; ns: number; sleeps: number }[] = [];
  for (const tid of tids) {
    try {
      const name = readFileSync(`/proc/${pid}/task/${tid}/comm`, 'utf8').trim();
      const ns = Number(readFileSync(`/proc/${pid}/task/${tid}/schedstat`, 'utf8').split(' ')[0]);
      const sleeps = opts.sleeps ? Number(/^voluntary_ctxt_switches:\s+(\d+)$/m.exec(readFileSync(`/proc/${pid}/task/${tid}/status`, 'utf8'))?.[1] ?? NaN) : NaN;
      out.push({ tid: Number(tid), name, ns, sleeps });
    } catch {
      // the thread ended between the listing and the read
    }
  }
  return out;
}

/** The first file named `program` in a directory of the PATH, or null (a program a benchmark runs, found as a shell finds it). */
export function onPath(program: string): string | null {
  for (const d of (process.env.PATH ?? '').split(delimiter)) {
    if (d !== '' && existsSync(join(d, program))) return join(d, program);
  }
  return null;
}
