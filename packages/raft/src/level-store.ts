// LevelLogStore is the durable LogStore: one LevelDB database per node. It is the only
// module of this package that touches a disk.
//
// Layout (keys are bytes; LevelDB sorts them bytewise):
//   'h'                      hard state, JSON {term, vote, commit}
//   'm'                      snapshot meta, JSON {index, term, conf}
//   's'                      snapshot data
//   'e' + u64 big-endian     entry at that index: u64 big-endian term, then the data. A
//                            term is below 2^53, so the u64's top byte is always zero in
//                            a term: it holds the entry type (0 normal, 1 conf).
//   'i'                      the member's identity, JSON {clusterId, nodeId, members}
// Fixed-width big-endian index keys sort in index order, so a range scan reads the log
// in order and the first and last keys are the log's bounds.
//
// Every write is one `db.batch`, so a crash leaves either all of it or none. Writes are
// queued so that they reach LevelDB in call order even if a caller does not wait.
//
// A compaction (saveSnapshot) writes the snapshot at once, and deletes the entries it
// covers at most DELETES_PER_WRITE per write, in that write and the ones after it: the
// deletes of a compaction of tens of thousands of entries in one batch would hold the
// write of the next Ready (and LevelDB's batch copy holds the event loop) for tens of
// milliseconds. Until they are all gone, entries at or below the snapshot stay on disk;
// load() reads the log from the snapshot on and never sees them.
import { Level } from 'level';
import { EMPTY_HARD_STATE } from './entry.js';
import type { Identity } from './identity.js';
import { checkSave, type LogStore, type SaveBatch } from './storage.js';
import { LogStoreCorruptError, decodeHardState, decodeIdentity, decodeMeta, encodeJson } from './store-records.js';
import type { Boot, Entry, Snapshot } from './types.js';

type Bytes = Uint8Array;
type Op = { type: 'put'; key: Bytes; value: Bytes } | { type: 'del'; key: Bytes };

const KEY_HARD_STATE = Uint8Array.of(0x68); // 'h'
const KEY_SNAP_META = Uint8Array.of(0x6d); // 'm'
const KEY_SNAP_DATA = Uint8Array.of(0x73); // 's'
const KEY_IDENTITY = Uint8Array.of(0x69); // 'i'
const ENTRY_PREFIX = 0x65; // 'e'

/** the most entries covered by a compaction that one write deletes. */
export const DELETES_PER_WRITE = 1024;

export class LevelLogStore implements LogStore {
  /**
   * The entries on disk are [first, last]; the log is those after the snapshot,
   * (offset, last]. Below offset + 1 are covered entries still to delete.
   */
  private first = 1;
  private last = 0;
  private offset = 0;
  private tail: Promise<void> = Promise.resolve();

  private constructor(private readonly db: Level<Bytes, Bytes>) {}

  /** open opens (or creates) the store in directory `dir` and reads the log's bounds. */
  static async open(dir: string): Promise<LevelLogStore> {
    const db = new Level<Bytes, Bytes>(dir, { keyEncoding: 'view', valueEncoding: 'view' });
    await db.open();
    const store = new LevelLogStore(db);
    await store.readBounds();
    return store;
  }

  async load(): Promise<Boot> {
    await this.tail;
    const hs = await this.db.get(KEY_HARD_STATE);
    const metaBytes = await this.db.get(KEY_SNAP_META);
    let snapshot: Snapshot | null = null;
    if (metaBytes !== undefined) {
      const data = await this.db.get(KEY_SNAP_DATA);
      if (data === undefined) throw new LogStoreCorruptError('snapshot meta without snapshot data');
      snapshot = { meta: decodeMeta(metaBytes), data: copy(data) };
    }
    const offset = snapshot?.meta.index ?? 0;
    const entries: Entry[] = [];
    for await (const [key, value] of this.db.iterator({ gte: entryKey(offset + 1), lte: entryKey(Number.MAX_SAFE_INTEGER) })) {
      const e = decodeEntry(key, value);
      if (e.index !== offset + 1 + entries.length) {
        throw new LogStoreCorruptError(`stored log has a gap: found ${e.index}, expected ${offset + 1 + entries.length}`);
      }
      entries.push(e);
    }
    const hardState = hs === undefined ? { ...EMPTY_HARD_STATE } : decodeHardState(hs);
    // The commit index may lag (it is written without sync): never below the snapshot.
    hardState.commit = Math.max(hardState.commit, offset);
    if (hardState.commit > offset + entries.length) {
      throw new LogStoreCorruptError(`commit ${hardState.commit} beyond the stored log (${offset + entries.length})`);
    }
    return { hardState, snapshot, entries };
  }

  /** save writes one Ready in one batch, synced when `rd.mustSync`. */
  save(rd: SaveBatch): Promise<void> {
    const refused = checkSave(rd, { offset: this.offset, last: this.last });
    if (refused !== null) return Promise.reject(refused);
    const head = rd.entries[0];
    const offset = rd.snapshot?.meta.index ?? this.offset;
    const ops: Op[] = [];
    if (rd.snapshot !== null) {
      // A snapshot from the leader replaces the whole log.
      this.deleteEntries(ops, this.first, this.last);
      this.putSnapshot(ops, rd.snapshot);
      this.offset = offset;
      this.first = offset + 1;
      this.last = offset;
    }
    if (head !== undefined) {
      const lastNew = head.index + rd.entries.length - 1;
      // Entries beyond the new ones belong to a conflicting suffix: delete them.
      this.deleteEntries(ops, lastNew + 1, this.last);
      for (const e of rd.entries) ops.push({ type: 'put', key: entryKey(e.index), value: encodeEntry(e) });
      this.last = lastNew;
    }
    if (rd.hardState !== null) ops.push({ type: 'put', key: KEY_HARD_STATE, value: encodeJson(rd.hardState) });
    if (ops.length === 0) return this.tail;
    this.deleteCovered(ops);
    return this.enqueue(ops, rd.mustSync);
  }

  saveSnapshot(snapshot: Snapshot): Promise<void> {
    const index = snapshot.meta.index;
    if (index <= this.offset) return this.tail;
    const ops: Op[] = [];
    this.putSnapshot(ops, snapshot);
    this.offset = index;
    this.last = Math.max(this.last, index);
    this.deleteCovered(ops);
    return this.enqueue(ops, true);
  }

  async identity(): Promise<Identity | null> {
    await this.tail;
    const b = await this.db.get(KEY_IDENTITY);
    if (b === undefined) return null;
    return decodeIdentity(b);
  }

  bootstrap(identity: Identity): Promise<void> {
    return this.enqueue([{ type: 'put', key: KEY_IDENTITY, value: encodeJson(identity) }], true);
  }

  async close(): Promise<void> {
    await this.tail.catch(() => undefined);
    await this.db.close();
  }

  private enqueue(ops: Op[], sync: boolean): Promise<void> {
    const run = this.tail.then(() => this.db.batch(ops, { sync }));
    // A failed write fails its caller; the next write still runs after it.
    this.tail = run.catch(() => undefined);
    return run;
  }

  /** Adds to a write the deletes of up to DELETES_PER_WRITE entries a compaction covered. */
  private deleteCovered(ops: Op[]): void {
    const hi = Math.min(this.offset, this.first + DELETES_PER_WRITE - 1);
    if (hi < this.first) return;
    this.deleteEntries(ops, this.first, hi);
    this.first = hi + 1;
  }

  private deleteEntries(ops: Op[], lo: number, hi: number): void {
    for (let i = lo; i <= hi; i++) ops.push({ type: 'del', key: entryKey(i) });
  }

  private putSnapshot(ops: Op[], s: Snapshot): void {
    ops.push({ type: 'put', key: KEY_SNAP_META, value: encodeJson(s.meta) });
    ops.push({ type: 'put', key: KEY_SNAP_DATA, value: s.data });
  }

  private async readBounds(): Promise<void> {
    const meta = await this.db.get(KEY_SNAP_META);
    this.offset = meta === undefined ? 0 : decodeMeta(meta).index;
    const range = { gte: entryKey(0), lte: entryKey(Number.MAX_SAFE_INTEGER), limit: 1 };
    const firstKeys = await this.db.keys(range).all();
    const lastKeys = await this.db.keys({ ...range, reverse: true }).all();
    this.first = firstKeys[0] === undefined ? this.offset + 1 : keyIndex(firstKeys[0]);
    this.last = lastKeys[0] === undefined ? this.offset : keyIndex(lastKeys[0]);
  }
}

export function entryKey(index: number): Bytes {
  const key = new Uint8Array(9);
  key[0] = ENTRY_PREFIX;
  new DataView(key.buffer).setBigUint64(1, BigInt(index));
  return key;
}

function keyIndex(key: Bytes): number {
  return Number(new DataView(key.buffer, key.byteOffset, key.byteLength).getBigUint64(1));
}

function encodeEntry(e: Entry): Bytes {
  const out = new Uint8Array(8 + e.data.length);
  new DataView(out.buffer).setBigUint64(0, BigInt(e.term));
  if (e.type === 'conf') out[0] = ENTRY_TYPE_CONF;
  out.set(e.data, 8);
  return out;
}

function decodeEntry(key: Bytes, value: Bytes): Entry {
  if (key.length !== 9 || value.length < 8) throw new LogStoreCorruptError('malformed entry record');
  const type = value[0];
  if (type !== 0 && type !== ENTRY_TYPE_CONF) throw new LogStoreCorruptError(`unknown entry type ${String(type)}`);
  const view = new DataView(value.buffer, value.byteOffset, value.byteLength);
  const term = Number(view.getBigUint64(0) & TERM_MASK);
  const e: Entry = { index: keyIndex(key), term, data: copy(value.subarray(8)) };
  if (type === ENTRY_TYPE_CONF) e.type = 'conf';
  return e;
}

const ENTRY_TYPE_CONF = 1;
const TERM_MASK = (1n << 56n) - 1n;

/** copy detaches bytes from LevelDB's buffer (a Node Buffer may share a pooled slab). */
function copy(b: Bytes): Uint8Array {
  return new Uint8Array(b);
}
