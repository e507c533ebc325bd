// RaftLog is a node's in-memory copy of its log: the latest snapshot and the entries
// after it, with the indexes that say how far the log is committed, applied, handed to
// storage and known durable. The core keeps the entries since the last compaction in
// memory; storage holds the same entries durably and is written only through Ready.
//
// Index layout (all inclusive unless marked):
//
//   [1, offset]                  compacted into `snapshot`
//   (offset, lastIndex]          `entries`
//   applied <= committed <= lastIndex
//   persisted <= handed <= lastIndex: entries (handed, lastIndex] are not yet in any Ready
import { assert } from './assert.js';
import { limitBytes } from './entry.js';
import type { ConfState, Entry, Snapshot } from './types.js';

export class RaftLog {
  /** snapshot is the latest snapshot, or null when nothing was ever compacted. */
  snapshot: Snapshot | null = null;
  /** offset is the last index the snapshot covers (0 without one). Invariant: entries[k].index === offset + 1 + k. */
  offset = 0;
  /** offsetTerm is the term of the entry at `offset` (0 without a snapshot). */
  offsetTerm = 0;
  entries: Entry[] = [];
  /** committed is the highest index known committed. Invariant: it never goes back. */
  committed = 0;
  /** applied is the highest index the application has applied. Invariant: applied <= committed. */
  applied = 0;
  /** persisted: entries [1, persisted] are durable and equal to this log. */
  persisted = 0;
  /** handed: entries [1, handed] were given to storage in some Ready. Invariant: persisted <= handed. */
  handed = 0;
  /** pendingSnapshot is a snapshot received from the leader and not yet handed to a Ready. */
  pendingSnapshot: Snapshot | null = null;

  /** boot restores a log loaded from storage: everything in it is durable. */
  static boot(snapshot: Snapshot | null, entries: Entry[], commit: number): RaftLog {
    const log = new RaftLog();
    if (snapshot !== null) {
      log.snapshot = snapshot;
      log.offset = snapshot.meta.index;
      log.offsetTerm = snapshot.meta.term;
    }
    entries.forEach((e, k) => {
      assert(e.index === log.offset + 1 + k, `stored entries are contiguous from ${log.offset + 1}`);
    });
    log.entries = entries.slice();
    const last = log.lastIndex();
    assert(commit <= last, `stored commit ${commit} <= stored last index ${last}`);
    log.committed = Math.max(commit, log.offset);
    log.applied = log.offset;
    log.persisted = last;
    log.handed = last;
    return log;
  }

  lastIndex(): number {
    return this.offset + this.entries.length;
  }

  lastTerm(): number {
    return this.term(this.lastIndex()) as number;
  }

  firstIndex(): number {
    return this.offset + 1;
  }

  /** term of the entry at `index`, or undefined when it is compacted or beyond the log. */
  term(index: number): number | undefined {
    if (index === this.offset) return this.offsetTerm;
    if (index < this.offset || index > this.lastIndex()) return undefined;
    return (this.entries[index - this.offset - 1] as Entry).term;
  }

  entry(index: number): Entry | undefined {
    if (index <= this.offset) return undefined;
    return this.entries[index - this.offset - 1];
  }

  matchTerm(index: number, term: number): boolean {
    return this.term(index) === term;
  }

  /** isUpToDate: a log ending at (lastIndex, lastTerm) is at least as up to date as ours (§5.4.1). */
  isUpToDate(lastIndex: number, lastTerm: number): boolean {
    const ourTerm = this.lastTerm();
    return lastTerm > ourTerm || (lastTerm === ourTerm && lastIndex >= this.lastIndex());
  }

  /**
   * slice returns entries [lo, hi) limited to `maxBytes` (at least one entry), or
   * undefined when `lo` is compacted away, in which case only a snapshot can help.
   */
  slice(lo: number, hi: number, maxBytes: number): Entry[] | undefined {
    if (lo <= this.offset) return undefined;
    assert(hi <= this.lastIndex() + 1, `slice [${lo}, ${hi}) within the log`);
    if (lo >= hi) return [];
    const ents = this.entries.slice(lo - this.offset - 1, hi - this.offset - 1);
    return limitBytes(ents, maxBytes);
  }

  /**
   * findConflictByTerm returns the highest index <= `index` whose term is at most `term`,
   * with that term. A follower uses it to tell the leader where their logs may agree, and
   * the leader uses it on the follower's answer: every entry between has a larger term
   * and cannot match, so a whole term of conflicts is skipped in one round trip.
   */
  findConflictByTerm(index: number, term: number): { index: number; term: number } {
    let k = Math.min(index, this.lastIndex());
    if (k < this.offset) return { index: k, term: 0 };
    for (; k > this.offset; k--) {
      const t = this.term(k) as number;
      if (t <= term) return { index: k, term: t };
    }
    // Entries up to the snapshot are committed, so they agree with every leader's log.
    return { index: this.offset, term: this.offsetTerm };
  }

  /** append adds entries at the end (the leader's own proposals). Returns the new last index. */
  append(ents: Entry[]): number {
    if (ents.length === 0) return this.lastIndex();
    assert((ents[0] as Entry).index === this.lastIndex() + 1, 'append continues the log');
    for (const e of ents) this.entries.push(e);
    return this.lastIndex();
  }

  /**
   * maybeAppend is a follower's AppendEntries (§5.3): if our log has (prevIndex, prevTerm),
   * delete the first conflicting entry and all that follow it, append what is new, and
   * advance commit to min(commit, index of the last new entry). Returns that last index,
   * or null when the consistency check fails.
   */
  maybeAppend(prevIndex: number, prevTerm: number, commit: number, ents: Entry[]): number | null {
    if (!this.matchTerm(prevIndex, prevTerm)) return null;
    const lastNew = prevIndex + ents.length;
    const conflict = this.findConflict(ents);
    if (conflict !== 0) {
      assert(conflict > this.committed, `conflict at ${conflict} is above committed ${this.committed}`);
      this.truncateAndAppend(ents.slice(conflict - prevIndex - 1));
    }
    this.commitTo(Math.min(commit, lastNew));
    return lastNew;
  }

  /** findConflict returns the index of the first entry of `ents` we lack or disagree with, or 0. */
  private findConflict(ents: Entry[]): number {
    for (const e of ents) if (!this.matchTerm(e.index, e.term)) return e.index;
    return 0;
  }

  private truncateAndAppend(ents: Entry[]): void {
    const first = (ents[0] as Entry).index;
    assert(first > this.offset && first <= this.lastIndex() + 1, 'truncate within the log');
    this.entries.length = first - this.offset - 1;
    for (const e of ents) this.entries.push(e);
    // What was durable or handed beyond `first` is gone: storage must rewrite from `first`.
    this.persisted = Math.min(this.persisted, first - 1);
    this.handed = Math.min(this.handed, first - 1);
  }

  commitTo(index: number): void {
    if (index <= this.committed) return;
    assert(index <= this.lastIndex(), `commit ${index} <= last index ${this.lastIndex()}`);
    this.committed = index;
  }

  appliedTo(index: number): void {
    assert(index <= this.committed, `applied ${index} <= committed ${this.committed}`);
    assert(index >= this.applied, `applied ${index} does not go back from ${this.applied}`);
    this.applied = index;
  }

  /**
   * stableTo records that `saved` (the entries of one Ready) are durable. Entries the log
   * has rewritten since that Ready are not durable in their new form: the highest saved
   * entry that still matches the log (by index and term, hence by the log matching
   * property everything before it too) is what became durable.
   */
  stableTo(saved: Entry[]): void {
    for (let k = saved.length - 1; k >= 0; k--) {
      const e = saved[k] as Entry;
      if (!this.matchTerm(e.index, e.term)) continue;
      if (e.index > this.persisted) this.persisted = e.index;
      return;
    }
  }

  /** unstableEntries are the entries not yet handed to storage. */
  unstableEntries(): Entry[] {
    const from = Math.max(this.handed, this.offset);
    return this.entries.slice(from - this.offset);
  }

  /** nextCommitted returns committed entries not yet applied, at most `maxBytes` (at least one). */
  nextCommitted(maxBytes: number): Entry[] {
    const lo = Math.max(this.applied, this.offset) + 1;
    if (lo > this.committed) return [];
    return this.slice(lo, this.committed + 1, maxBytes) as Entry[];
  }

  hasNextCommitted(): boolean {
    return this.committed > Math.max(this.applied, this.offset);
  }

  /**
   * restore replaces the whole log with a snapshot from the leader. The snapshot's entries
   * are committed by definition; it must be persisted (Ready.snapshot) before the answer
   * to the leader is sent, which is why the answer travels in the same Ready.
   */
  restore(s: Snapshot): void {
    assert(s.meta.index > this.committed, 'restore only a snapshot beyond commit');
    this.snapshot = s;
    this.offset = s.meta.index;
    this.offsetTerm = s.meta.term;
    this.entries = [];
    this.committed = s.meta.index;
    this.persisted = s.meta.index;
    this.handed = s.meta.index;
    this.pendingSnapshot = s;
  }

  /**
   * compact makes a snapshot of the application's state at `index` and discards the
   * entries it covers. Invariant: offset < index <= applied, so all discarded entries are
   * durable and applied.
   */
  compact(index: number, data: Uint8Array, conf: ConfState): Snapshot {
    assert(index > this.offset && index <= this.applied, `compact index ${index} within (${this.offset}, ${this.applied}]`);
    const term = this.term(index) as number;
    const snapshot: Snapshot = { meta: { index, term, conf }, data };
    this.entries = this.entries.slice(index - this.offset);
    this.snapshot = snapshot;
    this.offset = index;
    this.offsetTerm = term;
    return snapshot;
  }
}
