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
import { assert } from './assert.js';
import type { ConfChange, ConfState, Entry, NodeId } from './types.js';

export function confState(voters: readonly NodeId[], learners: readonly NodeId[] = [], context: Record<NodeId, string> = {}): ConfState {
  const ids = [...new Set([...voters, ...learners])].sort();
  // Object.fromEntries defines own properties, so even an id such as `__proto__` is a key.
  const ctx: Record<NodeId, string> = Object.fromEntries(ids.filter((id) => Object.hasOwn(context, id)).map((id) => [id, context[id] as string]));
  return { voters: [...voters].sort(), learners: [...learners].sort(), context: ctx };
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
 * not a valid one-server change: a learner is added only if it is not a member, only a
 * learner is promoted, and the last voter is never removed.
 */
export function applyChange(c: ConfState, change: ConfChange): ConfState | string {
  const id = change.node;
  if (typeof id !== 'string' || id === '') return 'a change names a member';
  switch (change.type) {
    case 'addLearner':
      if (isMember(c, id)) return `${id} is already a ${isVoter(c, id) ? 'voter' : 'learner'}`;
      return confState(c.voters, [...c.learners, id], { ...c.context, [id]: change.context ?? '' });
    case 'promote':
      if (isVoter(c, id)) return `${id} is already a voter`;
      if (!c.learners.includes(id)) return `${id} is not a learner: add it as a learner first`;
      return confState([...c.voters, id], c.learners.filter((x) => x !== id), c.context);
    case 'remove':
      if (!isMember(c, id)) return `${id} is not a member`;
      if (isVoter(c, id) && c.voters.length === 1) return `${id} is the last voter`;
      return confState(c.voters.filter((x) => x !== id), c.learners.filter((x) => x !== id), c.context);
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
  return new TextEncoder().encode(JSON.stringify({ change, conf: confState(e.conf.voters, e.conf.learners, e.conf.context) }));
}

/** decodeConfEntry reads a conf entry's data. A malformed one is a bug of the writer: it throws. */
export function decodeConfEntry(data: Uint8Array): ConfEntry {
  const v = JSON.parse(new TextDecoder().decode(data)) as ConfEntry;
  assert(
    typeof v === 'object' && v !== null && typeof v.change?.node === 'string' &&
      Array.isArray(v.conf?.voters) && Array.isArray(v.conf?.learners) && typeof v.conf?.context === 'object',
    'a conf entry holds {change, conf}',
  );
  return { change: v.change, conf: confState(v.conf.voters, v.conf.learners, v.conf.context) };
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
