// WalLogStore is the durable LogStore: a write-ahead log of preallocated segments, as
// etcd keeps its Raft log. It is, with LevelLogStore, the only module of this package
// that touches a disk.
//
// Why not a database: an append that grows a file changes its size, so its fsync must
// commit the filesystem's journal, and on ext4 that commit waits for whatever other
// files' data the journal orders before it (the state store's writes and LevelDB's
// compactions, on the same filesystem). A segment is filled with zeros when it is first
// made (or is a freed one used again), so a record written into it later changes no
// metadata: `fdatasync` flushes the record's pages and nothing else.
//
// Layout, under the store's directory:
//   <seq, 16 hex>.wal          segments, numbered in the order they are written
//   <seq, 16 hex>.free         segments a compaction freed, kept to be used again
//   snap/<index, 16 hex>.snap  snapshots: u32 CRC-32 of the rest, u32 meta length,
//                              meta JSON {index, term, conf}, then the data
//   identity.json              the member's identity {clusterId, nodeId, members}
//
// A record is u32 body length, u32 CRC-32 of the body, then the body: a type byte and
//   1 entry      u64 index, u64 term, u8 entry type (0 normal, 1 conf), the data
//   2 hard state JSON {term, vote, commit}
//   3 snapshot   u64 index, u64 term, u8 replaces: the log starts after this index
//                (snap/<index>.snap holds it); with `replaces` the entries before this
//                record are all dropped (a snapshot from the leader replaces the log),
//                without it only those at or below the index (a compaction)
// A length of zero ends a segment's records. Each save is one write of its records at
// the end of the current segment. A save that must be durable is written through a
// second handle on the segment opened with O_DSYNC, so that the write returns once its
// bytes are on the disk: one call to libuv's pool, not a write and then an `fdatasync`.
// O_DSYNC makes durable only the bytes of its own write, so the bytes written since the
// last sync that needed none (a hard state alone, a new segment's head) are kept and
// written again ahead of the save, the same bytes at the same place. Only when those
// are not known (what a segment held when it was opened) or grew large is the save
// written and then the whole segment synced with `fdatasync`. Replay
// reads the records in order: an entry at index i drops every entry at or after i
// first (a conflicting suffix).
//
// Segments are used again, as PostgreSQL recycles its WAL files: a compaction renames
// a segment it frees to `.free` (two at most are kept), and the next spare is one of
// them renamed, instead of a new file of zeros (64 MiB written and synced, beside the
// log's own syncs) and an unlink. What such a segment held before stays behind its new
// records, so a record's CRC-32 starts from a seed of its segment's number: a record of
// the segment's earlier life never checks under its new number (a CRC's start value
// changes the result for every input), and reads as the end of the log. Segments
// written before seeds have seed 0 (a plain CRC-32): a segment whose first record
// checks only that way is read and appended to that way, and is never used again. A
// spare made ahead of need and still all zeros at open is kept as the spare: a restart
// does not make one again.
//
// A crash can leave a torn record at the end of the last segment (it was never
// acknowledged: its write had not returned from fdatasync). open() stops the log at the
// last whole record. What follows it may hold whole records of the same segment's
// writes that were never acknowledged (a torn write's later part): they are zeroed when
// they end within ZERO_CHUNK of the log's end; otherwise (a used-again segment's
// earlier records) an end of records is written there and the next write starts a new
// segment. A segment left for the next one always ends with an end of records, so a
// torn or invalid record anywhere but the end of the log is corruption, reported,
// never skipped. So is one in the last segment that reads as the next entry (its index
// whole) with whole entries after it that span more than one write can hold: the
// entries of a save are written ENTRY_WRITE_MAX bytes at a time, each part durable
// before the next, so only the last part can be torn, and
// entries beyond its reach were acknowledged. A damaged record (bit rot, a disk that
// lied) in the middle of the last segment is refused rather than read as the log's end,
// which would drop every acknowledged entry after it.
//
// A segment that is full is followed by the next, which starts with the hard state and
// the latest snapshot record, so that the segments before it are not needed to know
// them. A compaction (saveSnapshot) writes the snapshot's file, then its record, then
// frees the segments whose entries are all covered: it costs a few renames or unlinks,
// whatever the length of the log, and they run beside later writes, not ahead of them.
// The next segment is made in the background, ahead of need.
import { constants } from 'node:fs';
import { crc32 } from 'node:zlib';
import { mkdir, open, readdir, readFile, rename, rm, stat, type FileHandle } from 'node:fs/promises';
import { basename, join } from 'node:path';
import { assert } from './assert.js';
import { EMPTY_HARD_STATE } from './entry.js';
import type { Identity } from './identity.js';
import { checkSave, type LogStore, type SaveBatch } from './storage.js';
import { LogStoreCorruptError, decodeHardState, decodeIdentity, decodeMeta, encodeJson } from './store-records.js';
import type { Boot, Entry, HardState, Snapshot } from './types.js';

/** the size of a segment; a save larger than that gets a segment of its own size. */
export const SEGMENT_BYTES = 64 * 1024 * 1024;

const HEADER = 8;
const T_ENTRY = 1;
const T_HARD_STATE = 2;
const T_SNAPSHOT = 3;
const ENTRY_CONF = 1;
const ZERO_CHUNK = 1024 * 1024;
/** the most bytes of entry records one durable write holds: a larger save is written in parts. */
const ENTRY_WRITE_MAX = 1024 * 1024;
/** how far past the last whole entry the index of an entry found after a damaged record may be. */
const INDEX_REACH = 2 ** 24;
/** the freed segments kept to be used again; more are deleted. */
const FREE_KEPT = 2;
/** the seed of segments written before seeds: a plain CRC-32. */
const LEGACY_SEED = 0;
/** the most unsynced bytes kept to be written again by the next durable write. */
const UNSYNCED_KEPT = 64 * 1024;
const UNKNOWN = 'unknown';
type Unsynced = { from: number; parts: Uint8Array[] } | typeof UNKNOWN | null;
/** the flags of the handle that writes durably; null where the platform has no O_DSYNC. */
const DSYNC_FLAGS = constants.O_DSYNC === undefined ? null : constants.O_RDWR | constants.O_DSYNC;

interface Segment {
  seq: number;
  path: string;
  size: number;
  /** the highest entry index written in it; 0 when none. */
  maxIndex: number;
  /** the start value of its records' CRC-32: seedOf(seq), or LEGACY_SEED. */
  seed: number;
}

interface SnapshotRecord {
  index: number;
  term: number;
}

export interface WalOptions {
  /** the segment size (tests use small ones); default SEGMENT_BYTES. */
  segmentBytes?: number;
}

export class WalLogStore implements LogStore {
  private readonly segments: Segment[] = [];
  private fh: FileHandle | null = null;
  /** the current segment opened with O_DSYNC (see the head of the file); null with `fh`. */
  private dfh: FileHandle | null = null;
  /** the write position in the current segment (the last of `segments`). */
  private pos = 0;
  /**
   * The bytes of the current segment no sync has covered yet: null when there are
   * none; the span from `from` to the write position, when it was written since the
   * segment was opened and is small (a hard state that needed no sync, a new segment's
   * head), so a durable write can write it again ahead of its own records and cover it;
   * UNKNOWN when its extent is not known (what the segment held when it was opened) or
   * it grew past UNSYNCED_KEPT: the next durable write then syncs the whole segment.
   */
  private unsynced: Unsynced = null;
  private tail: Promise<void> = Promise.resolve();
  /** the deletions past compactions left to do, one after another (see dropCovered). */
  private cleanup: Promise<void> = Promise.resolve();
  /** the next segment, made ahead of need; null when none is being made. */
  private spare: Promise<Segment> | null = null;
  /** the freed segments kept to be used again (`.free` files of segmentBytes), oldest first. */
  private readonly free: string[] = [];
  /**
   * The last hard state and snapshot record written (not merely queued): a new
   * segment starts with them, and must not claim what a queued write has not yet made
   * durable (a commit index beyond the entries on disk).
   */
  private written: { hardState: HardState; snap: SnapshotRecord | null } = { hardState: { ...EMPTY_HARD_STATE }, snap: null };
  /** the log's bounds as load() sees them: entries (offset, last]. */
  private offset = 0;
  private last = 0;
  private boot: Boot | null = null;
  private failed: Error | null = null;

  /**
   * What open() dropped at the end of the log: the bytes of a record that was not whole
   * (a write cut by a crash, or a segment cut short), zeroed; null when the log ended on
   * a whole record. The node logs it.
   */
  droppedTail: { segment: string; offset: number; bytes: number } | null = null;

  private constructor(private readonly dir: string, private readonly segmentBytes: number) {}

  /** open opens (or creates) the store in `dir`, reads the log and repairs a torn tail. */
  static async open(dir: string, opts: WalOptions = {}): Promise<WalLogStore> {
    const store = new WalLogStore(dir, opts.segmentBytes ?? SEGMENT_BYTES);
    await mkdir(join(dir, 'snap'), { recursive: true });
    await store.replay();
    return store;
  }

  async load(): Promise<Boot> {
    await this.tail;
    // The log as open() read it, until a write changes it.
    if (this.boot !== null) {
      const b = this.boot;
      this.boot = null;
      return b;
    }
    // A load after writes reads the log again, as a restart would.
    const segments = this.segments.map((s) => ({ ...s }));
    const { boot } = await this.read(segments);
    return boot;
  }

  save(rd: SaveBatch): Promise<void> {
    const refused = checkSave(rd, { offset: this.offset, last: this.last });
    if (refused !== null) return Promise.reject(refused);
    const head = rd.entries[0];
    const offset = rd.snapshot?.meta.index ?? this.offset;
    this.boot = null;
    const records: Uint8Array[] = [];
    let maxIndex = 0;
    const snap = rd.snapshot === null ? null : { index: offset, term: rd.snapshot.meta.term };
    if (snap !== null) {
      this.offset = offset;
      this.last = offset;
      records.push(snapshotRecord(snap, true));
    }
    if (head !== undefined) {
      for (const e of rd.entries) records.push(entryRecord(e));
      this.last = head.index + rd.entries.length - 1;
      maxIndex = this.last;
    }
    const hardState = rd.hardState === null ? null : { ...rd.hardState };
    if (hardState !== null) records.push(hardStateRecord(hardState));
    if (records.length === 0) return this.tail;
    const snapshot = rd.snapshot;
    return this.enqueue(async () => {
      if (snapshot !== null) await this.writeSnapshotFile(snapshot);
      // Each part durable before the next: only the last can be torn (read()).
      for (const part of parts(records, ENTRY_WRITE_MAX)) await this.append(part, maxIndex, rd.mustSync || snapshot !== null || part !== records);
      if (snap !== null) this.written.snap = snap;
      if (hardState !== null) this.written.hardState = hardState;
    });
  }

  saveSnapshot(snapshot: Snapshot): Promise<void> {
    const index = snapshot.meta.index;
    if (index <= this.offset) return this.tail;
    this.boot = null;
    this.offset = index;
    this.last = Math.max(this.last, index);
    const record: SnapshotRecord = { index, term: snapshot.meta.term };
    return this.enqueue(async () => {
      await this.writeSnapshotFile(snapshot);
      await this.append([snapshotRecord(record, false)], 0, true);
      this.written.snap = record;
      this.dropCovered(index);
    });
  }

  /** Settles once the files past compactions made garbage are deleted, or kept to be used again. */
  async settled(): Promise<void> {
    await this.cleanup;
  }

  async identity(): Promise<Identity | null> {
    await this.tail;
    const bytes = await readFile(join(this.dir, 'identity.json')).catch((e: NodeJS.ErrnoException) => {
      if (e.code === 'ENOENT') return null;
      throw e;
    });
    return bytes === null ? null : decodeIdentity(bytes);
  }

  bootstrap(identity: Identity): Promise<void> {
    return this.enqueue(() => this.writeAtomically(join(this.dir, 'identity.json'), encodeJson(identity)));
  }

  async close(): Promise<void> {
    await this.tail.catch(() => undefined);
    await this.cleanup;
    const spare = this.spare;
    this.spare = null;
    // A spare being made is left to finish; an unfinished one is removed by the next open.
    await spare?.catch(() => undefined);
    await this.closeSegment();
  }

  private enqueue(write: () => Promise<void>): Promise<void> {
    const run = this.tail.then(() => {
      if (this.failed !== null) throw this.failed;
      return write();
    });
    // A failed write leaves the file's tail unknown: every later write fails too.
    this.tail = run.catch((e: unknown) => {
      this.failed ??= e instanceof Error ? e : new Error(String(e));
    });
    return run;
  }

  /** Writes `records` at the end of the current segment, cutting a new one if they do not fit. */
  private async append(records: Uint8Array[], maxIndex: number, sync: boolean): Promise<void> {
    const length = records.reduce((n, r) => n + r.length, 0);
    let seg = this.segments.at(-1);
    // HEADER: a record of length zero must fit after the last record, to end the segment.
    if (seg === undefined || this.fh === null || this.pos + length + HEADER > seg.size) {
      await this.cut(length);
      seg = this.segments.at(-1)!;
    }
    const bytes = seal(records, seg.seed);
    await (sync ? this.writeDurably(bytes) : this.writeUnsynced(bytes));
    this.pos += length;
    seg.maxIndex = Math.max(seg.maxIndex, maxIndex);
  }

  /**
   * Writes `bytes` at the write position, and returns once they and every byte before
   * them are durable. Through O_DSYNC, which makes durable only what it writes, the
   * unsynced bytes before them are written again with them (the same bytes, at the
   * same place); when those are not known, the whole segment is synced after the write.
   */
  private async writeDurably(bytes: Uint8Array): Promise<void> {
    const u = this.unsynced;
    if (this.dfh !== null && u !== UNKNOWN) {
      const from = u === null ? this.pos : u.from;
      const span = u === null ? bytes : concat([...u.parts, bytes]);
      assert(from + span.length === this.pos + bytes.length, `the unsynced bytes from ${from} do not end at the write position ${this.pos}`);
      await writeAll(this.dfh, span, from);
    } else {
      await writeAll(this.fh!, bytes, this.pos);
      await this.fh!.datasync();
    }
    this.unsynced = null;
  }

  private async writeUnsynced(bytes: Uint8Array): Promise<void> {
    await writeAll(this.fh!, bytes, this.pos);
    const u = this.unsynced;
    if (u === null) {
      this.unsynced = { from: this.pos, parts: [bytes] };
    } else if (u !== UNKNOWN && this.pos + bytes.length - u.from <= UNSYNCED_KEPT) {
      u.parts.push(bytes);
    } else {
      this.unsynced = UNKNOWN;
    }
  }

  /**
   * Makes the segment at `path` the current one, with its two handles, writing at
   * `pos`. `unsynced` says what of it no sync has covered: nothing for a segment just
   * made (its zeros were synced), UNKNOWN for one a process wrote before (records a
   * crashed process never synced may still be only in the page cache), so that the
   * first durable write after it syncs the whole segment.
   */
  private async openSegment(path: string, pos: number, unsynced: null | typeof UNKNOWN): Promise<void> {
    this.fh = await open(path, 'r+');
    this.dfh = DSYNC_FLAGS === null ? null : await open(path, DSYNC_FLAGS);
    this.pos = pos;
    this.unsynced = unsynced;
  }

  private async closeSegment(): Promise<void> {
    const closing = [this.fh?.close(), this.dfh?.close()];
    this.fh = null;
    this.dfh = null;
    await Promise.all(closing);
  }

  /**
   * Moves the writes to a new segment, which starts with the hard state and the
   * snapshot record. The segment left behind gets an end of records and is synced
   * first: records after it must never be durable while its own tail could be torn, or
   * while what follows its records could read as records. The new segment's head is
   * synced with the first synced write after it.
   */
  private async cut(need: number): Promise<void> {
    const { hardState, snap } = this.written;
    const head = [hardStateRecord(hardState), ...(snap === null ? [] : [snapshotRecord(snap, false)])];
    const headLength = head.reduce((n, r) => n + r.length, 0);
    const size = need + headLength + HEADER;
    const seq = (this.segments.at(-1)?.seq ?? 0) + 1;
    let next = this.spare === null ? null : await this.spare;
    this.spare = null;
    if (next === null || next.size < size) {
      if (next !== null) await rm(next.path, { force: true });
      next = await this.makeSegment(seq, Math.max(size, this.segmentBytes));
    }
    if (this.fh !== null) {
      await this.endSegment();
      await this.closeSegment();
    }
    // A new segment holds nothing of this log but its head: it is all the next durable write must cover.
    await this.openSegment(next.path, 0, null);
    await this.writeUnsynced(seal(head, next.seed));
    this.pos = headLength;
    this.segments.push(next);
    this.makeSpare();
  }

  /** Writes an end of records at the write position of the current segment, and syncs it. */
  private async endSegment(): Promise<void> {
    await writeAll(this.fh!, new Uint8Array(HEADER), this.pos);
    await this.fh!.datasync();
    this.unsynced = null;
  }

  /**
   * Makes the next segment ahead of need: a freed one renamed when one is kept, a new
   * file of zeros otherwise. `found`, the spare found after the last record at open, is
   * the spare itself when it is still the zeros it was made of, so that a restart does
   * not write and sync a whole segment again; otherwise (a write reached it, or it is a
   * freed one used again) it is dropped first. Beside the writes: the cut that needs
   * the spare waits for it.
   */
  private makeSpare(found?: Segment): void {
    const seq = this.segments.at(-1)!.seq + 1;
    const spare = (async (): Promise<Segment> => {
      if (found !== undefined) {
        if (await madeAndUnwritten(found.path, this.segmentBytes)) return { ...found, size: this.segmentBytes, maxIndex: 0, seed: seedOf(seq) };
        await rm(found.path, { force: true });
      }
      const free = this.free.shift();
      return free === undefined ? this.makeSegment(seq, this.segmentBytes) : this.reuse(free, seq);
    })();
    // An error surfaces at the cut that needs the spare.
    spare.catch(() => undefined);
    this.spare = spare;
  }

  /** Makes a zero-filled segment under a temporary name, then renames it into place. */
  private async makeSegment(seq: number, size: number): Promise<Segment> {
    const path = join(this.dir, segmentName(seq));
    const tmp = `${path}.tmp`;
    const fh = await open(tmp, 'w');
    try {
      // Synced a chunk at a time: one sync of the whole segment would put tens of
      // megabytes in the disk's queue ahead of the log's next synced write. The last
      // chunk's sync also makes the file's size durable.
      const zeros = new Uint8Array(Math.min(ZERO_CHUNK, size));
      for (let at = 0; at < size; at += zeros.length) {
        await writeAll(fh, zeros.subarray(0, Math.min(zeros.length, size - at)), at);
        await fh.datasync();
      }
    } finally {
      await fh.close();
    }
    await rename(tmp, path);
    await syncDir(this.dir);
    return { seq, path, size, maxIndex: 0, seed: seedOf(seq) };
  }

  /**
   * Makes segment `seq` of a freed one. Its old records stay until overwritten and
   * never check under the new seed; a crash before its first record leaves a segment
   * without records after the last one, which open() removes.
   */
  private async reuse(free: string, seq: number): Promise<Segment> {
    const path = join(this.dir, segmentName(seq));
    await rename(free, path);
    await syncDir(this.dir);
    return { seq, path, size: this.segmentBytes, maxIndex: 0, seed: seedOf(seq) };
  }

  /**
   * Frees the segments before the current one whose entries are all at or below
   * `index`, and deletes the snapshot files before it, once the snapshot's record is
   * durable. A freed segment is kept to be used again (renamed to `.free`) while fewer
   * than FREE_KEPT are, if it has the usual size and a seed; the others are deleted.
   * They are garbage from then on, so this runs beside the writes that follow instead
   * of ahead of them: an unlink on a busy filesystem can take hundreds of milliseconds,
   * and every commit would wait behind it. The segments leave the list at once, and
   * leave the directory oldest first, so the segments left stay numbered without a gap;
   * a crash before their files are gone leaves what a crash between the record and the
   * deletions always could, and open() reads past them. A rename or deletion that
   * fails fails the store, as a failed write does.
   */
  private dropCovered(index: number): void {
    const current = this.segments.at(-1);
    const drop = this.segments.filter((s) => s !== current && s.maxIndex <= index);
    this.segments.splice(0, this.segments.length, ...this.segments.filter((s) => !drop.includes(s)));
    this.cleanup = this.cleanup.then(async () => {
      const kept: string[] = [];
      for (const s of drop) {
        if (this.free.length + kept.length < FREE_KEPT && s.seed !== LEGACY_SEED && s.size === this.segmentBytes) {
          const path = join(this.dir, freeName(s.seq));
          await rename(s.path, path);
          kept.push(path);
        } else {
          await rm(s.path, { force: true });
        }
      }
      if (drop.length > 0) await syncDir(this.dir);
      this.free.push(...kept);
      const names = await readdir(join(this.dir, 'snap'));
      for (const n of names) {
        const i = snapshotIndexOf(n);
        if (i !== null && i < index) await rm(join(this.dir, 'snap', n), { force: true });
      }
    }).catch((e: unknown) => {
      this.failed ??= e instanceof Error ? e : new Error(String(e));
    });
  }

  private async writeSnapshotFile(s: Snapshot): Promise<void> {
    const meta = encodeJson(s.meta);
    const body = new Uint8Array(4 + meta.length + s.data.length);
    const view = new DataView(body.buffer);
    view.setUint32(0, meta.length);
    body.set(meta, 4);
    body.set(s.data, 4 + meta.length);
    const file = new Uint8Array(4 + body.length);
    new DataView(file.buffer).setUint32(0, crc32(body));
    file.set(body, 4);
    await this.writeAtomically(join(this.dir, 'snap', snapshotName(s.meta.index)), file);
  }

  private async writeAtomically(path: string, bytes: Uint8Array): Promise<void> {
    const tmp = `${path}.tmp`;
    const fh = await open(tmp, 'w');
    try {
      await writeAll(fh, bytes, 0);
      await fh.sync();
    } finally {
      await fh.close();
    }
    await rename(tmp, path);
    await syncDir(join(path, '..'));
  }

  private async readSnapshotFile(rec: SnapshotRecord): Promise<Snapshot> {
    const path = join(this.dir, 'snap', snapshotName(rec.index));
    const file = await readFile(path).catch((e: NodeJS.ErrnoException) => {
      if (e.code === 'ENOENT') throw new LogStoreCorruptError(`the log starts after snapshot ${rec.index}, whose file ${path} is missing`);
      throw e;
    });
    if (file.length < 8) throw new LogStoreCorruptError(`snapshot file ${path} is truncated`);
    const body = file.subarray(4);
    if (file.readUInt32BE(0) !== crc32(body)) throw new LogStoreCorruptError(`snapshot file ${path} fails its checksum`);
    const metaLength = body.readUInt32BE(0);
    if (4 + metaLength > body.length) throw new LogStoreCorruptError(`snapshot file ${path} is truncated`);
    const meta = decodeMeta(body.subarray(4, 4 + metaLength));
    if (meta.index !== rec.index || meta.term !== rec.term) {
      throw new LogStoreCorruptError(`snapshot file ${path} holds ${meta.index}/${meta.term}, the log names ${rec.index}/${rec.term}`);
    }
    return { meta, data: new Uint8Array(body.subarray(4 + metaLength)) };
  }

  /** Reads every segment at open: the boot state, the write position, what follows the last record zeroed or closed off. */
  private async replay(): Promise<void> {
    const names = (await readdir(this.dir)).sort();
    for (const n of names) if (n.endsWith('.tmp')) await rm(join(this.dir, n), { force: true });
    for (const n of names) {
      const seq = segmentSeqOf(n);
      if (seq !== null) this.segments.push({ seq, path: join(this.dir, n), size: 0, maxIndex: 0, seed: seedOf(seq) });
      if (!isFreeName(n)) continue;
      const path = join(this.dir, n);
      if (this.free.length < FREE_KEPT && (await stat(path)).size === this.segmentBytes) this.free.push(path);
      else await rm(path, { force: true });
    }
    this.segments.sort((a, b) => a.seq - b.seq);
    for (const [i, s] of this.segments.entries()) {
      if (i > 0 && s.seq !== this.segments[i - 1]!.seq + 1) throw new LogStoreCorruptError(`segment ${segmentName(this.segments[i - 1]!.seq + 1)} is missing`);
    }
    const { boot, end } = await this.read(this.segments);
    // The segments after the last record were made ahead of need (or their head was torn
    // by a crash): never acknowledged. The one right after it may become the spare
    // (makeSpare); the others are dropped, and made again when needed.
    const next = end.pos > 0 ? this.segments[end.segment + 1] : undefined;
    while (this.segments.length > end.segment + 1) {
      const s = this.segments.pop()!;
      if (s !== next) await rm(s.path, { force: true });
    }
    this.boot = boot;
    this.written.hardState = { ...boot.hardState };
    this.offset = boot.snapshot?.meta.index ?? 0;
    this.last = this.offset + boot.entries.length;
    this.written.snap = boot.snapshot === null ? null : { index: boot.snapshot.meta.index, term: boot.snapshot.meta.term };
    const seg = this.segments.at(-1);
    if (seg === undefined) return;
    if (end.pos === 0) {
      // No whole record at all: the first write starts a new segment, numbered from 1
      // again, so no freed segment may be used again (it could have the same number).
      await rm(this.segments.pop()!.path, { force: true });
      for (const path of this.free.splice(0)) await rm(path, { force: true });
      return;
    }
    await this.openSegment(seg.path, end.pos, UNKNOWN);
    const zeroed = await zeroTail(this.fh!, this.pos, end.lastNonZero);
    if (zeroed !== null && zeroed > 0) this.droppedTail = { segment: basename(seg.path), offset: end.pos, bytes: zeroed };
    if (zeroed === null) {
      // Too much to zero: the segment ends here, and the next write starts a new one.
      await this.endSegment();
      await this.closeSegment();
    }
    this.makeSpare(next);
  }

  /**
   * Reads `segments` in order into the boot state. The first invalid record ends the
   * log if it is in the last segment written; anywhere else it is corruption.
   */
  private async read(segments: Segment[]): Promise<{ boot: Boot; end: { segment: number; pos: number; lastNonZero: number } }> {
    let hardState: HardState = { ...EMPTY_HARD_STATE };
    let snap: SnapshotRecord | null = null;
    let first = 0;
    let entries: Entry[] = [];
    let end = { segment: 0, pos: 0 };
    /** the last non-zero byte after the last whole record, in its segment (read here, not again). */
    let tail = -1;
    for (const [si, seg] of segments.entries()) {
      const { bytes, size } = await readSegment(seg.path);
      seg.size = size;
      seg.maxIndex = 0;
      seg.seed = seedIn(bytes, seg.seq);
      let pos = 0;
      /** the last non-zero byte after an invalid record, found for the search behind it. */
      let lastAfterInvalid: number | null = null;
      for (;;) {
        const rec = recordAt(bytes, pos, seg.seed);
        if (rec === 'end') break;
        if (rec === 'invalid') {
          const later = segments.slice(si + 1);
          if (later.length > 0 && (await anyRecords(later))) {
            throw new LogStoreCorruptError(`segment ${segmentName(seg.seq)}: an invalid record at byte ${pos}, and records after it`);
          }
          const lastIndex = entries.length === 0 ? snap?.index ?? 0 : first + entries.length - 1;
          lastAfterInvalid = lastNonZero(bytes, pos);
          const after = nextEntryAt(bytes, pos, lastIndex) ? entriesAfter(bytes, pos, seg.seed, lastIndex, lastAfterInvalid) : null;
          if (after !== null && after.to - after.from > ENTRY_WRITE_MAX) {
            throw new LogStoreCorruptError(`segment ${segmentName(seg.seq)}: an invalid record at byte ${pos}, and whole entries after it from byte ${after.from} to ${after.to}, `
              + `more than the last write could hold: they were acknowledged, and reading the log only to the damaged record would lose them`);
          }
          break;
        }
        const body = rec;
        const view = new DataView(body.buffer, body.byteOffset, body.byteLength);
        switch (body[0]) {
          case T_ENTRY: {
            if (body.length < 18) throw new LogStoreCorruptError(`segment ${segmentName(seg.seq)}: a short entry at byte ${pos}`);
            const e: Entry = { index: Number(view.getBigUint64(1)), term: Number(view.getBigUint64(9)), data: new Uint8Array(body.subarray(18)) };
            if (body[17] === ENTRY_CONF) e.type = 'conf';
            // An entry at i replaces the entries from i on; one after a gap starts a new
            // run (the entries between were in segments a compaction freed).
            if (entries.length === 0 || e.index <= first || e.index > first + entries.length) {
              entries = [e];
              first = e.index;
            } else {
              entries.length = e.index - first;
              entries.push(e);
            }
            seg.maxIndex = Math.max(seg.maxIndex, e.index);
            break;
          }
          case T_HARD_STATE:
            hardState = decodeHardState(body.subarray(1));
            break;
          case T_SNAPSHOT: {
            if (body.length < 18) throw new LogStoreCorruptError(`segment ${segmentName(seg.seq)}: a short snapshot record at byte ${pos}`);
            snap = { index: Number(view.getBigUint64(1)), term: Number(view.getBigUint64(9)) };
            if (body[17] === 1) {
              entries = [];
            } else if (entries.length > 0 && first <= snap.index) {
              entries = entries.slice(snap.index - first + 1);
              first = snap.index + 1;
            }
            break;
          }
          default:
            throw new LogStoreCorruptError(`segment ${segmentName(seg.seq)}: unknown record type ${String(body[0])} at byte ${pos}`);
        }
        pos += HEADER + body.length;
        end = { segment: si, pos };
      }
      // After an invalid record in a segment with whole ones, end.pos is where it starts.
      if (end.segment === si) tail = lastAfterInvalid ?? lastNonZero(bytes, end.pos);
    }
    const snapshot = snap === null ? null : await this.readSnapshotFile(snap);
    const offset = snap?.index ?? 0;
    if (entries.length > 0 && first <= offset) {
      entries = entries.slice(Math.min(entries.length, offset - first + 1));
      first = offset + 1;
    }
    if (entries.length > 0 && first !== offset + 1) throw new LogStoreCorruptError(`the log has a gap: it starts at ${first}, after snapshot ${offset}`);
    // The commit index may lag (it is written without sync): never below the snapshot.
    hardState.commit = Math.max(hardState.commit, offset);
    if (hardState.commit > offset + entries.length) {
      throw new LogStoreCorruptError(`commit ${hardState.commit} beyond the stored log (${offset + entries.length})`);
    }
    return { boot: { hardState, snapshot, entries }, end: { ...end, lastNonZero: tail } };
  }
}

/**
 * Records in parts of about `max` bytes each (a record is never split; one larger than
 * `max` is a part alone); the records themselves when they fit in one.
 */
function parts(records: Uint8Array[], max: number): Uint8Array[][] {
  const out: Uint8Array[][] = [];
  let part: Uint8Array[] = [];
  let bytes = 0;
  for (const r of records) {
    if (part.length > 0 && bytes + r.length > max) {
      out.push(part);
      part = [];
      bytes = 0;
    }
    part.push(r);
    bytes += r.length;
  }
  if (part.length > 0) out.push(part);
  return out.length === 1 ? [records] : out;
}

/**
 * Whether the invalid record at `pos` reads as the log's next entry (its type and its
 * index, lastIndex + 1, whole: a damaged body or length). Only then is the rest of the
 * segment searched (entriesAfter). What a used-again segment held before, which follows
 * the log's end at every open of such a segment, is older entries or no record at all,
 * and is not searched: the search costs about a second per 200 MiB.
 */
function nextEntryAt(bytes: Uint8Array, pos: number, lastIndex: number): boolean {
  if (pos + HEADER + 17 > bytes.length || bytes[pos + HEADER] !== T_ENTRY) return false;
  return new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength).getBigUint64(pos + HEADER + 1) === BigInt(lastIndex + 1);
}

/**
 * The bytes spanned by the whole entry records of `seed` found after the invalid
 * record at `pos`, or null when there is none. The invalid record's own length may be
 * damaged, so every offset is tried; a candidate must be an entry whose index follows
 * `lastIndex` within INDEX_REACH before its checksum is computed, which random bytes
 * and the records of a segment's earlier life (another seed, older indexes) do not pass.
 * An entry's type byte is not zero, so no candidate starts later than HEADER bytes
 * before `last`, the segment's last non-zero byte: the zeros a segment is made of are
 * not searched (a torn write at the end of a 64 MiB segment was searched to its end).
 */
function entriesAfter(bytes: Uint8Array, pos: number, seed: number, lastIndex: number, last: number): { from: number; to: number } | null {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let from = -1;
  let to = -1;
  let p = pos + 1;
  while (p + HEADER + 18 <= bytes.length && p + HEADER <= last) {
    const length = view.getUint32(p);
    if (length >= 18 && bytes[p + HEADER] === T_ENTRY && p + HEADER + length <= bytes.length) {
      const index = Number(view.getBigUint64(p + HEADER + 1));
      if (index > lastIndex && index - lastIndex <= INDEX_REACH && recordAt(bytes, p, seed) instanceof Uint8Array) {
        if (from < 0) from = p;
        to = p + HEADER + length;
        p = to;
        continue;
      }
    }
    p++;
  }
  return from < 0 ? null : { from, to };
}

/** The record at `pos`: its body, 'end' at a zero length, 'invalid' if it is cut or fails its checksum under `seed`. */
function recordAt(bytes: Uint8Array, pos: number, seed: number): Uint8Array | 'end' | 'invalid' {
  if (pos + HEADER > bytes.length) return 'end';
  const view = new DataView(bytes.buffer, bytes.byteOffset + pos, HEADER);
  const length = view.getUint32(0);
  if (length === 0) return view.getUint32(4) === 0 ? 'end' : 'invalid';
  if (pos + HEADER + length > bytes.length) return 'invalid';
  const body = bytes.subarray(pos + HEADER, pos + HEADER + length);
  return crc32(body, seed) === view.getUint32(4) ? body : 'invalid';
}

/**
 * The seed of segment `seq`: any 2³² − 1 consecutive numbers get different seeds, none
 * of them LEGACY_SEED.
 */
function seedOf(seq: number): number {
  return (seq % 0xffff_ffff) + 1;
}

/**
 * The seed a segment's records were written with: LEGACY_SEED if its first record
 * checks only as a plain CRC-32, its own seed otherwise (also when it has no record).
 */
function seedIn(bytes: Uint8Array, seq: number): number {
  const seed = seedOf(seq);
  return recordAt(bytes, 0, seed) === 'invalid' && recordAt(bytes, 0, LEGACY_SEED) instanceof Uint8Array ? LEGACY_SEED : seed;
}

/** A record whose CRC-32 is filled in by seal(). */
function record(body: Uint8Array): Uint8Array {
  const out = new Uint8Array(HEADER + body.length);
  new DataView(out.buffer).setUint32(0, body.length);
  out.set(body, HEADER);
  return out;
}

/** Fills in the CRC-32 of each record under `seed`, and joins them into one write. */
function seal(records: Uint8Array[], seed: number): Uint8Array {
  for (const r of records) new DataView(r.buffer, r.byteOffset, HEADER).setUint32(4, crc32(r.subarray(HEADER), seed));
  return concat(records);
}

function entryRecord(e: Entry): Uint8Array {
  const out = new Uint8Array(HEADER + 18 + e.data.length);
  const view = new DataView(out.buffer);
  out[HEADER] = T_ENTRY;
  view.setBigUint64(HEADER + 1, BigInt(e.index));
  view.setBigUint64(HEADER + 9, BigInt(e.term));
  out[HEADER + 17] = e.type === 'conf' ? ENTRY_CONF : 0;
  out.set(e.data, HEADER + 18);
  view.setUint32(0, out.length - HEADER);
  return out;
}

function hardStateRecord(hs: HardState): Uint8Array {
  const json = encodeJson({ term: hs.term, vote: hs.vote, commit: hs.commit });
  const body = new Uint8Array(1 + json.length);
  body[0] = T_HARD_STATE;
  body.set(json, 1);
  return record(body);
}

function snapshotRecord(s: SnapshotRecord, replaces: boolean): Uint8Array {
  const body = new Uint8Array(18);
  const view = new DataView(body.buffer);
  body[0] = T_SNAPSHOT;
  view.setBigUint64(1, BigInt(s.index));
  view.setBigUint64(9, BigInt(s.term));
  body[17] = replaces ? 1 : 0;
  return record(body);
}

function concat(parts: Uint8Array[]): Uint8Array {
  if (parts.length === 1) return parts[0]!;
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

async function writeAll(fh: FileHandle, bytes: Uint8Array, position: number): Promise<void> {
  let done = 0;
  while (done < bytes.length) {
    const { bytesWritten } = await fh.write(bytes, done, bytes.length - done, position + done);
    done += bytesWritten;
  }
}

/**
 * Zeroes a segment from `from` up to `last`, its last non-zero byte (a torn write's
 * remains), if that is at most ZERO_CHUNK bytes, and answers how many bytes it zeroed;
 * answers null, writing nothing, if it is more.
 */
async function zeroTail(fh: FileHandle, from: number, last: number): Promise<number | null> {
  if (last < from) return 0;
  if (last + 1 - from > ZERO_CHUNK) return null;
  await writeAll(fh, new Uint8Array(last + 1 - from), from);
  await fh.datasync();
  return last + 1 - from;
}

/**
 * Whether the segment at `path` is one makeSegment made and nothing wrote: `size`
 * bytes, all zero. Read whole, not by its first record alone: a crash during the first
 * write to a new segment can leave a later sector of that write on the disk without the
 * first, and such records, under the seed the segment would have again, must not
 * follow its next life's records.
 */
async function madeAndUnwritten(path: string, size: number): Promise<boolean> {
  const fh = await open(path, 'r');
  try {
    if ((await fh.stat()).size !== size) return false;
    const chunk = new Uint8Array(Math.min(ZERO_CHUNK, size));
    for (let at = 0; at < size; at += chunk.length) {
      const part = chunk.subarray(0, Math.min(chunk.length, size - at));
      await readAll(fh, part, at);
      if (lastNonZero(part, 0) !== -1) return false;
    }
    return true;
  } finally {
    await fh.close();
  }
}

/**
 * The offset of the last non-zero byte of `bytes` at or after `from`, or -1 if there is
 * none. A segment's tail is mostly zeros (its space is made ahead), so the scan runs
 * from the end, a 32-bit word at a time.
 */
export function lastNonZero(bytes: Uint8Array, from: number): number {
  let i = bytes.length;
  // Byte by byte down to a word boundary of the buffer, then whole words, then byte by byte.
  while (i > from && (bytes.byteOffset + i) % 4 !== 0) if (bytes[--i] !== 0) return i;
  const lo = from + ((4 - ((bytes.byteOffset + from) % 4)) % 4);
  if (i - lo >= 4) {
    const words = new Uint32Array(bytes.buffer, bytes.byteOffset + lo, (i - lo) >> 2);
    let w = words.length;
    while (w > 0 && words[w - 1] === 0) w--;
    i = lo + w * 4;
  }
  while (i > from) if (bytes[--i] !== 0) return i;
  return -1;
}

/**
 * A segment's bytes and its size. One whose first record header is zeros holds no
 * record (a segment made ahead of need, which a restart finds after the last one
 * written): only that header is read, not the segment's 64 MiB of zeros.
 */
async function readSegment(path: string): Promise<{ bytes: Uint8Array; size: number }> {
  const fh = await open(path, 'r');
  try {
    const { size } = await fh.stat();
    const head = new Uint8Array(Math.min(HEADER, size));
    await readAll(fh, head, 0);
    if (head.every((b) => b === 0)) return { bytes: head, size };
    const bytes = new Uint8Array(size);
    bytes.set(head);
    await readAll(fh, bytes.subarray(head.length), head.length);
    return { bytes, size };
  } finally {
    await fh.close();
  }
}

/** Fills `into` from the file at `position`; a file shorter than that is an error. */
async function readAll(fh: FileHandle, into: Uint8Array, position: number): Promise<void> {
  let done = 0;
  while (done < into.length) {
    const { bytesRead } = await fh.read(into, done, into.length - done, position + done);
    if (bytesRead === 0) throw new LogStoreCorruptError(`a segment ended at byte ${position + done} while it was read (it was ${position + into.length} bytes)`);
    done += bytesRead;
  }
}

/** Whether any of `segments` starts with a whole record, under its seed or as a plain CRC-32. */
async function anyRecords(segments: Segment[]): Promise<boolean> {
  for (const s of segments) {
    const { bytes } = await readSegment(s.path);
    if (recordAt(bytes, 0, seedIn(bytes, s.seq)) instanceof Uint8Array) return true;
  }
  return false;
}

async function syncDir(dir: string): Promise<void> {
  const fh = await open(dir, 'r');
  try {
    await fh.sync();
  } finally {
    await fh.close();
  }
}

const segmentName = (seq: number) => `${seq.toString(16).padStart(16, '0')}.wal`;
const freeName = (seq: number) => `${seq.toString(16).padStart(16, '0')}.free`;
const snapshotName = (index: number) => `${index.toString(16).padStart(16, '0')}.snap`;

function segmentSeqOf(name: string): number | null {
  const m = /^([0-9a-f]{16})\.wal$/.exec(name);
  return m === null ? null : Number.parseInt(m[1]!, 16);
}

const isFreeName = (name: string) => /^[0-9a-f]{16}\.free$/.test(name);

function snapshotIndexOf(name: string): number | null {
  const m = /^([0-9a-f]{16})\.snap$/.exec(name);
  return m === null ? null : Number.parseInt(m[1]!, 16);
}
