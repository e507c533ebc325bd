/**
 * A closed-loop load generator: `concurrency` requests in flight, each answered one
 * followed at once by the next. It runs in the benchmark's process; the server is
 * another process (see server.ts), so the two never share a thread. HTTP goes through
 * undici pools with keep-alive connections, one connection per request in flight.
 */
import { readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { Pool } from 'undici';
import { percentile } from './percentile.js';
import type { Mix, RequestKind } from './workload.js';

export interface LoadOptions {
  /** agent-plane base URLs; requests go to them in turn. */
  urls: string[];
  ca: string;
  concurrency: number;
  mix: Mix;
  /** stop after this many intents (reads are not counted)... */
  intents?: number;
  /** ...or after this many milliseconds, whichever comes first. */
  durationMs?: number;
  /** called after every `windowIntents` intents with the window's figures. */
  windowIntents?: number;
  onWindow?: (w: LoadStats) => void | Promise<void>;
  /**
   * the first `warmupIntents` intents (on the same connections) form a window of their
   * own, given to `onWarmup`: connections opened, server code compiled. They count
   * toward `intents` and the whole run's figures, and the windows start after them.
   */
  warmupIntents?: number;
  onWarmup?: (w: LoadStats) => void | Promise<void>;
}

export interface LoadStats {
  requests: number;
  intents: number;
  reads: number;
  seconds: number;
  intentsPerSecond: number;
  /** intent latency in milliseconds. */
  p50: number;
  p99: number;
  max: number;
  /** when the slowest intent of the window was sent, in seconds since the load began. */
  maxAtSeconds: number;
  /** the same moment as this process's performance.now(). */
  maxSentAt: number;
  readP99: number;
  /** answers by status code, and verdicts of the 200s. */
  statuses: Record<string, number>;
  verdicts: Record<string, number>;
}

class Window {
  readonly intentMs: number[] = [];
  readonly readMs: number[] = [];
  readonly statuses: Record<string, number> = {};
  readonly verdicts: Record<string, number> = {};
  readonly start = performance.now();
  private maxMs = -1;
  private maxSentAt = 0;

  constructor(private readonly loadStart = performance.now()) {}

  record(kind: RequestKind, ms: number, status: number, verdict: string | null, sentAt: number): void {
    (kind === 'read' ? this.readMs : this.intentMs).push(ms);
    if (kind !== 'read' && ms > this.maxMs) {
      this.maxMs = ms;
      this.maxSentAt = sentAt;
    }
    this.statuses[status] = (this.statuses[status] ?? 0) + 1;
    if (verdict !== null) this.verdicts[verdict] = (this.verdicts[verdict] ?? 0) + 1;
  }

  stats(): LoadStats {
    const seconds = (performance.now() - this.start) / 1000;
    const lat = Float64Array.from(this.intentMs).sort();
    const reads = Float64Array.from(this.readMs).sort();
    return {
      requests: lat.length + reads.length,
      intents: lat.length,
      reads: reads.length,
      seconds,
      intentsPerSecond: lat.length / seconds,
      p50: percentile(lat, 50),
      p99: percentile(lat, 99),
      max: lat.length === 0 ? 0 : lat[lat.length - 1]!,
      maxAtSeconds: (this.maxSentAt - this.loadStart) / 1000,
      maxSentAt: this.maxSentAt,
      readP99: percentile(reads, 99),
      statuses: this.statuses,
      verdicts: this.verdicts,
    };
  }
}

/** Runs the load and returns the figures of the whole run. */
export async function runLoad(o: LoadOptions): Promise<LoadStats> {
  const ca = readFileSync(o.ca);
  const pools = o.urls.map((u) => new Pool(u, { connections: Math.max(1, Math.ceil(o.concurrency / o.urls.length)), pipelining: 1, connect: { ca } }));
  const total = new Window();
  const loadStart = total.start;
  let window = new Window(loadStart);
  let sent = 0;
  let intentsSent = 0;
  let windowed = 0;
  const warmupIntents = o.warmupIntents ?? 0;
  let warmed = 0;
  const deadline = o.durationMs === undefined ? Infinity : performance.now() + o.durationMs;
  const more = () => (o.intents === undefined || intentsSent < o.intents) && performance.now() < deadline;
  let failure: Error | null = null;
  const worker = async (k: number) => {
    while (more() && failure === null) {
      const req = o.mix.next();
      const pool = pools[(sent + k) % pools.length]!;
      sent++;
      if (req.kind !== 'read') intentsSent++;
      const t0 = performance.now();
      const res = await pool.request({ method: req.method, path: req.path, headers: req.headers, ...(req.body === undefined ? {} : { body: req.body }) });
      const text = await res.body.text();
      const ms = performance.now() - t0;
      const verdict = req.method === 'POST' && res.statusCode === 200 ? verdictOf(text) : null;
      o.mix.observe(req, res.statusCode, text);
      total.record(req.kind, ms, res.statusCode, verdict, t0);
      window.record(req.kind, ms, res.statusCode, verdict, t0);
      if (req.kind !== 'read' && warmed < warmupIntents) {
        if (++warmed === warmupIntents) {
          const done = window;
          window = new Window(loadStart);
          await o.onWarmup?.(done.stats());
        }
      } else if (o.onWindow && o.windowIntents && req.kind !== 'read' && ++windowed % o.windowIntents === 0) {
        const done = window;
        window = new Window(loadStart);
        await o.onWindow(done.stats());
      }
    }
  };
  try {
    await Promise.all(Array.from({ length: o.concurrency }, (_, k) => worker(k).catch((err: Error) => { failure ??= err; })));
  } finally {
    await Promise.all(pools.map((p) => p.close()));
  }
  if (failure) throw failure;
  return total.stats();
}

export interface OpenLoopOptions {
  /** agent-plane base URLs; requests go to them in turn. */
  urls: string[];
  ca: string;
  mix: Mix;
  /** requests sent per second, on a fixed schedule whatever the answers do. */
  requestsPerSecond: number;
  durationMs: number;
  /**
   * connections per URL, all opened before the schedule starts (a TLS handshake in the
   * middle of it would be the generator's cost, not the server's); a request due while
   * all are busy waits in the client's queue, and that wait counts.
   */
  connections: number;
  /** intents answered slower than this (from when they were due) are listed in the result's `slow`. */
  slowMs?: number;
}

/** What an open loop adds to the figures: how late the generator itself sent, and the slow answers. */
export interface OpenLoopStats extends LoadStats {
  /** how late requests left after they were due, in ms (the generator's own delay, counted in the latency). */
  sendLateP99: number;
  sendLateMax: number;
  /** the intents slower than `slowMs`: when each was due (performance.now()) and how long it took. */
  slow: { at: number; ms: number }[];
}

/**
 * An open-loop load: request k is due at `k / requestsPerSecond` seconds, sent then
 * whether or not earlier ones were answered. Latency is measured from when a request
 * was due, not from when it left, so a slow server is not excused by the generator
 * having waited for it (the coordinated omission of a closed loop).
 */
export async function runOpenLoop(o: OpenLoopOptions): Promise<OpenLoopStats> {
  const ca = readFileSync(o.ca);
  const pools = o.urls.map((u) => new Pool(u, { connections: o.connections, pipelining: 1, connect: { ca } }));
  await Promise.all(pools.flatMap((p) => Array.from({ length: o.connections }, async () => {
    await (await p.request({ method: 'GET', path: '/healthz' })).body.text();
  })));
  const total = new Window();
  const start = total.start;
  const intervalMs = 1000 / o.requestsPerSecond;
  const pending = new Set<Promise<void>>();
  const late: number[] = [];
  const slow: { at: number; ms: number }[] = [];
  let failure: Error | null = null;
  try {
    for (let k = 0; failure === null; k++) {
      const due = start + k * intervalMs;
      if (due - start >= o.durationMs) break;
      const wait = due - performance.now();
      if (wait >= 1) await new Promise((r) => setTimeout(r, wait));
      late.push(Math.max(0, performance.now() - due));
      const req = o.mix.next();
      const pool = pools[k % pools.length]!;
      const p = (async () => {
        const res = await pool.request({ method: req.method, path: req.path, headers: req.headers, ...(req.body === undefined ? {} : { body: req.body }) });
        const text = await res.body.text();
        const verdict = req.method === 'POST' && res.statusCode === 200 ? verdictOf(text) : null;
        o.mix.observe(req, res.statusCode, text);
        const ms = performance.now() - due;
        total.record(req.kind, ms, res.statusCode, verdict, due);
        if (req.kind !== 'read' && ms > (o.slowMs ?? Infinity)) slow.push({ at: due, ms });
      })().catch((err: Error) => { failure ??= err; });
      pending.add(p);
      void p.finally(() => pending.delete(p));
    }
    await Promise.all(pending);
  } finally {
    await Promise.all(pools.map((p) => p.close()));
  }
  if (failure) throw failure;
  const lateSorted = Float64Array.from(late).sort();
  return { ...total.stats(), sendLateP99: percentile(lateSorted, 99), sendLateMax: lateSorted.at(-1) ?? 0, slow };
}

function verdictOf(text: string): string {
  const m = /"verdict":"(\w+)"/.exec(text);
  return m ? m[1]! : 'unknown';
}
