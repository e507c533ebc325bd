// Membership: who votes, who only listens, and how that changes one server at a time.
//
// A configuration (ConfState) names the voters, the learners (members that receive the
// log but neither vote nor count toward a quorum) and an opaque context per member that
// the application chooses (the node puts each member's addresses there).
//
// A change is an entry of the log (`type: 'conf'`) that carries the change and the whole
// configuration it produces, so a member that reads the log from any point knows the
// configuration without replaying earlier changes. Following the Raft dissertation
// (§4.1), a member uses the latest configuration in its log, committed or not, and falls
// back to the previous one when a conflicting suffix is truncated. Changes add or remove
// at most one voter, so any majority of the old voters overlaps any majority of the new.
// The leader proposes a change only after it committed an entry of its own term (the
// 2015 correction to §4.1) and while no other change is uncommitted.
//
// A configuration also remembers every id it removed, and refuses to add one back: ids
// are never reused. A removed member's data directory still holds the old member's
// state and knows it was removed; under its old id it would take the log, be promoted,
// and then count toward every quorum while serving nothing.
import { assert } from './assert.js';
import type { ConfChange, ConfState, Entry, NodeId } from './types.js';

/**
 * confState builds a configuration. `removed` may be absent: a configuration written
 * before removed ids were remembered reads as one that removed none.
 */
export function confState(voters: readonly NodeId[], learners: readonly NodeId[] = [], context: Record<NodeId, string> = {}, removed: readonly NodeId[] = []): ConfState {
  const ids = [...new Set([...voters, ...learners])].sort();
  // Object.fromEntries defines own properties, so even an id such as `__proto__` is a key.
  const ctx: Record<NodeId, string> = Object.fromEntries(ids.filter((id) => Object.hasOwn(context, id)).map((id) => [id, context[id] as string]));
  return { voters: [...voters].sort(), learners: [...learners].sort(), context: ctx, removed: [...new Set(removed)].sort() };
}

export function wasRemoved(c: ConfState, id: NodeId): boolean {
  return c.removed.includes(id);
}

export function isVoter(c: ConfState, id: NodeId): boolean {
  return c.voters.includes(id);
}

export function isLearner(c: ConfState, id: NodeId): boolean {
  return c.learners.includes(id);
}

export function isMember(c: ConfState, id: NodeId): boolean {
  return c.voters.includes(id) || c.learners.includes(id);
}

export function members(c: ConfState): NodeId[] {
  return [...c.voters, ...c.learners].sort();
}

export function confEqual(a: ConfState, b: ConfState): boolean {
  return JSON.stringify(a) === JSON.stringify(b);
}

/**
 * applyChange returns the configuration `change` produces from `c`, or the reason it is
 * not a valid one-server change: a learner is added only if it is not a member and was
 * never removed, only a learner is promoted, and the last voter is never removed. A
 * removal adds the id to `removed`.
 */
export function applyChange(c: ConfState, change: ConfChange): ConfState | string {
  const id = change.node;
  if (typeof id !== 'string' || id === '') return 'a change names a member';
  switch (change.type) {
    case 'addLearner':
      if (isMember(c, id)) return `${id} is already a ${isVoter(c, id) ? 'voter' : 'learner'}`;
      if (wasRemoved(c, id)) return `${id} was removed from the cluster and ids are never reused: add the member under a new id`;
      return confState(c.voters, [...c.learners, id], { ...c.context, [id]: change.context ?? '' }, c.removed);
    case 'promote':
      if (isVoter(c, id)) return `${id} is already a voter`;
      if (!c.learners.includes(id)) return `${id} is not a learner: add it as a learner first`;
      return confState([...c.voters, id], c.learners.filter((x) => x !== id), c.context, c.removed);
    case 'remove':
      if (!isMember(c, id)) return `${id} is not a member`;
      if (isVoter(c, id) && c.voters.length === 1) return `${id} is the last voter`;
      return confState(c.voters.filter((x) => x !== id), c.learners.filter((x) => x !== id), c.context, [...c.removed, id]);
    default:
      return `unknown change type ${String((change as { type: unknown }).type)}`;
  }
}

/** The payload of a conf entry: the change and the configuration it produced. */
export interface ConfEntry {
  change: ConfChange;
  conf: ConfState;
}

export function encodeConfEntry(e: ConfEntry): Uint8Array {
  const change: ConfChange = { type: e.change.type, node: e.change.node };
  if (e.change.context !== undefined) change.context = e.change.context;
  return new TextEncoder().encode(JSON.stringify({ change, conf: confState(e.conf.voters, e.conf.learners, e.conf.context, e.conf.removed) }));
}

/**
 * decodeConfEntry reads a conf entry's data. A malformed one is a bug of the writer: it
 * throws. An entry written before removed ids were remembered has no `removed`: none.
 */
export function decodeConfEntry(data: Uint8Array): ConfEntry {
  const v = JSON.parse(new TextDecoder().decode(data)) as { change?: ConfChange; conf?: Partial<ConfState> };
  const conf = v?.conf;
  assert(
    typeof v === 'object' && v !== null && typeof v.change?.node === 'string' && conf !== undefined &&
      Array.isArray(conf.voters) && Array.isArray(conf.learners) && typeof conf.context === 'object' &&
      (conf.removed === undefined || Array.isArray(conf.removed)),
    'a conf entry holds {change, conf}',
  );
  return { change: v.change as ConfChange, conf: confState(conf.voters as NodeId[], conf.learners as NodeId[], conf.context as Record<NodeId, string>, conf.removed) };
}

/**
 * ConfLog is the configuration as a function of the log: `base` is the configuration at
 * the log's offset (the snapshot's, or the bootstrap one), and `changes` are the conf
 * entries after it, in index order. It is small: one record per change not yet compacted.
 */
export class ConfLog {
  private base: ConfState;
  private changes: { index: number; term: number; conf: ConfState }[] = [];

  constructor(base: ConfState) {
    this.base = base;
  }

  /** current is the configuration in force: the latest in the log. */
  current(): ConfState {
    return this.changes[this.changes.length - 1]?.conf ?? this.base;
  }

  /** at is the configuration in force once entries up to `index` are in the log. */
  at(index: number): ConfState {
    let conf = this.base;
    for (const c of this.changes) if (c.index <= index) conf = c.conf;
    return conf;
  }

  /** lastIndex is the index of the latest conf entry in the log, or 0. */
  lastIndex(): number {
    return this.changes[this.changes.length - 1]?.index ?? 0;
  }

  /**
   * track records the conf entries among `ents`, just written to the log, after dropping
   * the changes the log no longer holds (`inLog` says whether (index, term) is in it).
   */
  track(ents: readonly Entry[], inLog: (index: number, term: number) => boolean): void {
    this.changes = this.changes.filter((c) => inLog(c.index, c.term));
    for (const e of ents) {
      if (e.type !== 'conf' || this.changes.some((c) => c.index === e.index)) continue;
      this.changes.push({ index: e.index, term: e.term, conf: decodeConfEntry(e.data).conf });
    }
    this.changes.sort((a, b) => a.index - b.index);
  }

  /** compactTo folds the changes at or below `index` into the base (the log now starts there). */
  compactTo(index: number): void {
    this.base = this.at(index);
    this.changes = this.changes.filter((c) => c.index > index);
  }

  /** reset replaces everything with a snapshot's configuration. */
  reset(base: ConfState): void {
    this.base = base;
    this.changes = [];
  }
}
