/**
 * The state store's LevelDB on a thread of its own, with the part of classic-level's
 * interface the store uses.
 *
 * classic-level takes LevelDB's database lock on the calling thread for every read (the
 * implicit snapshot of a get, a getMany or an iterator is made in the call), and the
 * LevelDB it bundles (1.20) holds that lock while it deletes the files a compaction
 * made obsolete. On a busy disk such an unlink takes hundreds of milliseconds, and the
 * event loop, which runs Raft and `apply`, waited with it (docs/BENCHMARKS.md, "What
 * holds the slowest answers"). Here the event loop only posts requests and takes
 * answers; the worker (level-thread-worker.ts) calls LevelDB and is the one that waits.
 *
 * Requests are answered in any order, as LevelDB's own are: a caller that needs one
 * write to land before a read waits for it, as it did before. The worker keeps the
 * process alive only while a request is outstanding.
 */
import { Worker } from 'node:worker_threads';
import { SpareWorker } from './spare-worker.js';
import type { FramedChunk, FramesWritten } from './store-frames.js';

export interface LevelRange {
  gt?: string;
  gte?: string;
  lt?: string;
  lte?: string;
  reverse?: boolean;
}

export type LevelOp = { type: 'put'; key: string; value: string } | { type: 'del'; key: string };

/** What the event loop asks of the worker. */
export type LevelCall =
  | { op: 'open'; path: string; options: LevelOptions }
  | { op: 'close' }
  | { op: 'get'; key: string; snapshot?: number }
  | { op: 'getMany'; keys: string[] }
  | { op: 'batch'; keys: string[]; values: (string | null)[]; sync: boolean }
  | { op: 'keys'; range: LevelRange }
  | { op: 'iterator'; it: number; range: LevelRange; snapshot?: number; raw?: boolean }
  | { op: 'next'; it: number; size: number }
  | { op: 'frames'; it: number; bytes: number }
  | { op: 'putFrames'; seq: number; data: Uint8Array; digest: string; hashed: readonly string[]; metaKey: string }
  | { op: 'closeIterator'; it: number }
  | { op: 'snapshot'; snapshot: number }
  | { op: 'closeSnapshot'; snapshot: number };

/** A call as posted, with the id its answer carries. */
export type LevelRequest = { id: number } & LevelCall;

export type LevelResponse = { id: number; ok: true; value: unknown } | { id: number; ok: false; error: { message: string; code: unknown } };

/** Entries an iterator brings over per request. */
const ITERATOR_BATCH = 256;

/** LevelDB's options for the store (see LevelTuning). */
export interface LevelOptions {
  writeBufferSize?: number;
  blockSize?: number;
}

/**
 * The worker's compiled file: beside this one, or, where the tests run this module from
 * its TypeScript source, in the package's build output (the test loader does not follow
 * into a worker thread).
 */
const WORKER_URL = new URL(import.meta.url.endsWith('.ts') ? '../dist/level-thread-worker.js' : './level-thread-worker.js', import.meta.url);

/** A store's thread; it makes its LevelDB when told where (`open`), and keeps the process alive only while a request is outstanding. */
function newWorker(): Worker {
  // execArgv: the worker runs compiled JavaScript and needs none of the process's flags or loaders.
  const worker = new Worker(WORKER_URL, { name: 'apl-level', execArgv: [] });
  worker.unref();
  return worker;
}

const exitError = (code: number) => new Error(`the state store's LevelDB thread exited (${code})`);
const spare = new SpareWorker(newWorker, exitError);

export class ThreadedLevel {
  private readonly worker: Worker;
  private readonly pending = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();
  private ids = 0;
  private handles = 0;
  /** set once the worker has gone: every request after it fails with this. */
  private gone: Error | null = null;

  /**
   * Starts a thread now, before the node has read its settings (spare-worker.ts): it
   * starts and loads LevelDB (about a tenth of a second here) while the node's thread
   * loads its modules; the first store made takes it. main.ts calls this first thing.
   */
  static startEarly(): void {
    spare.start();
  }

  constructor(readonly location: string, private readonly options: LevelOptions = {}) {
    const taken = spare.take();
    this.worker = taken?.worker ?? newWorker();
    this.worker.on('message', (r: LevelResponse) => this.answer(r));
    this.worker.on('error', (err) => this.fail(err));
    this.worker.on('exit', (code) => this.fail(exitError(code)));
    if (taken?.failed) this.fail(taken.failed);
  }

  /** Opens the store at `location` (the thread makes its LevelDB here: a thread started early did not know where). */
  open(): Promise<void> {
    return this.call({ op: 'open', path: this.location, options: this.options });
  }

  async close(): Promise<void> {
    if (this.gone) return;
    try {
      await this.call({ op: 'close' });
    } finally {
      this.gone ??= new Error('the state store is closed');
      await this.worker.terminate();
    }
  }

  get(key: string, opts: { snapshot?: LevelSnapshot } = {}): Promise<string | undefined> {
    return this.call({ op: 'get', key, ...(opts.snapshot ? { snapshot: opts.snapshot.id } : {}) });
  }

  getMany(keys: string[]): Promise<(string | undefined)[]> {
    return this.call({ op: 'getMany', keys });
  }

  /**
   * Writes `ops` as one LevelDB batch. They are posted as two arrays, the keys and the
   * values (null for a deletion): the event loop copies a batch for the worker, and V8
   * copies arrays of strings in about half the time it takes for the same operations
   * as objects, each with its own property names (20 operations: 4 against 8 µs; 190:
   * 21 to 29 against 51 to 66 µs).
   */
  batch(ops: LevelOp[], opts: { sync?: boolean } = {}): Promise<void> {
    const keys = new Array<string>(ops.length);
    const values = new Array<string | null>(ops.length);
    for (let i = 0; i < ops.length; i++) {
      const op = ops[i]!;
      keys[i] = op.key;
      values[i] = op.type === 'del' ? null : op.value;
    }
    return this.call({ op: 'batch', keys, values, sync: opts.sync === true });
  }

  keys(range: LevelRange): { all(): Promise<string[]> } {
    return { all: () => this.call({ op: 'keys', range }) };
  }

  /** Entries in key order (or reversed) over `range`, read from the store as it is now or at `snapshot`. */
  iterator(range: LevelRange & { snapshot?: LevelSnapshot }): LevelIterator {
    const { snapshot, ...bounds } = range;
    const it = ++this.handles;
    const opened = this.call<void>({ op: 'iterator', it, range: bounds, ...(snapshot ? { snapshot: snapshot.id } : {}) });
    return new LevelIterator(opened, (size) => this.call({ op: 'next', it, size }), () => this.call({ op: 'closeIterator', it }));
  }

  /** The values over `range`, in key order; leaving the loop early closes the iterator. */
  async *values(range: LevelRange): AsyncGenerator<string> {
    for await (const [, value] of this.iterator(range)) yield value;
  }

  /**
   * The whole store at `snapshot` as framed chunks of at least `bytes` each (the last
   * may be shorter), built on the store's thread (store-frames.ts); the next chunk is
   * read while the caller sends this one. Leaving the loop early closes the iterator.
   */
  async *frames(opts: { snapshot: LevelSnapshot; bytes: number }): AsyncGenerator<FramedChunk> {
    const it = ++this.handles;
    const fetch = () => this.call<FramedChunk | null>({ op: 'frames', it, bytes: opts.bytes });
    let next: Promise<FramedChunk | null> | null = null;
    try {
      await this.call<void>({ op: 'iterator', it, range: {}, snapshot: opts.snapshot.id, raw: true });
      next = fetch();
      for (;;) {
        const chunk = await next;
        if (chunk === null) return;
        next = fetch();
        yield chunk;
      }
    } finally {
      await next?.catch(() => undefined);
      await this.call({ op: 'closeIterator', it }).catch(() => undefined);
    }
  }

  /**
   * Writes a received chunk's records as they came (unsynced), on the store's thread,
   * after checking its digest; answers the sum of the terms of the records under the
   * `hashed` prefixes and the `metaKey` record's text (store-frames.ts).
   */
  putFrames(seq: number, chunk: FramedChunk, hashed: readonly string[], metaKey: string): Promise<FramesWritten> {
    // A copy of exactly its bytes, moved to the thread rather than copied again: a
    // chunk decoded from the wire is a view of a larger buffer, which would go whole.
    const data = new Uint8Array(chunk.data);
    return this.call({ op: 'putFrames', seq, data, digest: chunk.digest, hashed, metaKey }, [data.buffer]);
  }

  /** The store as it is now, for later reads, until closed. */
  snapshot(): LevelSnapshot {
    const id = ++this.handles;
    const made = this.call<void>({ op: 'snapshot', snapshot: id });
    return new LevelSnapshot(id, made, () => this.call({ op: 'closeSnapshot', snapshot: id }));
  }

  private call<T>(req: LevelCall, transfer: ArrayBuffer[] = []): Promise<T> {
    if (this.gone) return Promise.reject(this.gone);
    const id = ++this.ids;
    return new Promise<T>((resolve, reject) => {
      if (this.pending.size === 0) this.worker.ref();
      this.pending.set(id, { resolve: resolve as (v: unknown) => void, reject });
      this.worker.postMessage({ id, ...req }, transfer);
    });
  }

  private answer(r: LevelResponse): void {
    const p = this.pending.get(r.id);
    if (!p) return;
    this.pending.delete(r.id);
    if (this.pending.size === 0) this.worker.unref();
    if (r.ok) p.resolve(r.value);
    else p.reject(Object.assign(new Error(r.error.message), r.error.code === undefined ? {} : { code: r.error.code }));
  }

  private fail(err: Error): void {
    this.gone ??= err;
    for (const p of this.pending.values()) p.reject(err);
    this.pending.clear();
  }
}

export class LevelSnapshot {
  constructor(readonly id: number, private readonly made: Promise<void>, private readonly release: () => Promise<void>) {
    made.catch(() => undefined); // a failure surfaces at the first read that uses it
  }

  async close(): Promise<void> {
    await this.made.catch(() => undefined);
    await this.release();
  }
}

export class LevelIterator implements AsyncIterable<[string, string]> {
  private buffer: [string, string][] = [];
  private at = 0;
  private ended = false;
  private closed = false;
  private released: Promise<void> | null = null;

  constructor(private readonly opened: Promise<void>, private readonly fetch: (size: number) => Promise<[string, string][]>, private readonly release: () => Promise<void>) {
    opened.catch(() => undefined); // surfaces at the first next()
  }

  async next(): Promise<[string, string] | undefined> {
    if (this.closed) return undefined;
    if (this.at === this.buffer.length) {
      if (this.ended) return undefined;
      await this.opened;
      // A batch may be short of the size asked (LevelDB's iterator also stops at a byte
      // budget); only an empty one is the end.
      this.buffer = await this.fetch(ITERATOR_BATCH);
      this.at = 0;
      if (this.buffer.length === 0) {
        this.ended = true;
        return undefined;
      }
    }
    return this.buffer[this.at++];
  }

  close(): Promise<void> {
    this.closed = true;
    this.released ??= this.opened.catch(() => undefined).then(() => this.release());
    return this.released;
  }

  /** Iterates to the end; the iterator is closed however the loop ends. */
  async *[Symbol.asyncIterator](): AsyncGenerator<[string, string]> {
    try {
      for (;;) {
        const e = await this.next();
        if (e === undefined) return;
        yield e;
      }
    } finally {
      await this.close();
    }
  }
}
