// RawNode is the library's entry point: it wraps the Raft state machine, validates what
// comes in from the network, and hands the caller its work in Ready batches. The caller's
// duties are the numbered list at the top of index.ts.
import { EMPTY_HARD_STATE, hardStateEqual, isSafeIndex } from './entry.js';
import { decodeConfEntry } from './membership.js';
import { Raft } from './raft.js';
import {
  MESSAGE_TYPES,
  type Boot,
  type ConfChange,
  type Config,
  type ConfState,
  type Entry,
  type HardState,
  type Message,
  type NodeId,
  type ProgressStatus,
  type ProposeOk,
  type RaftResult,
  type Ready,
  type Snapshot,
  type SoftState,
  type Status,
} from './types.js';

const MESSAGE_TYPE_SET: ReadonlySet<string> = new Set(MESSAGE_TYPES);

export class RawNode {
  /** raft is the state machine itself; the simulator's checkers read it. */
  readonly raft: Raft;
  /** the hard and soft state as of the last Ready, to report only changes. */
  private prevHardState: HardState;
  private prevSoftState: SoftState;
  /** the Ready handed out and not yet advanced. Invariant: at most one. */
  private outstanding: Ready | null = null;

  constructor(config: Config, boot: Boot) {
    this.raft = this.createRaft(config, boot);
    // Whatever was loaded is durable already; report only what changes from here on.
    this.prevHardState = { ...boot.hardState, commit: this.raft.log.committed };
    this.prevSoftState = this.raft.softState();
  }

  /** createRaft builds the state machine; tests override it to run deliberately broken variants. */
  protected createRaft(config: Config, boot: Boot): Raft {
    return new Raft(config, boot);
  }

  /** tick advances the logical clock by one tick (elections, heartbeats, check-quorum). */
  tick(): void {
    this.raft.tick();
  }

  /** campaign starts an election now. A group of one elects itself at once. */
  campaign(): void {
    this.raft.hup();
  }

  /**
   * propose appends `data` as consecutive entries at the leader, all in one Ready and so
   * one fsync. It answers not_leader, transfer_in_progress, uncommitted_limit (back off
   * and retry) or invalid_proposal. Success means appended, not committed: the entries are
   * committed when they come back in committedEntries at the returned indexes with the
   * returned term; an entry there with another term means the proposal was lost.
   */
  propose(data: Uint8Array[]): RaftResult<ProposeOk> {
    return this.raft.propose(data);
  }

  /**
   * proposeConfChange appends one membership change: add a learner, promote a learner,
   * remove a member (see membership.ts). Like propose, success means appended; the
   * change is in force on each member from the moment it appends it, and the next one
   * may be proposed once this one commits. Besides propose's answers it may answer
   * conf_change_refused, saying why.
   */
  proposeConfChange(change: ConfChange): RaftResult<ProposeOk> {
    return this.raft.proposeConfChange(change);
  }

  /** step hands the node a message received from a peer. Malformed messages are answered with invalid_message. */
  step(m: Message): RaftResult {
    const problem = this.checkMessage(m);
    if (problem !== null) return { ok: false, code: 'invalid_message', message: problem, leader: this.raft.leader };
    this.raft.step(m);
    return { ok: true };
  }

  /**
   * readIndex asks for a linearizable read. The answer is a ReadState with the same
   * context in a later Ready; serve the read once applied >= its index. A request may be
   * dropped (leadership change, lost message): the caller times out and retries.
   */
  readIndex(context: Uint8Array): RaftResult {
    return this.raft.readIndex(context);
  }

  /** transferLeadership asks the leader to hand over to `to`; proposals are refused meanwhile. */
  transferLeadership(to: NodeId): RaftResult {
    return this.raft.transferLeadership(to);
  }

  /**
   * stopCampaigning: this member is shutting down and takes no leadership from now on.
   * It never campaigns, neither on its election timeout nor when a leader hands over to
   * it (timeoutNow), but it still votes, so the others can elect one of themselves. A
   * leader keeps leading until it hands over. It cannot be undone: a restart builds a
   * new node.
   */
  stopCampaigning(): void {
    this.raft.stopping = true;
  }

  reportUnreachable(id: NodeId): void {
    this.raft.reportUnreachable(id);
  }

  reportSnapshot(id: NodeId, ok: boolean): void {
    this.raft.reportSnapshot(id, ok);
  }

  /**
   * compact records `data`, the application's state after applying [1, index], as the
   * latest snapshot and discards the entries it covers. Persist the returned snapshot with
   * LogStore.saveSnapshot. Returns null when `index` is not beyond the current snapshot.
   * Throws a RangeError when `index` exceeds the applied index (a caller bug).
   */
  compact(index: number, data: Uint8Array): Snapshot | null {
    const log = this.raft.log;
    if (!isSafeIndex(index) || index > log.applied) {
      throw new RangeError(`compact: index ${index} must be at most the applied index ${log.applied}`);
    }
    if (index <= log.offset) return null;
    // A member that joined read the log from before the first change it holds, where it
    // knows no configuration: it compacts only from that change on.
    const conf = this.raft.confs.at(index);
    if (conf.voters.length === 0) return null;
    const snapshot = log.compact(index, data, conf);
    this.raft.confs.compactTo(index);
    return snapshot;
  }

  /**
   * The index of a snapshot this member took from its leader (step) and has not yet
   * handed to a Ready, or null. An application that fetches the snapshot's state apart
   * from the message reads it after stepping the message, to learn whether it was taken.
   */
  pendingSnapshotIndex(): number | null {
    return this.raft.log.pendingSnapshot?.meta.index ?? null;
  }

  /** hasReady says whether ready() has work. It is false while a Ready is outstanding. */
  hasReady(): boolean {
    if (this.outstanding !== null) return false;
    const r = this.raft;
    const log = r.log;
    return (
      r.msgs.length > 0 ||
      r.readStates.length > 0 ||
      log.pendingSnapshot !== null ||
      log.lastIndex() > Math.max(log.handed, log.offset) ||
      log.hasNextCommitted() ||
      !hardStateEqual(r.hardState(), this.prevHardState) ||
      !softStateEqual(r.softState(), this.prevSoftState)
    );
  }

  /**
   * ready hands out the current batch of work. The caller must call advance(rd) before the
   * next ready(); steps and ticks in between are fine and go into the next batch.
   */
  ready(): Ready {
    if (this.outstanding !== null) throw new Error('raft: ready() called again before advance()');
    const r = this.raft;
    const log = r.log;
    const hs = r.hardState();
    const ss = r.softState();
    const entries = log.unstableEntries();
    const snapshot = log.pendingSnapshot;
    const termDurable = hs.term === this.prevHardState.term && hs.vote === this.prevHardState.vote;
    const rd: Ready = {
      softState: softStateEqual(ss, this.prevSoftState) ? null : ss,
      hardState: hardStateEqual(hs, this.prevHardState) ? null : hs,
      snapshot,
      entries,
      mustSync: entries.length > 0 || snapshot !== null || !termDurable,
      messages: r.msgs,
      committedEntries: log.nextCommitted(r.cfg.maxCommittedSizePerReady),
      readStates: r.readStates,
      termDurable,
    };
    r.msgs = [];
    r.readStates = [];
    log.pendingSnapshot = null;
    log.handed = log.lastIndex();
    this.prevHardState = hs;
    this.prevSoftState = ss;
    this.outstanding = rd;
    return rd;
  }

  /** advance tells the node that `rd` was persisted, sent and applied. */
  advance(rd: Ready): void {
    if (rd !== this.outstanding) throw new Error('raft: advance() with a Ready that is not the outstanding one');
    const log = this.raft.log;
    if (rd.snapshot !== null && rd.snapshot.meta.index > log.applied) log.appliedTo(rd.snapshot.meta.index);
    log.stableTo(rd.entries);
    const lastApplied = rd.committedEntries[rd.committedEntries.length - 1];
    if (lastApplied !== undefined) log.appliedTo(lastApplied.index);
    this.outstanding = null;
    this.raft.onPersisted();
  }

  status(): Status {
    const r = this.raft;
    const log = r.log;
    let progress: Record<NodeId, ProgressStatus> | null = null;
    if (r.role === 'leader') {
      progress = {};
      for (const [id, pr] of r.prs) {
        progress[id] = {
          match: pr.match,
          next: pr.next,
          state: pr.state,
          voter: r.isVoter(id),
          paused: pr.isPaused(),
          recentActive: pr.recentActive,
          inflight: pr.inflights.count,
        };
      }
    }
    return {
      id: r.id,
      term: r.term,
      vote: r.vote,
      role: r.role,
      leader: r.leader,
      commit: log.committed,
      applied: log.applied,
      persisted: log.persisted,
      firstIndex: log.firstIndex(),
      lastIndex: log.lastIndex(),
      snapshotIndex: log.offset,
      leadTransferee: r.leadTransferee,
      conf: r.conf,
      confIndex: r.confs.lastIndex(),
      progress,
    };
  }

  /** checkMessage returns why `m` cannot be stepped, or null when it is well formed. */
  private checkMessage(m: Message): string | null {
    const r = this.raft;
    if (typeof m !== 'object' || m === null) return 'a message must be an object';
    if (!MESSAGE_TYPE_SET.has(m.type)) return `unknown message type ${String(m.type)}`;
    if (m.to !== r.id) return `message for ${String(m.to)} delivered to ${r.id}`;
    // Any member of the cluster may write, also one this node does not know yet (a voter
    // promoted in entries it has not received): the transport authenticates senders.
    if (typeof m.from !== 'string' || m.from === '' || m.from === r.id) return `sender ${String(m.from)} is not a peer`;
    for (const f of ['term', 'logTerm', 'index', 'commit', 'rejectHint'] as const) {
      if (!isSafeIndex(m[f])) return `${f} must be a non-negative safe integer`;
    }
    if (typeof m.reject !== 'boolean') return 'reject must be a boolean';
    const forwarded = m.type === 'readIndex' || m.type === 'transferLeader';
    if (forwarded !== (m.term === 0)) return `${m.type} must ${forwarded ? '' : 'not '}have term 0`;
    if (m.context !== undefined && !(m.context instanceof Uint8Array)) return 'context must be bytes';
    if (!Array.isArray(m.entries)) return 'entries must be an array';
    const entriesProblem = checkEntries(m.entries, m.index, m.term);
    if (entriesProblem !== null) return entriesProblem;
    if (m.entries.length > 0 && m.type !== 'app') return `${m.type} carries no entries`;
    if (m.type === 'snap') return checkSnapshot(m.snapshot);
    return null;
  }
}

function checkEntries(ents: Entry[], prevIndex: number, term: number): string | null {
  for (let k = 0; k < ents.length; k++) {
    const e = ents[k] as Entry;
    if (typeof e !== 'object' || e === null) return 'an entry must be an object';
    if (e.index !== prevIndex + 1 + k) return `entries must be contiguous from ${prevIndex + 1}`;
    if (!isSafeIndex(e.term) || e.term < 1 || e.term > term) return 'an entry term must be within [1, message term]';
    if (!(e.data instanceof Uint8Array)) return 'entry data must be bytes';
    if (e.type !== undefined && e.type !== 'normal' && e.type !== 'conf') return `unknown entry type ${String(e.type)}`;
    if (e.type === 'conf' && !isConfEntry(e.data)) return 'a conf entry must hold a change and the configuration it makes';
  }
  return null;
}

function isConfEntry(data: Uint8Array): boolean {
  try {
    const c = decodeConfEntry(data).conf;
    return c.voters.length > 0 && isConfState(c);
  } catch {
    return false;
  }
}

function isConfState(c: ConfState): boolean {
  const ids = (v: unknown) => Array.isArray(v) && v.every((x) => typeof x === 'string' && x !== '');
  if (!ids(c?.voters) || !ids(c.learners) || typeof c.context !== 'object' || c.context === null) return false;
  return c.voters.every((v) => !c.learners.includes(v)) && Object.values(c.context).every((v) => typeof v === 'string');
}

function checkSnapshot(s: Snapshot | undefined): string | null {
  if (s === undefined || typeof s !== 'object' || s === null) return 'snap carries a snapshot';
  if (!isSafeIndex(s.meta?.index) || s.meta.index < 1 || !isSafeIndex(s.meta.term) || s.meta.term < 1) {
    return 'snapshot meta needs index and term >= 1';
  }
  if (!(s.data instanceof Uint8Array)) return 'snapshot data must be bytes';
  if (!isConfState(s.meta.conf) || s.meta.conf.voters.length === 0) return 'snapshot meta needs a configuration with a voter';
  return null;
}

function softStateEqual(a: SoftState, b: SoftState): boolean {
  return a.leader === b.leader && a.role === b.role;
}

/**
 * splitMessages divides a Ready's messages by when they may leave. A leader's appends
 * (`app`) may be sent while the Ready is being persisted, so that the followers write
 * in parallel with the leader (the Raft dissertation, §10.2.1): the leader counts its
 * own copy only once the caller has persisted it (advance), and entries that reached
 * the followers but not the leader's disk are like those a leader loses in a crash.
 * Everything else waits for the write: a vote must be on disk before it is granted, an
 * acknowledgement must not run ahead of the entries it acknowledges.
 *
 * Nothing leaves early from a Ready that changes the term or the vote. A member that
 * wins an election in the Ready that starts it (the only voter, with learners) would
 * otherwise send entries of a term not yet on its disk: crashed before the write, it
 * restarts in the term before, wins the same term again and appends other entries at
 * the same indexes, and a learner that kept the first ones takes them as matching.
 */
export function splitMessages(rd: Ready): { early: Message[]; late: Message[] } {
  if (!rd.termDurable) return { early: [], late: rd.messages };
  const early: Message[] = [];
  const late: Message[] = [];
  for (const m of rd.messages) (m.type === 'app' ? early : late).push(m);
  return { early, late };
}

/** emptyBoot is the state of a node that has never written anything. */
export function emptyBoot(): Boot {
  return { hardState: { ...EMPTY_HARD_STATE }, snapshot: null, entries: [] };
}
