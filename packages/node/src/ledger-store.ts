/**
 * The ledger's state on disk: one LevelDB database per replica holding the state
 * machine's records (core/store.ts), the audit journal, and the position they are at
 * (`chain/meta`: the applied index and its term, the chain head, the state hash).
 * Everything a batch of log entries changes is written in one LevelDB batch with the
 * new position, so after any crash the state, the journal and the applied index agree
 * (etcd's backend writes its consistent index the same way).
 *
 * Reads go through a bounded cache of decoded records (two generations, so that a hit
 * costs one lookup); writes go through it too.
 * A batch is written without fsync: the Raft log holds the entries durably, and a
 * restart re-applies whatever the store lost. `commit` hands a batch to LevelDB and
 * returns at once with a promise of its landing: until it lands its records are read
 * from the writes in flight, so the next batch can be prefetched and applied while
 * this one is written. Batches land in commit order; after one fails, none lands. Before the Raft log is compacted below
 * an index, `sync()` makes the store durable up to it.
 *
 * A member that is behind compaction receives the whole store: `snapshotChunks()`
 * reads it from one consistent LevelDB iterator in chunks of about 1 MiB, each with
 * its SHA-256; `receiveSnapshot` writes them to a fresh directory, checks each chunk
 * and, at the end, the state hash it recomputes against the one the stream carries;
 * `install` then switches the CURRENT pointer to it (an atomic rename) and reopens.
 * A transfer cut half-way leaves the old store as it was.
 *
 * Directory layout: `<dir>/CURRENT` names the store in use, `<dir>/store-<n>/`.
 */
import { existsSync, mkdirSync, readdirSync, readFileSync } from 'node:fs';
import { open, readdir, rename, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { type LevelOptions, ThreadedLevel } from './level-thread.js';
import { sha256Hex, type FramesWritten } from './store-frames.js';
import {
  addHash, decodeRecord, EMPTY_STATE_HASH, encodeRecord, GENESIS_HASH, HASHED_PREFIXES, hashFromHex, hashHex, META_KEYS, reads, recordHash, View,
  type Commit, type LedgerMeta, type Operation, type ReadSet, type Slot,
} from '@apl/core';

/** The position of the store: the ledger's meta, the term of its applied index, and the tick there. */
export interface StorePosition extends LedgerMeta {
  /** term is the Raft term of the entry at `applied` (0 before the first). */
  term: number;
  /** tick is the ledger's tick at `applied` (a copy of the record meta/tick, kept with the position). */
  tick: number;
}

/** A journal record to write with a batch: `{index, op, result, entry_hash}` as canonical JSON. */
export interface JournalRecord {
  index: number;
  text: string;
}

/** One chunk of a streamed store. */
export interface SnapshotChunk {
  seq: number;
  data: Uint8Array;
  /** digest is the lowercase-hex SHA-256 of `data`. */
  digest: string;
}

/**
 * The store's LevelDB, on its own thread (level-thread.ts): the few calls the store
 * makes, which a test may wrap to make them fail.
 */
export type LevelDb = ThreadedLevel;
export type WrapDb = (db: LevelDb) => LevelDb;

const META_KEY = 'chain/meta';
/**
 * How records are keyed and encoded, written in the position record. Layout 3 keys
 * obligations by the tick that created them (`obl/`) with an `oid/` index beside them;
 * layout 2 keyed them by `<party>/<id>`, and keyed recorded intents by log index
 * (`rec/`) with a `txn/` index, as layout 3 does; layout 1 (no number) keyed recorded
 * intents by `<party>/<transaction>`. A store of another layout is refused when opened
 * or received, never read as if it were this one.
 */
export const STORE_LAYOUT = 3;
const JOURNAL_PREFIX = 'jrnl/';
const CHUNK_BYTES = 1 << 20;
/** The SHA-256 of no bytes: the digest of the one empty chunk an empty store streams. */
const EMPTY_DIGEST = sha256Hex(new Uint8Array());
/** Received chunks handed to the store's thread ahead of the one waited for. */
const WRITES_AHEAD = 2;
/** LevelDB's memtable size unless configured (`store.write_buffer_bytes`); LevelDB's own default is 4 MiB. */
export const WRITE_BUFFER_BYTES_DEFAULT = 32 << 20;
/**
 * LevelDB's block size unless configured (`store.block_bytes`); LevelDB's own default
 * is 4 KiB. Snappy compresses a block at a time, and the records of one block repeat
 * their field names, so a larger block holds the same records in fewer bytes: with
 * 16 KiB a million intents flush about 40 % fewer bytes, and compact less while the
 * store is young (docs/BENCHMARKS.md).
 * A read of a record no cache holds decompresses one block, so larger still costs reads.
 */
export const BLOCK_BYTES_DEFAULT = 16 << 10;

/** How LevelDB lays out the state store; see the two defaults above. */
export interface LevelTuning {
  writeBufferBytes: number;
  blockBytes: number;
}
/** The most rounds of `reads` one operation may need; more is a bug in `reads`. */
const PREFETCH_ROUNDS_MAX = 4;

export const journalKey = (index: number) => `${JOURNAL_PREFIX}${index.toString(16).padStart(16, '0')}`;

/** The first key after every key that starts with `prefix`. */
export function prefixEnd(prefix: string): string {
  return prefix.slice(0, -1) + String.fromCharCode(prefix.charCodeAt(prefix.length - 1) + 1);
}

/**
 * A bounded map that keeps what is used: two generations of at most `max / 2` entries
 * each. A write goes to the young one; a hit in the old one is copied to the young
 * one; when the young one is full it becomes the old one and the old one is dropped.
 * An entry used once per generation survives, as in an LRU, but a hit in the young
 * generation costs one lookup, not a delete and an insert. At most `max` entries.
 */
class Generations<K, V> {
  private young = new Map<K, V>();
  private old = new Map<K, V>();
  private readonly half: number;
  constructor(max: number) {
    this.half = Math.max(1, Math.floor(max / 2));
  }

  get(k: K): V | undefined {
    const v = this.young.get(k);
    if (v !== undefined) return v;
    const o = this.old.get(k);
    if (o !== undefined) this.set(k, o);
    return o;
  }

  set(k: K, v: V): void {
    if (!this.young.has(k) && this.young.size >= this.half) {
      this.old = this.young;
      this.young = new Map();
    }
    this.young.set(k, v);
  }

  clear(): void {
    this.young.clear();
    this.old.clear();
  }

  /** The entries held, at most `max` (an entry copied from the old generation counts in both). */
  get size(): number {
    return this.young.size + this.old.size;
  }
}

export class LedgerStore {
  /** Records by key as last read or written: a slot, or null for a key the store does not hold. */
  private readonly cache: Generations<string, Slot | null>;
  private pos: StorePosition;
  /**
   * Whether a store is being received. One at a time: two transfers at once (one from a
   * primary that was stopping, one from its successor) drew the same directory, and the
   * one that failed removed the directory the other was writing.
   */
  private receiving = false;
  /** the store received and not yet installed (its directory's name), and its position. */
  private received: { name: string; position: StorePosition } | null = null;
  /** old stores being closed and removed after an install */
  private readonly retiring = new Set<Promise<void>>();
  /**
   * commits counts the batches written. A read that started before a commit may have
   * read what the commit then changed, so its result is answered but not cached.
   */
  private commits = 0;
  /**
   * inflight holds the records of batches handed to LevelDB that have not landed, by
   * key (null: deleted); reads see them before the cache and the disk. A record leaves
   * when its batch lands, unless a later batch wrote the key again.
   */
  private readonly inflight = new Map<string, Slot | null>();
  /** landing settles when the last batch handed to LevelDB has landed; it rejects for good after a failure. */
  private landing: Promise<void> = Promise.resolve();

  private constructor(
    private readonly dir: string,
    private db: LevelDb,
    private current: string,
    pos: StorePosition,
    cacheEntriesMax: number,
    private readonly wrap: WrapDb,
    private readonly tuning: LevelTuning,
  ) {
    this.pos = pos;
    this.cache = new Generations(cacheEntriesMax);
  }

  /**
   * Opens (or creates) the store under `dir`; removes what an interrupted install left.
   * `writeBufferBytes` is LevelDB's memtable size: a larger one turns the same writes
   * into fewer, larger files, and so less compaction per intent (default 32 MiB);
   * `blockBytes` its block size (default 16 KiB).
   */
  static async open(dir: string, opts: { cacheEntriesMax: number; writeBufferBytes?: number; blockBytes?: number; wrap?: WrapDb }): Promise<LedgerStore> {
    mkdirSync(dir, { recursive: true });
    const pointer = join(dir, 'CURRENT');
    let current = existsSync(pointer) ? readFileSync(pointer, 'utf8').trim() : '';
    if (current === '') {
      current = 'store-000001';
      await writePointer(dir, current);
    }
    for (const name of readdirSync(dir)) {
      if (name.startsWith('store-') && name !== current) await rm(join(dir, name), { recursive: true, force: true });
    }
    const wrap = opts.wrap ?? ((db: LevelDb) => db);
    const tuning = { writeBufferBytes: opts.writeBufferBytes ?? WRITE_BUFFER_BYTES_DEFAULT, blockBytes: opts.blockBytes ?? BLOCK_BYTES_DEFAULT };
    const { db, position } = await openDb(join(dir, current), wrap, tuning);
    return new LedgerStore(dir, db, current, position, opts.cacheEntriesMax, wrap, tuning);
  }

  get position(): StorePosition {
    return this.pos;
  }

  get cacheSize(): number {
    return this.cache.size;
  }

  // ------------------------------------------------------------ apply: prefetch and commit

  /** A view over the store at its position, for one batch of operations. */
  view(): View {
    return new View(this.pos, encodeRecord);
  }

  /**
   * Loads everything the operations read, in rounds, all operations of a round
   * together. Reads that depend on an earlier operation's writes are named again
   * when that operation is applied (`ensure`).
   */
  async prefetch(view: View, ops: readonly Operation[]): Promise<void> {
    for (let round = 0; round < PREFETCH_ROUNDS_MAX; round++) {
      const keys = new Set<string>();
      const prefixes = new Set<string>();
      for (const op of ops) {
        const r = reads(view, op);
        for (const k of r.keys) keys.add(k);
        for (const p of r.prefixes) prefixes.add(p);
      }
      if (keys.size === 0 && prefixes.size === 0) return;
      await this.load(view, { keys: [...keys], prefixes: [...prefixes] });
    }
  }

  /** Loads what one operation still lacks (after earlier operations of its batch wrote). */
  async ensure(view: View, op: Operation): Promise<void> {
    for (let round = 0; ; round++) {
      const r = reads(view, op);
      if (r.keys.length === 0 && r.prefixes.length === 0) return;
      if (round >= PREFETCH_ROUNDS_MAX) throw new Error(`reads of ${op.type} did not settle in ${PREFETCH_ROUNDS_MAX} rounds`);
      await this.load(view, r);
    }
  }

  private async load(view: View, set: ReadSet): Promise<void> {
    const missing: string[] = [];
    for (const key of set.keys) {
      const hit = this.known(key);
      if (hit === undefined) missing.push(key);
      else view.supply(key, hit);
    }
    if (missing.length > 0) {
      const before = this.commits;
      const texts = await this.db.getMany(missing);
      missing.forEach((key, k) => {
        const slot = toSlot(key, texts[k]);
        if (this.commits === before) this.cache.set(key, slot);
        view.supply(key, slot);
      });
    }
    if (set.prefixes.length > 0) await this.landed();
    for (const prefix of set.prefixes) view.supplyScan(prefix, await this.db.keys({ gte: prefix, lt: prefixEnd(prefix) }).all());
  }

  /** A record the writes in flight or the cache hold (null: known absent), or undefined. */
  private known(key: string): Slot | null | undefined {
    const w = this.inflight.get(key);
    return w !== undefined ? w : this.cache.get(key);
  }

  /** Settles once every batch handed to LevelDB has landed or failed: a scan after it sees them all. */
  landed(): Promise<void> {
    return this.landing.catch(() => undefined);
  }

  /**
   * Writes a batch's records, its journal records and the position it reached, in one
   * LevelDB batch. The records are readable (and the position is this store's) at
   * once; the promise settles when the batch has landed. A failed batch fails every
   * later one, and reads forget what did not land.
   */
  commit(c: Commit, journal: readonly JournalRecord[], term: number): Promise<void> {
    const tick = c.writes.find((w) => w.key === META_KEYS[0]);
    const pos: StorePosition = { ...c.meta, term, tick: tick ? (tick.value as number) : this.pos.tick };
    const ops: ({ type: 'put'; key: string; value: string } | { type: 'del'; key: string })[] = [];
    const slots: [string, Slot | null][] = [];
    for (const w of c.writes) {
      ops.push(w.text === null ? { type: 'del', key: w.key } : { type: 'put', key: w.key, value: w.text });
      slots.push([w.key, w.text === null ? null : { value: w.value, hash: w.hash }]);
    }
    for (const j of journal) ops.push({ type: 'put', key: journalKey(j.index), value: j.text });
    ops.push({ type: 'put', key: META_KEY, value: positionText(pos) });
    this.commits++;
    for (const [key, slot] of slots) {
      this.inflight.set(key, slot);
      this.cache.set(key, slot);
    }
    this.pos = pos;
    const db = this.db;
    this.landing = this.landing.then(() => db.batch(ops, { sync: false }));
    return this.landing.then(
      () => {
        for (const [key, slot] of slots) if (this.inflight.get(key) === slot) this.inflight.delete(key);
      },
      (err: unknown) => {
        this.commits++;
        this.inflight.clear();
        this.cache.clear();
        throw err;
      },
    );
  }

  /**
   * Makes everything written so far durable (an fsync of the store's log). It queues
   * behind the batches handed to LevelDB, and later ones (and `landed`, `install` and
   * `close`) queue behind it.
   */
  sync(): Promise<void> {
    const db = this.db;
    const pos = positionText(this.pos);
    const run = this.landing.then(() => db.batch([{ type: 'put', key: META_KEY, value: pos }], { sync: true }));
    this.landing = run;
    return run;
  }

  // ------------------------------------------------------------ reads for the planes

  /** A record by key, decoded; undefined when the store has none. */
  async get<T>(key: string): Promise<T | undefined> {
    let slot = this.known(key);
    if (slot === undefined) {
      const before = this.commits;
      slot = toSlot(key, await this.db.get(key));
      if (this.commits === before) this.cache.set(key, slot);
    }
    return slot === null ? undefined : (slot.value as T);
  }

  /**
   * A record by key if the cache knows it, without reading the disk: the record, null
   * when the store is known not to hold it, undefined when the cache cannot say.
   */
  cached<T>(key: string): T | null | undefined {
    const slot = this.known(key);
    return slot === undefined ? undefined : slot === null ? null : (slot.value as T);
  }

  /**
   * A page of the records under `prefix` after the key `after` (exclusive), in key
   * order (or in reverse, before `after`), decoded: at most `limit` that `keep`, from at
   * most `scanMax` read, so that a sparse filter never makes one request read without
   * bound; `next` is the key to continue after, or null at the end.
   */
  async page<T>(prefix: string, opts: { after?: string | undefined; limit: number; reverse?: boolean; scanMax?: number; keep?: (v: T) => boolean }): Promise<{ items: [string, T][]; next: string | null }> {
    const range = opts.reverse
      ? { gte: prefix, lt: opts.after ?? prefixEnd(prefix), reverse: true }
      : { gt: opts.after ?? prefix, lt: prefixEnd(prefix) };
    const scanMax = Math.max(opts.limit, opts.scanMax ?? opts.limit);
    await this.landed();
    const items: [string, T][] = [];
    let last: string | null = null;
    let read = 0;
    const it = this.db.iterator(range);
    try {
      for await (const [key, text] of it) {
        if (items.length === opts.limit || read === scanMax) return { items, next: last };
        read++;
        last = key;
        const value = decodeRecord(key, text) as T;
        if (!opts.keep || opts.keep(value)) items.push([key, value]);
      }
    } finally {
      await it.close();
    }
    return { items, next: null };
  }

  /** The journal's records from log index `from` on, in log order. */
  async *journal(from = 0): AsyncGenerator<string> {
    await this.landed();
    for await (const value of this.db.values({ gte: journalKey(from), lt: prefixEnd(JOURNAL_PREFIX) })) yield value;
  }

  // ------------------------------------------------------------ the store as a snapshot

  /**
   * The whole store at this moment, from one explicit LevelDB snapshot: its position
   * (announced before the transfer) and its records in chunks of about 1 MiB, read
   * lazily so that a slow receiver holds back the reading. The chunks must be read to
   * the end or `return()`ed, which releases the snapshot.
   */
  async openSnapshot(): Promise<{ position: StorePosition; chunks: AsyncGenerator<SnapshotChunk> }> {
    await this.landing;
    const snapshot = this.db.snapshot();
    let position: StorePosition;
    try {
      position = parsePositionOrEmpty(await this.db.get(META_KEY, { snapshot }));
    } catch (err) {
      await snapshot.close();
      throw err;
    }
    const db = this.db;
    async function* chunks(): AsyncGenerator<SnapshotChunk> {
      let seq = 0;
      try {
        for await (const c of db.frames({ snapshot, bytes: CHUNK_BYTES })) yield { seq: seq++, ...c };
        if (seq === 0) yield { seq: seq++, data: new Uint8Array(), digest: EMPTY_DIGEST };
      } finally {
        await snapshot.close();
      }
    }
    return { position, chunks: chunks() };
  }

  /**
   * Writes a streamed store into a fresh directory beside this one, checking every
   * chunk's digest and, at the end, the state hash recomputed from the records against
   * `expected` and against the position the stream carries. `extra` records are written
   * with the last, synced batch (the Raft configuration of the snapshot, kept beside the
   * state it belongs to). Returns the directory's name, for `install`. On any failure
   * the directory is removed and the error thrown. One store is received at a time: a
   * second transfer meanwhile is refused.
   */
  async receiveSnapshot(expected: { stateHash: string; applied: number }, chunks: AsyncIterable<SnapshotChunk>, extra: Record<string, string> = {}): Promise<string> {
    if (this.receiving) throw new Error('a store is being received already: this transfer is refused, and the sender tries again later');
    this.receiving = true;
    try {
      return await this.receiveOne(expected, chunks, extra);
    } finally {
      this.receiving = false;
    }
  }

  private async receiveOne(expected: { stateHash: string; applied: number }, chunks: AsyncIterable<SnapshotChunk>, extra: Record<string, string>): Promise<string> {
    const name = await nextStoreName(this.dir, this.current);
    const path = join(this.dir, name);
    const db = new ThreadedLevel(path, levelOptions(this.tuning));
    try {
      await db.open();
      let sum = 0n;
      let seq = 0;
      let position: StorePosition | null = null;
      // The store's thread checks and writes a chunk while the next one arrives; at most
      // WRITES_AHEAD are handed to it before the oldest is waited for.
      const writing: Promise<FramesWritten>[] = [];
      const settle = async (): Promise<StorePosition | null> => {
        const w = await writing.shift()!;
        sum = addHash(sum, hashFromHex(w.sum));
        return w.meta === null ? null : parsePosition(w.meta);
      };
      for await (const chunk of chunks) {
        if (chunk.seq !== seq) throw new Error(`snapshot chunk ${chunk.seq} arrived where ${seq} was expected`);
        const w = db.putFrames(seq, chunk, HASHED_PREFIXES, META_KEY);
        w.catch(() => undefined); // thrown by settle, in order
        writing.push(w);
        seq++;
        if (writing.length > WRITES_AHEAD) position = (await settle()) ?? position;
      }
      while (writing.length > 0) position = (await settle()) ?? position;
      if (position === null) throw new Error('the snapshot carries no position');
      const recomputed = hashHex(sum);
      if (recomputed !== position.stateHash || recomputed !== expected.stateHash || position.applied !== expected.applied) {
        throw new Error(`the snapshot's records hash to ${recomputed} at ${position.applied}; ${expected.stateHash} at ${expected.applied} was announced`);
      }
      const last = [{ type: 'put' as const, key: META_KEY, value: positionText(position) }];
      for (const [key, value] of Object.entries(extra)) last.push({ type: 'put', key, value });
      await db.batch(last, { sync: true });
      await db.close();
      // Only the newest store received is installed: an earlier one Raft did not take goes.
      if (this.received !== null) await rm(join(this.dir, this.received.name), { recursive: true, force: true });
      this.received = { name, position };
      return name;
    } catch (err) {
      await db.close().catch(() => undefined);
      await rm(path, { recursive: true, force: true });
      throw err;
    }
  }

  /** Removes a received store that will not be installed (Raft did not take its snapshot). */
  async discardReceived(name: string): Promise<void> {
    this.takeReceived(name);
    await rm(join(this.dir, name), { recursive: true, force: true });
  }

  /** The position of the store received as `name`, which is no longer waiting to be installed. */
  private takeReceived(name: string): StorePosition {
    if (this.received?.name !== name) throw new Error(`no store ${name} was received here`);
    const { position } = this.received;
    this.received = null;
    return position;
  }

  /** A record outside the ledger's tables (as written by receiveSnapshot's `extra`), or null. */
  async record(key: string): Promise<string | null> {
    return (await this.db.get(key)) ?? null;
  }

  /**
   * Switches to a received store: it is opened beside the old one, the CURRENT pointer
   * moves in one rename, and reads go to it from then on. A plane's read never finds
   * the store closed in between. A read that raced the switch answers what it read but
   * does not enter the cache (the commit count moves), so the cache holds only records
   * of the new store.
   *
   * The old store is retired after the switch, not before it returns: it is closed
   * (after the reads already sent to it are answered) and its directory removed, which
   * unlinks every file of a whole state and so takes time in proportion to it. The
   * returned `retired` settles when that is done; `close` waits for it too. A removal
   * that fails leaves a directory that `open` removes at the next start.
   */
  async install(name: string): Promise<{ retired: Promise<void> }> {
    await this.landed();
    const expected = this.takeReceived(name);
    const { db: next, position: pos } = await openDb(join(this.dir, name), this.wrap, this.tuning);
    // A store that opens elsewhere than it was received (its directory went missing, and
    // an empty one was made in its place) must never replace the one in use.
    if (pos.applied !== expected.applied || pos.stateHash !== expected.stateHash) {
      await next.close();
      await rm(join(this.dir, name), { recursive: true, force: true });
      throw new Error(`the received store ${name} opens at applied index ${pos.applied}, not at ${expected.applied} where it was received`);
    }
    try {
      await writePointer(this.dir, name);
    } catch (err) {
      await next.close();
      throw err;
    }
    const [old, oldName] = [this.db, this.current];
    this.db = next;
    this.current = name;
    this.pos = pos;
    this.commits++;
    this.inflight.clear();
    this.cache.clear();
    const retired = (async () => {
      await old.close();
      await rm(join(this.dir, oldName), { recursive: true, force: true });
    })();
    this.retiring.add(retired);
    void retired.then(() => this.retiring.delete(retired), () => this.retiring.delete(retired));
    return { retired };
  }

  async close(): Promise<void> {
    await this.landed();
    await Promise.allSettled([...this.retiring]);
    await this.db.close();
  }
}

/** Opens a store directory and reads its position; on any failure its thread goes too. */
async function openDb(path: string, wrap: WrapDb, tuning: LevelTuning): Promise<{ db: LevelDb; position: StorePosition }> {
  const db = wrap(new ThreadedLevel(path, levelOptions(tuning)));
  try {
    await db.open();
    return { db, position: parsePositionOrEmpty(await db.get(META_KEY)) };
  } catch (err) {
    await db.close().catch(() => undefined);
    throw err;
  }
}

function levelOptions(tuning: LevelTuning): LevelOptions {
  return { writeBufferSize: tuning.writeBufferBytes, blockSize: tuning.blockBytes };
}

function parsePositionOrEmpty(text: string | undefined): StorePosition {
  return text === undefined ? { applied: 0, term: 0, tick: 0, head: GENESIS_HASH, stateHash: EMPTY_STATE_HASH } : parsePosition(text);
}

function positionText(pos: StorePosition): string {
  return JSON.stringify({ ...pos, layout: STORE_LAYOUT });
}

function parsePosition(text: string): StorePosition {
  const p = JSON.parse(text) as Partial<StorePosition> & { layout?: unknown };
  const layout = p.layout ?? 1;
  if (layout !== STORE_LAYOUT) {
    throw new Error(`the state store has layout ${String(layout)}, and this version reads layout ${STORE_LAYOUT}: it was written by another version. `
      + 'A cluster member can start from an empty data directory and receive the store from its peers; there is no in-place migration.');
  }
  const index = (v: unknown) => typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;
  const hex = (v: unknown) => typeof v === 'string' && /^[0-9a-f]{64}$/.test(v);
  if (!index(p.applied) || !index(p.term) || !index(p.tick) || !hex(p.head) || !hex(p.stateHash)) throw new Error(`the store's position record is not valid: ${text}`);
  return { applied: p.applied!, term: p.term!, tick: p.tick!, head: p.head!, stateHash: p.stateHash! };
}

function toSlot(key: string, text: string | undefined): Slot | null {
  return text === undefined ? null : { value: decodeRecord(key, text), hash: recordHash(key, text) };
}

/**
 * Replaces the CURRENT pointer atomically: write a temporary file, sync it, rename it
 * over, sync the directory. Asynchronous: an install runs it while the node serves, and
 * each sync can wait long on a disk busy with LevelDB's compactions.
 */
async function writePointer(dir: string, name: string): Promise<void> {
  const tmp = join(dir, 'CURRENT.tmp');
  const file = await open(tmp, 'w');
  try {
    await file.writeFile(`${name}\n`);
    await file.sync();
  } finally {
    await file.close();
  }
  await rename(tmp, join(dir, 'CURRENT'));
  const d = await open(dir, 'r');
  try {
    await d.sync();
  } finally {
    await d.close();
  }
}

/** A store directory name after the current one and every one on disk (one receive at a time makes it unique). */
async function nextStoreName(dir: string, current: string): Promise<string> {
  const numbers = (await readdir(dir)).map((n) => /^store-(\d+)$/.exec(n)?.[1]).filter((n): n is string => n !== undefined).map(Number);
  const next = Math.max(Number(current.slice('store-'.length)), ...numbers) + 1;
  return `store-${String(next).padStart(6, '0')}`;
}
