// The simulator's safety checkers. They run after every simulation step over every live
// node's in-memory state and every node's durable disk, and throw a Violation naming the
// property that broke:
//
// - electionSafety: at most one leader per term (Raft §5.2), over every member that ever
//   existed: one that joined later, one that was removed, one that restarted.
// - logMatching: an (index, term) pair names one entry, with one predecessor term, in
//   every log (what each node holds durably); within a log, terms never decrease (§5.3).
// - leaderCompleteness: a leader of term T holds every entry committed in a term < T (§5.4).
// - stateMachineSafety: every node applies the same entry at an index, in index order,
//   reaching the same state; committed entries never differ between nodes (§5.4.3).
//   Conf entries are applied through the same path, so members agree on them too.
// - durability: the highest acknowledged proposal and the highest committed entry stay
//   on enough disks (log or snapshot) that every quorum of the committed configuration
//   holds them, so no crash and no change of members can lose them.
// - linearizableRead: a ReadIndex answer is at least the highest index acknowledged to
//   a client before the read was asked.
// - membership: the configurations applied in index order form a chain of one-server
//   changes from the bootstrap voters, each entry carrying the configuration its change
//   makes; and no leader's log holds two conf entries beyond what is known committed
//   (one change at a time, dissertation §4.1).
// Liveness is checked by the simulation itself once faults heal.
import { applyChange, confEqual, confState, decodeConfEntry } from '../membership.js';
import type { RawNode } from '../rawnode.js';
import type { MemoryLogStore } from '../storage.js';
import type { ConfState, Entry, NodeId, ReadState } from '../types.js';

export const CHECKERS = [
  'electionSafety',
  'logMatching',
  'leaderCompleteness',
  'stateMachineSafety',
  'durability',
  'linearizableRead',
  'snapshotTransfer',
  'membership',
  'liveness',
  'assertion',
] as const;

export type CheckerName = (typeof CHECKERS)[number];

export class Violation extends Error {
  override name = 'Violation';
  constructor(
    readonly checker: CheckerName,
    message: string,
  ) {
    super(`${checker}: ${message}`);
  }
}

export interface NodeView {
  id: NodeId;
  /** null while the node is down. */
  node: RawNode | null;
  disk: MemoryLogStore;
}

/** the key of each entry object seen: one entry is judged several times (logged, committed, applied, led). */
const KEYS = new WeakMap<Entry, string>();

/** entryKey identifies an entry's content: its term and data. */
export function entryKey(e: Entry): string {
  let key = KEYS.get(e);
  if (key === undefined) {
    key = `${e.term}:${String.fromCharCode(...e.data)}`;
    KEYS.set(e, key);
  }
  return key;
}

/** Shadow is what the checker last saw of one node's incarnation. */
interface Shadow {
  /** seen[i] is the Entry object last seen at index i; a different object means a new entry. */
  seen: (Entry | undefined)[];
  /** commitSeen: committed entries up to here were recorded. */
  commitSeen: number;
}

export class Checker {
  /** leaders.get(term) is the one node that led in term. */
  private readonly leaders = new Map<number, NodeId>();
  /** entries.get("i:t") is the content and predecessor term of the entry (i, t). */
  private readonly entries = new Map<string, { key: string; prevTerm: number }>();
  /** committed[i] is the key of the entry committed at i. */
  private readonly committed: (string | undefined)[] = [];
  /** commitFrontier.get(T) is the highest index first seen committed by a node in term T. */
  private readonly commitFrontier = new Map<number, number>();
  private readonly applied: (string | undefined)[] = [];
  private readonly appliedState: (number | undefined)[] = [];
  private readonly acked: (string | undefined)[] = [];
  /** maxAcked is the highest index acknowledged to a client. */
  maxAcked = 0;
  private maxAckedTerm = 0;
  /**
   * reads asked and not yet answered: context -> the floor when asked, the highest of:
   * an index seen committed anywhere, an acknowledged index, an index an earlier read
   * was answered at. A linearizable read may not answer below any of them.
   */
  private readonly reads = new Map<string, number>();
  /** the highest index seen committed on any node, and its entry's term. */
  private maxCommitted = 0;
  private maxCommittedTerm = 0;
  /** the highest index any read was answered at. */
  private maxReadAnswered = 0;
  /** how many reads were answered and proposals acknowledged (a run where none was proves nothing). */
  readsAnswered = 0;
  ackedCount = 0;
  private readonly shadows = new Map<NodeId, Shadow>();
  /**
   * committedConf is the configuration in force at the highest index seen committed
   * (confAt): the one every future leader's quorum overlaps. Durability is judged by it.
   */
  private committedConf: ConfState;
  private confAt = 0;
  /** the configuration made by the highest conf entry applied anywhere (chainAt), for the chain check. */
  private chain: ConfState;
  private chainAt = 0;

  /**
   * `voters` is the bootstrap configuration. `oneAtATime` false turns off the check of
   * a leader's uncommitted changes, to see whether the other checkers alone catch a
   * leader that proposes a second change before the first commits.
   */
  constructor(voters: readonly NodeId[], private readonly oneAtATime = true) {
    this.committedConf = confState(voters);
    this.chain = this.committedConf;
  }

  /** conf is the configuration in force at the highest index seen committed. */
  get conf(): ConfState {
    return this.committedConf;
  }

  /** resetNode forgets what was seen of a node's memory (it crashed or restarted). */
  resetNode(id: NodeId): void {
    this.shadows.delete(id);
  }

  afterStep(views: readonly NodeView[]): void {
    for (const v of views) {
      if (v.node === null) continue;
      this.checkLeader(v.id, v.node);
      this.checkLog(v.id, v.node);
      this.checkCommitted(v.id, v.node);
    }
    // After every node's commit index is recorded: what a leader's log holds is judged
    // against everything known committed at this step.
    if (this.oneAtATime) for (const v of views) if (v.node?.raft.role === 'leader') this.checkOneChange(v.id, v.node);
    this.checkDurability(views);
  }

  private checkLeader(id: NodeId, node: RawNode): void {
    const r = node.raft;
    if (r.role !== 'leader') return;
    const other = this.leaders.get(r.term);
    if (other === undefined) this.leaders.set(r.term, id);
    else if (other !== id) throw new Violation('electionSafety', `${other} and ${id} both lead term ${r.term}`);
    this.checkCompleteness(id, node);
  }

  /**
   * checkLog inspects only entries that changed since the last step (new Entry objects),
   * and only durable ones. An entry a node holds only in memory was neither stored nor
   * sent (the caller sends after persisting), and a crash makes it never have existed:
   * a leader alone in its configuration elects itself without a message, and if it
   * crashes before its term is durable it may lead that term again after its restart
   * and fill the same indexes anew, with nobody having seen the first ones.
   */
  private checkLog(id: NodeId, node: RawNode): void {
    const log = node.raft.log;
    let sh = this.shadows.get(id);
    if (sh === undefined) {
      sh = { seen: [], commitSeen: 0 };
      this.shadows.set(id, sh);
    }
    const off = log.offset;
    const last = log.persisted;
    let k = last;
    for (; k > off; k--) {
      const e = log.entries[k - off - 1] as Entry;
      if (sh.seen[k] === e) break;
      const prevTerm = k - 1 === off ? log.offsetTerm : (log.entries[k - off - 2] as Entry).term;
      this.checkEntry(id, k, e, prevTerm, node.raft.term);
    }
    for (let j = k + 1; j <= last; j++) sh.seen[j] = log.entries[j - off - 1];
    sh.seen.length = last + 1;
  }

  private checkEntry(id: NodeId, index: number, e: Entry, prevTerm: number, term: number): void {
    if (e.index !== index) throw new Violation('logMatching', `${id} holds entry ${e.index} at index ${index}`);
    if (e.term < prevTerm) throw new Violation('logMatching', `${id}: term ${e.term} at ${index} follows term ${prevTerm}`);
    if (e.term > term) throw new Violation('logMatching', `${id}: entry of term ${e.term} at ${index} in term ${term}`);
    const at = `${index}:${e.term}`;
    const key = entryKey(e);
    const known = this.entries.get(at);
    if (known === undefined) {
      this.entries.set(at, { key, prevTerm });
    } else if (known.key !== key) {
      throw new Violation('logMatching', `${id}: two different entries of term ${e.term} at index ${index}`);
    } else if (known.prevTerm !== prevTerm) {
      throw new Violation('logMatching', `${id}: entry (${index}, ${e.term}) follows term ${prevTerm}, elsewhere ${known.prevTerm}`);
    }
  }

  private checkCommitted(id: NodeId, node: RawNode): void {
    const r = node.raft;
    const log = r.log;
    const sh = this.shadows.get(id) as Shadow;
    for (let i = Math.max(sh.commitSeen, log.offset) + 1; i <= log.committed; i++) {
      const key = entryKey(log.entry(i) as Entry);
      const known = this.committed[i];
      if (i > this.maxCommitted) {
        this.maxCommitted = i;
        this.maxCommittedTerm = (log.entry(i) as Entry).term;
      }
      if (known === undefined) {
        this.committed[i] = key;
        this.commitFrontier.set(r.term, Math.max(this.commitFrontier.get(r.term) ?? 0, i));
      } else if (known !== key) {
        throw new Violation('stateMachineSafety', `${id} commits ${key} at ${i}, elsewhere ${known} is committed`);
      }
    }
    sh.commitSeen = log.committed;
    if (log.committed > this.confAt) {
      this.confAt = log.committed;
      this.committedConf = r.confs.at(log.committed);
    }
  }

  /**
   * One change at a time: a leader proposes a change only once the previous one is
   * committed, so its log never holds two conf entries that are not known committed.
   * (A new leader may inherit several changes its own commit index has not reached, but
   * the leader that proposed them saw each committed before the next, and so did this
   * checker.)
   */
  private checkOneChange(id: NodeId, node: RawNode): void {
    const r = node.raft;
    const last = r.confs.lastIndex();
    if (last <= this.maxCommitted) return;
    for (let i = Math.max(this.maxCommitted, r.log.offset) + 1; i < last; i++) {
      if (r.log.entry(i)?.type === 'conf') {
        throw new Violation('membership', `${id} leads term ${r.term} with changes at ${i} and ${last} uncommitted: one change at a time`);
      }
    }
  }

  /** A leader of term T must hold every entry committed in an earlier term. */
  private checkCompleteness(id: NodeId, node: RawNode): void {
    const r = node.raft;
    let bound = 0;
    for (const [term, index] of this.commitFrontier) if (term < r.term && index > bound) bound = index;
    if (bound === 0) return;
    const log = r.log;
    if (log.lastIndex() < bound) {
      throw new Violation('leaderCompleteness', `${id} leads term ${r.term} with last index ${log.lastIndex()}, but ${bound} is committed`);
    }
    if (bound <= log.offset) return;
    const key = entryKey(log.entry(bound) as Entry);
    if (key !== this.committed[bound]) {
      throw new Violation('leaderCompleteness', `${id} leads term ${r.term} with ${key} at ${bound}, but ${this.committed[bound]} is committed`);
    }
  }

  /** onApply records that `id` applied `e`, reaching state `state`. */
  onApply(id: NodeId, e: Entry, state: number): void {
    const key = entryKey(e);
    const known = this.applied[e.index];
    if (known === undefined) {
      this.applied[e.index] = key;
      this.appliedState[e.index] = state;
    } else if (known !== key) {
      throw new Violation('stateMachineSafety', `${id} applies ${key} at ${e.index}, another node applied ${known}`);
    } else if (this.appliedState[e.index] !== state) {
      throw new Violation('stateMachineSafety', `${id} reaches a different state after applying ${e.index}`);
    }
    const committed = this.committed[e.index];
    if (committed !== undefined && committed !== key) {
      throw new Violation('stateMachineSafety', `${id} applies ${key} at ${e.index}, but ${committed} is committed`);
    }
    if (e.type === 'conf' && e.index > this.chainAt) this.checkChain(id, e);
  }

  /**
   * The first node to apply an index has applied (or restored) every index before it,
   * so conf entries are first applied in index order: each must make, from the
   * configuration of the previous one, exactly the configuration it carries.
   */
  private checkChain(id: NodeId, e: Entry): void {
    const { change, conf } = decodeConfEntry(e.data);
    const made = applyChange(this.chain, change);
    if (typeof made === 'string' || !confEqual(made, conf)) {
      const shown = (c: typeof conf) => `voters ${JSON.stringify(c.voters)}, learners ${JSON.stringify(c.learners)}, removed ${JSON.stringify(c.removed)}`;
      const why = typeof made === 'string' ? made : `it makes ${shown(made)}`;
      throw new Violation('membership', `${id} applies ${change.type} ${change.node} at ${e.index} carrying ${shown(conf)}, but from the configuration before it ${why}`);
    }
    this.chain = conf;
    this.chainAt = e.index;
  }

  /** onRestore records that `id` restored a snapshot of state `state` at `index`. */
  onRestore(id: NodeId, index: number, state: number): void {
    const known = this.appliedState[index];
    if (known !== undefined && known !== state) {
      throw new Violation('stateMachineSafety', `${id} restores a snapshot at ${index} whose state differs from what was applied`);
    }
    this.appliedState[index] = state;
  }

  /** onAck records that a proposal was answered "committed" to its client. */
  onAck(e: Entry): void {
    this.ackedCount++;
    this.acked[e.index] = entryKey(e);
    if (e.index > this.maxAcked) {
      this.maxAcked = e.index;
      this.maxAckedTerm = e.term;
    }
  }

  /** The highest acknowledged entry and the highest committed one are each on a quorum of disks. */
  private checkDurability(views: readonly NodeView[]): void {
    this.checkQuorumHolds(views, this.maxAcked, this.maxAckedTerm, 'acknowledged');
    this.checkQuorumHolds(views, this.maxCommitted, this.maxCommittedTerm, 'committed');
  }

  /**
   * An entry is safe when no quorum of the committed configuration can be formed without
   * a voter whose disk holds it: at least `voters - quorum + 1` of them. For an odd
   * number of voters that is a majority; for four voters, two. A voter that is down
   * counts by its disk, a member removed from the configuration does not count.
   */
  private checkQuorumHolds(views: readonly NodeView[], index: number, term: number, what: string): void {
    if (index === 0) return;
    const voters = this.committedConf.voters;
    let holders = 0;
    for (const v of views) {
      if (!voters.includes(v.id)) continue;
      const t = v.disk.durableTerm(index);
      if (t === 'snapshot' || t === term) holders++;
    }
    const needed = voters.length - (Math.floor(voters.length / 2) + 1) + 1;
    if (holders < needed) {
      throw new Violation('durability', `${what} entry ${index} is durable on ${holders} of the voters [${voters.join(' ')}]: a quorum of them holds none`);
    }
  }

  onReadAsked(context: string): void {
    this.reads.set(context, Math.max(this.maxAcked, this.maxCommitted, this.maxReadAnswered));
  }

  onReadAnswered(id: NodeId, rs: ReadState): void {
    const context = String.fromCharCode(...rs.context);
    const floor = this.reads.get(context);
    if (floor === undefined) return;
    this.reads.delete(context);
    this.readsAnswered++;
    if (rs.index < floor) {
      throw new Violation('linearizableRead', `${id} answers read ${context} at ${rs.index}, but ${floor} was committed, acknowledged or read before it was asked`);
    }
    this.maxReadAnswered = Math.max(this.maxReadAnswered, rs.index);
  }

  /** checkAckedApplied: at the end every acknowledged entry is what was applied at its index. */
  checkAckedApplied(): void {
    this.acked.forEach((key, i) => {
      if (key !== undefined && this.applied[i] !== key) {
        throw new Violation('durability', `acknowledged ${key} at ${i} was lost: ${this.applied[i] ?? 'nothing'} applied there`);
      }
    });
  }

  appliedKey(index: number): string | undefined {
    return this.applied[index];
  }
}
