/**
 * The agent plane on a thread of its own (`agent_plane_thread`, on by default). The
 * thread (agent-thread-worker.ts) owns the plane's listener: TLS, HTTP, the body and
 * its parse, the schemas, the request lines and their metrics. Each request reaches
 * the node's thread as one call to the backend (gateway.ts), which alone reads state,
 * verifies attestations, holds the rate limits and proposes; its answer goes back as
 * text. Measured with `npm run bench -- frontend`, the front end is about a quarter of
 * what a request costs the node's thread, which runs Raft and `apply` and, on a small
 * machine, is the one that runs out first (docs/BENCHMARKS.md).
 *
 * Calls and answers travel in batches, one message per turn of the sender's event
 * loop, since waking the other thread is what a message costs most. Nothing is queued
 * without bound: a call exists only for a request the listener took, and the listener
 * takes at most `http.connections_max` connections, each with one request at a time.
 *
 * If the thread stops unexpectedly the node says so in its log (fatal) and serves no
 * agents until restarted; the admin plane stays up to say why.
 */
import { Worker } from 'node:worker_threads';
import type { Config } from './config.js';
import { ApiError } from './errors.js';
import type { AgentBackend, Answer, IntentCall, ReadCall } from './gateway.js';
import type { MetricsJson } from './metrics.js';
import { SpareWorker } from './spare-worker.js';

/** What the thread is started with. */
export interface AgentThreadData {
  host: string;
  port: number;
  /** the agent plane's address as the configuration advertises it (listenerUrl), if it does. */
  advertised: string | null;
  cert: Buffer;
  key: Buffer;
  http: Config['http'];
  bodyBytesMax: number;
  entriesPerIntentMax: number;
  /** the agent plane's OpenAPI document, to which the thread adds the address it bound. */
  openapiFile: string;
  logLevel: string;
  nodeId: string;
}

/** A request's call to the backend, as the thread posts it. */
export type AgentCall = { id: number } & (
  | { method: 'intent'; arg: IntentCall }
  | { method: 'read'; arg: ReadCall }
  | { method: 'health'; arg: 'healthz' | 'readyz' }
);

export type FromAgentThread =
  | { kind: 'listening'; url: string }
  | { kind: 'failed'; message: string; code: string | null; syscall?: string; port?: number; address?: string }
  | { kind: 'out'; calls: AgentCall[]; lines: string }
  | { kind: 'metrics'; id: number; json: MetricsJson; error?: string }
  | { kind: 'closed' };

export type ToAgentThread =
  | { kind: 'start'; data: AgentThreadData }
  | { kind: 'answers'; answers: { id: number; answer: Answer }[] }
  | { kind: 'metrics'; id: number }
  | { kind: 'close' };

/**
 * The thread's compiled file: beside this one, or, where the tests run this module from
 * its TypeScript source, in the package's build output (the test loader does not follow
 * into a worker thread).
 */
const WORKER_URL = new URL(import.meta.url.endsWith('.ts') ? '../dist/agent-thread-worker.js' : './agent-thread-worker.js', import.meta.url);

/**
 * The thread's young generation, in MiB. What it allocates lives for one request; left
 * to V8 it sized the young generation as for the whole process (semi-spaces of 64 MiB
 * on a machine of 24 GiB), and the node's resident memory at 256 intents in flight grew
 * by about 60 MB more than with this bound, at the same throughput.
 */
const YOUNG_GENERATION_MB = 16;

/** The thread, loading its modules; it waits for its settings (a `start` message) before it binds. */
function newWorker(): Worker {
  // execArgv: the thread runs compiled JavaScript and needs none of the process's flags or loaders.
  return new Worker(WORKER_URL, { name: 'apl-agent', execArgv: [], resourceLimits: { maxYoungGenerationSizeMb: YOUNG_GENERATION_MB } });
}

const spare = new SpareWorker(newWorker, (code) => new Error(`the agent plane's thread exited (${code})`));

const INTERNAL_ERROR: Answer = { status: 500, error: 'internal_error', text: JSON.stringify(ApiError.internal().body) };

export class AgentThread {
  private outgoing: { id: number; answer: Answer }[] = [];
  private readonly metricsWaiting = new Map<number, { resolve: (json: MetricsJson) => void; reject: (err: Error) => void }>();
  private metricsIds = 0;
  private closing: Promise<void> | null = null;
  private closed: (() => void) | null = null;
  /** set once the thread has exited: it counts nothing more. */
  private exited = false;

  private constructor(private readonly worker: Worker, readonly url: string, private readonly backend: AgentBackend, private readonly writeLines: (lines: string) => void) {}

  /**
   * Starts the thread now, before the node has read its settings (spare-worker.ts): it
   * loads its modules (Express, the schemas, TLS; about half a second of CPU here)
   * while the node's thread loads its own and opens its stores; `start` then takes it
   * and hands it its settings. main.ts calls this first thing.
   */
  static startEarly(): void {
    spare.start();
  }

  /** Ends a thread `startEarly` started that `start` will not take (`agent_plane_thread: false`). */
  static discardEarly(): void {
    spare.discard();
  }

  /**
   * Starts the thread (or takes the one `startEarly` started) and resolves once it
   * listens, with its address; rejects with the listener's error (an address in use,
   * say) as binding in this thread would.
   * `writeLines` takes the thread's log lines (JSON lines, formatted there);
   * `onFailure` is called if the thread stops without being closed.
   */
  static start(data: AgentThreadData, backend: AgentBackend, writeLines: (lines: string) => void, onFailure: (err: Error) => void): Promise<AgentThread> {
    const taken = spare.take();
    const worker = taken?.worker ?? newWorker();
    worker.ref();
    return new Promise((resolve, reject) => {
      let thread: AgentThread | null = null;
      let reported = false;
      // An error is followed by the exit: either is reported, once.
      const stopped = (err: Error) => {
        if (thread === null) reject(err);
        else if (thread.closing === null && !reported) {
          reported = true;
          onFailure(err);
        }
      };
      if (taken?.failed) {
        stopped(taken.failed);
        return;
      }
      worker.on('error', stopped);
      worker.on('exit', (code) => {
        thread?.gone();
        stopped(new Error(`the agent plane's thread exited (${code})`));
      });
      worker.on('message', (m: FromAgentThread) => {
        if (m.kind === 'listening') {
          thread = new AgentThread(worker, m.url, backend, writeLines);
          resolve(thread);
        } else if (m.kind === 'failed') {
          void worker.terminate();
          // The listener's error as binding here would give it: its code, and what it bound.
          const { message, code, syscall, port, address } = m;
          reject(Object.assign(new Error(message), code === null ? {} : { code }, { syscall, port, address }));
        } else {
          thread?.receive(m);
        }
      });
      worker.postMessage({ kind: 'start', data } satisfies ToAgentThread);
    });
  }

  private receive(m: FromAgentThread): void {
    switch (m.kind) {
      case 'out':
        if (m.lines !== '') this.writeLines(m.lines);
        for (const c of m.calls) this.serve(c);
        return;
      case 'metrics': {
        const w = this.metricsWaiting.get(m.id);
        this.metricsWaiting.delete(m.id);
        if (m.error === undefined) w?.resolve(m.json);
        else w?.reject(new Error(m.error));
        return;
      }
      case 'closed':
        this.closed?.();
        return;
      default:
        return;
    }
  }

  /** The thread has exited: a close waiting for it is done, and a metrics reading gets nothing. */
  private gone(): void {
    this.exited = true;
    this.closed?.();
    for (const w of this.metricsWaiting.values()) w.resolve([]);
    this.metricsWaiting.clear();
  }

  private serve(c: AgentCall): void {
    const answered = c.method === 'intent' ? this.backend.intent(c.arg) : c.method === 'read' ? this.backend.read(c.arg) : this.backend.health(c.arg);
    // The backend answers its own failures; the last resort still answers, so no request hangs.
    answered.then((answer) => this.answer(c.id, answer), () => this.answer(c.id, INTERNAL_ERROR));
  }

  private answer(id: number, answer: Answer): void {
    if (this.outgoing.length === 0) setImmediate(() => this.flush());
    this.outgoing.push({ id, answer });
  }

  private flush(): void {
    const answers = this.outgoing;
    this.outgoing = [];
    this.worker.postMessage({ kind: 'answers', answers } satisfies ToAgentThread);
  }

  /** The thread's HTTP metrics (the agent plane's requests), for the node's exposition; none once it has exited. */
  metricsJson(): Promise<MetricsJson> {
    if (this.exited) return Promise.resolve([]);
    const id = ++this.metricsIds;
    return new Promise((resolve, reject) => {
      this.metricsWaiting.set(id, { resolve, reject });
      this.worker.postMessage({ kind: 'metrics', id } satisfies ToAgentThread);
    });
  }

  /** Stops taking connections, lets the requests in flight be answered, then ends the thread. */
  close(): Promise<void> {
    return (this.closing ??= this.exited ? Promise.resolve() : new Promise<void>((resolve) => {
      this.closed = resolve;
      this.worker.postMessage({ kind: 'close' } satisfies ToAgentThread);
    }).then(() => this.worker.terminate()).then(() => undefined));
  }
}
