// The storage contract, and an in-memory store that models a disk.
//
// A LogStore holds what a node needs to restart: the hard state, the latest snapshot and
// the entries after it. Writes come in the order the node produces them and each one is
// atomic. `save` follows a Ready: a snapshot replaces the whole log, then `entries` are
// written, deleting any stored entry at or after the first one's index (a conflicting
// suffix), then the hard state. When `mustSync` is set the write is durable (fsync)
// before the promise resolves; the caller sends the Ready's messages only after that.
import { assert } from './assert.js';
import { EMPTY_HARD_STATE } from './entry.js';
import type { Identity } from './identity.js';
import type { Boot, Entry, HardState, Ready, Snapshot } from './types.js';

/** SaveBatch is the part of a Ready that a store writes. */
export type SaveBatch = Pick<Ready, 'hardState' | 'snapshot' | 'entries' | 'mustSync'>;

export interface LogStore {
  /** load returns everything needed to restart the node (see Boot). */
  load(): Promise<Boot>;
  /** save writes one Ready's hard state, snapshot and entries in one atomic batch. */
  save(rd: SaveBatch): Promise<void>;
  /**
   * saveSnapshot stores a compaction snapshot (its data, index, term and members: the
   * applied index and the state at it), synced; the entries it covers are never loaded
   * again. A store may delete them later, a bounded number per write (LevelLogStore
   * does). A snapshot not beyond the stored one is ignored.
   */
  saveSnapshot(snapshot: Snapshot): Promise<void>;
  /** identity is what bootstrap wrote, or null for a store never bootstrapped. */
  identity(): Promise<Identity | null>;
  /** bootstrap records the member's identity, synced (see identity.ts). */
  bootstrap(identity: Identity): Promise<void>;
  close(): Promise<void>;
}

/**
 * checkSave refuses a save whose entries would not follow the stored log `(offset,
 * last]` (after the save's own snapshot, if it has one): a gap, or entries at or below
 * the snapshot. Every store checks it before writing anything.
 */
export function checkSave(rd: SaveBatch, bounds: { offset: number; last: number }): RangeError | null {
  const head = rd.entries[0];
  const offset = rd.snapshot?.meta.index ?? bounds.offset;
  const last = rd.snapshot === null ? bounds.last : offset;
  if (head === undefined || (head.index > offset && head.index <= last + 1)) return null;
  return new RangeError(`save: entries start at ${head.index}; the stored log is (${offset}, ${last}]`);
}

/** DiskState is the content of a store: the log is `entries` after `snapshot`. */
interface DiskState {
  hardState: HardState;
  snapshot: Snapshot | null;
  entries: Entry[];
}

type Write = { kind: 'save'; batch: SaveBatch } | { kind: 'snapshot'; snapshot: Snapshot };

/**
 * MemoryLogStore keeps the log in memory and models a disk with a write cache: a write
 * with `sync` makes it and every earlier write durable; a write without it is visible to
 * load() but lost by crash(). The simulator and the benchmark use its synchronous
 * methods; `syncCount` counts fsyncs.
 */
export class MemoryLogStore implements LogStore {
  private durable: DiskState = { hardState: { ...EMPTY_HARD_STATE }, snapshot: null, entries: [] };
  /** writes accepted without sync, oldest first; a crash loses them. */
  private unsynced: Write[] = [];
  /** the bounds of the log as load() would see it: (offset, last]. */
  private bounds = { offset: 0, last: 0 };
  private stored: Identity | null = null;
  syncCount = 0;

  identitySync(): Identity | null {
    return this.stored === null ? null : { ...this.stored, members: [...this.stored.members] };
  }

  /** bootstrapSync is synced: it survives a crash. */
  bootstrapSync(identity: Identity): void {
    this.stored = { ...identity, members: [...identity.members] };
  }

  identity(): Promise<Identity | null> {
    return Promise.resolve(this.identitySync());
  }

  bootstrap(identity: Identity): Promise<void> {
    this.bootstrapSync(identity);
    return Promise.resolve();
  }

  loadSync(): Boot {
    const view = cloneState(this.durable);
    for (const w of this.unsynced) applyWrite(view, w);
    return toBoot(view);
  }

  saveSync(rd: SaveBatch): void {
    if (rd.hardState === null && rd.snapshot === null && rd.entries.length === 0) return;
    const refused = checkSave(rd, this.bounds);
    if (refused !== null) throw refused;
    this.write({ kind: 'save', batch: { hardState: rd.hardState, snapshot: rd.snapshot, entries: rd.entries, mustSync: rd.mustSync } }, rd.mustSync);
  }

  saveSnapshotSync(snapshot: Snapshot): void {
    this.write({ kind: 'snapshot', snapshot }, true);
  }

  /** crash models a power loss: writes that were not synced are gone. */
  crash(): void {
    this.unsynced = [];
    const offset = this.durable.snapshot?.meta.index ?? 0;
    this.bounds = { offset, last: offset + this.durable.entries.length };
  }

  /**
   * durableTerm is the term of the durable entry at `index`, 'snapshot' when the durable
   * snapshot covers it, or undefined when the disk does not hold it. For checkers.
   */
  durableTerm(index: number): number | 'snapshot' | undefined {
    const offset = this.durable.snapshot?.meta.index ?? 0;
    if (index <= offset) return 'snapshot';
    return this.durable.entries[index - offset - 1]?.term;
  }

  load(): Promise<Boot> {
    return Promise.resolve(this.loadSync());
  }

  save(rd: SaveBatch): Promise<void> {
    try {
      this.saveSync(rd);
      return Promise.resolve();
    } catch (err) {
      return Promise.reject(err as Error);
    }
  }

  saveSnapshot(snapshot: Snapshot): Promise<void> {
    this.saveSnapshotSync(snapshot);
    return Promise.resolve();
  }

  close(): Promise<void> {
    return Promise.resolve();
  }

  private write(w: Write, sync: boolean): void {
    this.bounds = nextBounds(this.bounds, w);
    if (!sync) {
      this.unsynced.push(w);
      return;
    }
    for (const u of this.unsynced) applyWrite(this.durable, u);
    this.unsynced = [];
    applyWrite(this.durable, w);
    this.syncCount++;
  }
}

function applyWrite(s: DiskState, w: Write): void {
  if (w.kind === 'snapshot') {
    const offset = s.snapshot?.meta.index ?? 0;
    if (w.snapshot.meta.index <= offset) return;
    s.entries = s.entries.slice(Math.min(w.snapshot.meta.index - offset, s.entries.length));
    s.snapshot = w.snapshot;
    return;
  }
  const b = w.batch;
  if (b.snapshot !== null) {
    s.snapshot = b.snapshot;
    s.entries = [];
  }
  const first = b.entries[0];
  if (first !== undefined) {
    const offset = s.snapshot?.meta.index ?? 0;
    assert(first.index > offset && first.index <= offset + s.entries.length + 1, `stored log continues at ${first.index}`);
    s.entries.length = first.index - offset - 1;
    for (const e of b.entries) s.entries.push(e);
  }
  if (b.hardState !== null) s.hardState = { ...b.hardState };
}

function nextBounds(b: { offset: number; last: number }, w: Write): { offset: number; last: number } {
  if (w.kind === 'snapshot') {
    const index = w.snapshot.meta.index;
    return index <= b.offset ? b : { offset: index, last: Math.max(b.last, index) };
  }
  let { offset, last } = b;
  if (w.batch.snapshot !== null) {
    offset = w.batch.snapshot.meta.index;
    last = offset;
  }
  const tail = w.batch.entries[w.batch.entries.length - 1];
  if (tail !== undefined) last = tail.index;
  return { offset, last };
}

function cloneState(s: DiskState): DiskState {
  return { hardState: { ...s.hardState }, snapshot: s.snapshot, entries: s.entries.slice() };
}

function toBoot(s: DiskState): Boot {
  const offset = s.snapshot?.meta.index ?? 0;
  return {
    hardState: { ...s.hardState, commit: Math.max(s.hardState.commit, offset) },
    snapshot: s.snapshot,
    entries: s.entries,
  };
}
