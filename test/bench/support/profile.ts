/**
 * Reading a V8 CPU profile (`node --cpu-prof`): where the server's CPU went. Self time
 * is summed per function and per area (our packages, each dependency, Node's own
 * modules, the garbage collector); the inclusive time of chosen functions (the JSON
 * parser, say) is the time spent in them and everything they called.
 *
 * Also reading a sampling heap profile (support/alloc-sampler.ts): where the server
 * allocated, per function and per area, in the same form.
 */
import { readFileSync } from 'node:fs';

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}

interface CpuProfile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
  startTime: number;
  endTime: number;
}

export interface Summary {
  /** milliseconds of samples that were not idle. */
  busyMs: number;
  top: { name: string; area: string; ms: number; share: number }[];
  areas: { area: string; ms: number; share: number }[];
  inclusive: Record<string, { ms: number; share: number }>;
}

/** The area a frame belongs to: a package of ours, a dependency, Node itself, or V8. */
export function areaOf(url: string, fn: string): string {
  if (url === '') return fn.startsWith('(') ? fn : '(native)';
  const dep = /node_modules\/((@[^/]+\/)?[^/]+)/.exec(url);
  if (dep) return dep[1]!;
  const ours = /packages\/([^/]+)\//.exec(url);
  if (ours) return `@apl/${ours[1]}`;
  if (url.startsWith('node:')) return 'node';
  return url;
}

/** A frame as the summaries name it: the function, and its file's last two path parts with the line. */
function frameName(cf: { functionName: string; url: string; lineNumber: number }): string {
  return `${cf.functionName || '(anonymous)'} ${cf.url.split('/').slice(-2).join('/')}:${cf.lineNumber + 1}`;
}

export function summarize(file: string, inclusive: Record<string, (fn: string, url: string) => boolean> = {}, topN = 15): Summary {
  const p = JSON.parse(readFileSync(file, 'utf8')) as CpuProfile;
  const byId = new Map(p.nodes.map((n) => [n.id, n]));
  const self = new Map<number, number>();
  p.samples.forEach((id, k) => self.set(id, (self.get(id) ?? 0) + (p.timeDeltas[k] ?? 0) / 1000));
  const isIdle = (n: ProfileNode) => n.callFrame.functionName === '(idle)';
  let busyMs = 0;
  const perFn = new Map<string, { area: string; ms: number }>();
  const perArea = new Map<string, number>();
  for (const [id, ms] of self) {
    const n = byId.get(id)!;
    if (isIdle(n)) continue;
    busyMs += ms;
    const area = areaOf(n.callFrame.url, n.callFrame.functionName);
    const name = frameName(n.callFrame);
    const f = perFn.get(name) ?? { area, ms: 0 };
    f.ms += ms;
    perFn.set(name, f);
    perArea.set(area, (perArea.get(area) ?? 0) + ms);
  }
  // Inclusive time: a node's own samples and its descendants', counted once per matching subtree.
  const total = new Map<number, number>();
  const totalOf = (id: number): number => {
    const known = total.get(id);
    if (known !== undefined) return known;
    const n = byId.get(id)!;
    let t = self.get(id) ?? 0;
    for (const c of n.children ?? []) t += totalOf(c);
    total.set(id, t);
    return t;
  };
  const incl: Summary['inclusive'] = {};
  for (const [label, match] of Object.entries(inclusive)) {
    let ms = 0;
    const walk = (id: number) => {
      const n = byId.get(id)!;
      if (match(n.callFrame.functionName, n.callFrame.url)) {
        ms += totalOf(id);
        return;
      }
      for (const c of n.children ?? []) walk(c);
    };
    walk(p.nodes[0]!.id);
    incl[label] = { ms, share: ms / busyMs };
  }
  const share = (ms: number) => ms / busyMs;
  return {
    busyMs,
    top: [...perFn].sort((a, b) => b[1].ms - a[1].ms).slice(0, topN).map(([name, f]) => ({ name, area: f.area, ms: f.ms, share: share(f.ms) })),
    areas: [...perArea].sort((a, b) => b[1] - a[1]).map(([area, ms]) => ({ area, ms, share: share(ms) })),
    inclusive: incl,
  };
}

export function printSummary(s: Summary, print: (line: string) => void = console.log): void {
  const pct = (x: number) => `${(100 * x).toFixed(1)} %`;
  print(`CPU busy ${(s.busyMs / 1000).toFixed(1)} s`);
  for (const [label, v] of Object.entries(s.inclusive)) print(`  ${label}: ${pct(v.share)} (${(v.ms / 1000).toFixed(2)} s, inclusive)`);
  print('  by area (self time):');
  for (const a of s.areas.slice(0, 12)) print(`    ${pct(a.share).padStart(7)}  ${a.area}`);
  print('  top functions (self time):');
  for (const f of s.top) print(`    ${pct(f.share).padStart(7)}  ${f.name}`);
}

interface HeapProfileNode {
  callFrame: { functionName: string; url: string; lineNumber: number };
  selfSize: number;
  children: HeapProfileNode[];
}

export interface AllocationSummary {
  /** bytes allocated while sampling (V8 scales its samples to an estimate of the whole). */
  bytes: number;
  top: { name: string; area: string; bytes: number; share: number }[];
  areas: { area: string; bytes: number; share: number }[];
}

export function summarizeAllocations(file: string, topN = 15): AllocationSummary {
  const root = (JSON.parse(readFileSync(file, 'utf8')) as { head: HeapProfileNode }).head;
  const perFn = new Map<string, { area: string; bytes: number }>();
  const perArea = new Map<string, number>();
  let bytes = 0;
  const stack = [root];
  while (stack.length > 0) {
    const n = stack.pop()!;
    stack.push(...n.children);
    if (n.selfSize === 0) continue;
    const area = areaOf(n.callFrame.url, n.callFrame.functionName);
    const name = frameName(n.callFrame);
    const f = perFn.get(name) ?? { area, bytes: 0 };
    f.bytes += n.selfSize;
    perFn.set(name, f);
    perArea.set(area, (perArea.get(area) ?? 0) + n.selfSize);
    bytes += n.selfSize;
  }
  return {
    bytes,
    top: [...perFn].sort((a, b) => b[1].bytes - a[1].bytes).slice(0, topN).map(([name, f]) => ({ name, area: f.area, bytes: f.bytes, share: f.bytes / bytes })),
    areas: [...perArea].sort((a, b) => b[1] - a[1]).map(([area, b]) => ({ area, bytes: b, share: b / bytes })),
  };
}

export function printAllocations(s: AllocationSummary, requests: number, print: (line: string) => void = console.log): void {
  const pct = (x: number) => `${(100 * x).toFixed(1)} %`;
  print(`allocated ${(s.bytes / 2 ** 20).toFixed(0)} MB while sampled, about ${(s.bytes / requests / 1024).toFixed(0)} KB per request`);
  print('  by area (allocated in the function itself):');
  for (const a of s.areas.slice(0, 12)) print(`    ${pct(a.share).padStart(7)}  ${a.area}`);
  print('  top functions:');
  for (const f of s.top) print(`    ${pct(f.share).padStart(7)}  ${f.name}`);
}
