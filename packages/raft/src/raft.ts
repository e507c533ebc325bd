// Raft is the consensus state machine of one node: messages and ticks go in, and the
// node's log, hard state and outgoing messages change. It does no I/O and reads no
// clock: RawNode turns its state into Ready batches for the caller to persist and send.
//
// Section numbers refer to the Raft paper ("In Search of an Understandable Consensus
// Algorithm", extended version) and to Ongaro's thesis where the paper is silent.
import { LostLogError, assert } from './assert.js';
import { bytesEqual, entryBytes } from './entry.js';
import { RaftLog } from './log.js';
import { ConfLog, applyChange, confState, encodeConfEntry, isLearner, isMember, isVoter, members } from './membership.js';
import { Progress } from './progress.js';
import { ReadOnly, decodeSeq, encodeSeq } from './read-only.js';
import type {
  Boot,
  ConfChange,
  ConfState,
  Config,
  Entry,
  HardState,
  Message,
  MessageType,
  NodeId,
  ProposeOk,
  RaftErrorCode,
  RaftError,
  RaftResult,
  ReadState,
  Role,
  SoftState,
} from './types.js';

/** The context of a vote request sent because the leader asked for a transfer (§3.10). */
export const CAMPAIGN_TRANSFER: Uint8Array = new TextEncoder().encode('campaign-transfer');

const NO_DATA = new Uint8Array(0);

type CampaignKind = 'preElection' | 'election' | 'transfer';

/** The fields of a message that a sender chooses; the rest take zero values. */
type Outgoing = Partial<Message> & { type: MessageType; to: NodeId };

export class Raft {
  readonly id: NodeId;
  /** confs is the configuration as a function of the log; the one in force is confs.current(). */
  readonly confs: ConfLog;
  readonly cfg: Readonly<Config> & { maxInflightBytes: number; maxCommittedSizePerReady: number; maxPendingReads: number };

  term = 0;
  /** vote is whom this node voted for in `term`, or null. */
  vote: NodeId | null = null;
  /** leader is the leader of `term` as far as this node knows, or null. */
  leader: NodeId | null = null;
  role: Role = 'follower';
  readonly log: RaftLog;

  /** prs is the leader's replication progress for every member, itself included. Empty otherwise. */
  readonly prs = new Map<NodeId, Progress>();
  /** votes holds the answers a (pre-)candidate received in the current round. */
  private readonly votes = new Map<NodeId, boolean>();
  /** msgs are outgoing messages not yet handed to a Ready. */
  msgs: Message[] = [];
  /** readStates are answered reads not yet handed to a Ready. */
  readStates: ReadState[] = [];

  /** electionElapsed: ticks since the last election timeout reset (leader: since the last quorum check). */
  electionElapsed = 0;
  heartbeatElapsed = 0;
  /** randomizedElectionTimeout is drawn from [electionTicks, 2 * electionTicks) at every reset. */
  randomizedElectionTimeout = 0;
  /** leadTransferee is the member the leader is handing over to, or null. */
  leadTransferee: NodeId | null = null;
  /**
   * stopping: the member is shutting down (RawNode.stopCampaigning) and takes no
   * leadership: it never campaigns, not even when a leader hands over to it, so that a
   * stopping leader's transfer never lands on a member about to stop too. Never cleared.
   */
  stopping = false;

  /**
   * retiring maps a member the leader removed to the index of its removal. The leader
   * keeps replicating to it, outside every quorum, until the removal has been committed
   * for an election timeout, so that the member learns it was removed.
   */
  private readonly retiring = new Map<NodeId, { index: number; committedTicks: number }>();

  /** reads that arrived before this leader committed an entry of its own term. */
  private pendingReads: { from: NodeId; context: Uint8Array }[] = [];
  private readonly readOnly = new ReadOnly();

  constructor(config: Config, boot: Boot) {
    validateConfig(config);
    this.cfg = {
      ...config,
      peers: config.peers.slice(),
      maxInflightBytes: config.maxInflightBytes ?? Number.POSITIVE_INFINITY,
      maxCommittedSizePerReady: config.maxCommittedSizePerReady ?? config.maxSizePerMsg,
      maxPendingReads: config.maxPendingReads ?? 4096,
    };
    this.id = config.id;
    this.log = RaftLog.boot(boot.snapshot, boot.entries, boot.hardState.commit);
    this.confs = new ConfLog(boot.snapshot?.meta.conf ?? confState(config.peers, [], config.context ?? {}));
    this.confs.track(boot.entries, () => true);
    const applied = config.applied ?? this.log.offset;
    if (applied < this.log.offset || applied > this.log.lastIndex()) {
      throw new RangeError(`raft: applied ${applied} must be within the stored log [${this.log.offset}, ${this.log.lastIndex()}]`);
    }
    // The stored commit index may lag (it is written without fsync), but whatever the
    // application applied was committed.
    this.log.commitTo(applied);
    this.log.applied = applied;
    this.becomeFollower(boot.hardState.term, null);
    this.vote = boot.hardState.vote;
  }

  /** conf is the configuration in force: the latest in the log. */
  get conf(): ConfState {
    return this.confs.current();
  }

  /** quorum is the size of a majority of the voters. */
  get quorum(): number {
    return Math.floor(this.conf.voters.length / 2) + 1;
  }

  isVoter(id: NodeId): boolean {
    return isVoter(this.conf, id);
  }

  /**
   * promotable says whether this node may campaign: it is not stopping, and it is a
   * voter of its latest configuration, or the latest change removes it and is not yet
   * committed. Such a member may still be needed until the change commits
   * (dissertation §4.2.2): it campaigns, and wins, under the new configuration, counting
   * only the votes of its voters, then leads until the change commits and steps down.
   */
  promotable(): boolean {
    if (this.stopping) return false;
    if (this.isVoter(this.id)) return true;
    const at = this.confs.lastIndex();
    return at > this.log.committed && isVoter(this.confs.at(at - 1), this.id);
  }

  hardState(): HardState {
    return { term: this.term, vote: this.vote, commit: this.log.committed };
  }

  softState(): SoftState {
    return { leader: this.leader, role: this.role };
  }

  // ---------------------------------------------------------------- local inputs

  tick(): void {
    if (this.role === 'leader') this.tickHeartbeat();
    else this.tickElection();
  }

  /** hup starts an election now (with a pre-vote round when configured). */
  hup(): void {
    // Only a voter campaigns: a learner, a removed member or one not yet added waits.
    if (this.role === 'leader' || !this.promotable()) return;
    this.campaign(this.cfg.preVote ? 'preElection' : 'election');
  }

  propose(data: Uint8Array[]): RaftResult<ProposeOk> {
    if (this.role !== 'leader') return this.error('not_leader', 'this node is not the leader');
    if (this.leadTransferee !== null) {
      return this.error('transfer_in_progress', `leadership is being transferred to ${this.leadTransferee}`);
    }
    if (data.length === 0) return this.error('invalid_proposal', 'a proposal needs at least one entry');
    if (data.some((d) => d.length === 0)) {
      return this.error('invalid_proposal', 'an entry must not be empty: empty data marks a leader no-op');
    }
    const max = this.cfg.maxUncommittedEntries;
    if (data.length > max) return this.error('invalid_proposal', `a batch of ${data.length} entries exceeds maxUncommittedEntries ${max}`);
    const uncommitted = this.log.lastIndex() - this.log.committed;
    if (uncommitted + data.length > max) {
      return this.error('uncommitted_limit', `${uncommitted} entries are uncommitted; the limit is ${max}`);
    }
    const first = this.log.lastIndex() + 1;
    const ents: Entry[] = data.map((d, k) => ({ index: first + k, term: this.term, data: d }));
    this.log.append(ents);
    this.bcastAppend();
    return { ok: true, term: this.term, firstIndex: first, lastIndex: first + ents.length - 1 };
  }

  /**
   * proposeConfChange appends a membership change (membership.ts). It takes effect on
   * every member as soon as the member appends it; the next change may be proposed once
   * it is committed.
   */
  proposeConfChange(change: ConfChange): RaftResult<ProposeOk> {
    if (this.role !== 'leader') return this.error('not_leader', 'this node is not the leader');
    if (this.leadTransferee !== null) {
      return this.error('transfer_in_progress', `leadership is being transferred to ${this.leadTransferee}`);
    }
    // A change that is invalid in itself (a removed id added back) is refused for that
    // reason first: it will never be valid, whereas the refusals below pass with time.
    const next = applyChange(this.conf, change);
    if (typeof next === 'string') return this.error('conf_change_refused', next);
    const refused = this.confChangeRefusal(change);
    if (refused !== null) return this.error('conf_change_refused', refused);
    if (this.log.lastIndex() - this.log.committed + 1 > this.cfg.maxUncommittedEntries) {
      return this.error('uncommitted_limit', `the limit of ${this.cfg.maxUncommittedEntries} uncommitted entries is reached`);
    }
    const index = this.log.lastIndex() + 1;
    const entry: Entry = { index, term: this.term, data: encodeConfEntry({ change, conf: next }), type: 'conf' };
    const before = this.conf;
    this.log.append([entry]);
    this.confs.track([entry], () => true);
    this.onConfChanged(before, index);
    this.bcastAppend();
    return { ok: true, term: this.term, firstIndex: index, lastIndex: index };
  }

  /**
   * confChangeRefusal says why the leader may not propose a change now, or null. It
   * waits for an entry of its own term to commit: until then an uncommitted change of an
   * earlier leader may still be in some logs, and a second change on top of it could
   * join two disjoint majorities (the 2015 correction to the dissertation's §4.1). And
   * one change at a time: the previous one must be committed. A hook, so a test can break it.
   */
  protected confChangeRefusal(change: ConfChange): string | null {
    if (!this.committedEntryInCurrentTerm()) return 'the leader has not yet committed an entry of its term; retry shortly';
    if (this.confs.lastIndex() > this.log.committed) return `the change at index ${this.confs.lastIndex()} is not committed yet; one change at a time`;
    if (change.type === 'remove' && change.node === this.id) return `${this.id} leads: transfer leadership to another voter before removing it`;
    return null;
  }

  /** readIndex asks for a linearizable read (§6.4); the answer arrives as a ReadState. */
  readIndex(context: Uint8Array): RaftResult {
    if (this.role === 'leader') {
      if (this.pendingReadCount() >= this.cfg.maxPendingReads) {
        return this.error('read_limit', `${this.cfg.maxPendingReads} reads already wait for confirmation`);
      }
      this.handleReadIndex(this.id, context);
      return { ok: true };
    }
    if (this.leader === null) return this.error('not_leader', 'no leader is known to serve the read');
    this.send({ type: 'readIndex', to: this.leader, term: 0, context });
    return { ok: true };
  }

  transferLeadership(to: NodeId): RaftResult {
    if (!this.isVoter(to)) return this.error('unknown_peer', `${to} is not a voter`);
    if (this.role === 'leader') {
      this.transferTo(to);
      return { ok: true };
    }
    if (this.leader === null) return this.error('not_leader', 'no leader is known to transfer from');
    this.send({ type: 'transferLeader', to: this.leader, term: 0, context: new TextEncoder().encode(to) });
    return { ok: true };
  }

  /** reportUnreachable: the transport failed to deliver to `id`; stop streaming to it. */
  reportUnreachable(id: NodeId): void {
    const pr = this.prs.get(id);
    if (this.role === 'leader' && pr !== undefined && pr.state === 'replicate') pr.becomeProbe();
  }

  /** reportSnapshot: the transport finished (or failed) sending a snapshot to `id`. */
  reportSnapshot(id: NodeId, ok: boolean): void {
    const pr = this.prs.get(id);
    if (this.role !== 'leader' || pr === undefined || pr.state !== 'snapshot') return;
    if (!ok) pr.pendingSnapshot = 0;
    pr.becomeProbe();
    // Wait for the member's answer (or the next heartbeat answer) before probing.
    pr.probeSent = true;
  }

  /** onPersisted runs after the caller made entries durable: the leader counts its own copy only now. */
  onPersisted(): void {
    if (this.role !== 'leader') return;
    const self = this.prs.get(this.id) as Progress;
    if (self.maybeUpdate(this.log.persisted) && this.maybeCommit()) this.onCommitAdvanced();
  }

  // ---------------------------------------------------------------- messages

  /** step handles one validated message from a peer (RawNode validates). */
  step(m: Message): void {
    if (m.term > this.term) {
      if (!this.stepHigherTerm(m)) return;
    } else if (m.term < this.term && m.term !== 0) {
      this.stepLowerTerm(m);
      return;
    }
    if (m.type === 'vote' || m.type === 'preVote') {
      this.handleVoteRequest(m);
      return;
    }
    switch (this.role) {
      case 'leader':
        this.stepLeader(m);
        return;
      case 'candidate':
      case 'preCandidate':
        this.stepCandidate(m);
        return;
      case 'follower':
        this.stepFollower(m);
        return;
    }
  }

  /**
   * "If RPC request or response contains term T > currentTerm: set currentTerm = T,
   * convert to follower" (§5.1), with two exceptions. A node that heard from a leader
   * within the minimum election timeout ignores vote requests (§6 of the thesis: the
   * lease that check-quorum relies on), unless the leader itself asked for the election
   * (transfer). And pre-votes never change terms (§9.6). Returns false when `m` is ignored.
   */
  private stepHigherTerm(m: Message): boolean {
    if (m.type === 'vote' || m.type === 'preVote') {
      const force = bytesEqual(m.context, CAMPAIGN_TRANSFER);
      const inLease = this.cfg.checkQuorum && this.leader !== null && this.electionElapsed < this.cfg.electionTicks;
      if (inLease && !force) return false;
    }
    if (m.type === 'preVote') return true;
    // A granted pre-vote carries the term we would campaign in; we move there only by winning.
    if (m.type === 'preVoteResp' && !m.reject) return true;
    const fromLeader = m.type === 'app' || m.type === 'heartbeat' || m.type === 'snap';
    const elapsed = this.electionElapsed;
    this.becomeFollower(m.term, fromLeader ? m.from : null);
    // "If election timeout elapses without receiving AppendEntries RPC from current leader
    // or granting vote to candidate: convert to candidate" (Figure 2). A new term alone
    // does not restart the timer: otherwise every hopeless candidate would hold back the
    // one node whose log could win, and without pre-vote elections could go on for long.
    if (!fromLeader) this.electionElapsed = elapsed;
    return true;
  }

  /** "If a server receives a request with a stale term number, it rejects the request" (§5.1). */
  private stepLowerTerm(m: Message): void {
    if ((this.cfg.checkQuorum || this.cfg.preVote) && (m.type === 'app' || m.type === 'heartbeat')) {
      // A node that rejoins with a higher term would otherwise ignore the leader forever
      // (pre-vote keeps it from winning): tell the stale leader our term so it steps down.
      this.send({ type: 'appResp', to: m.from });
    } else if (m.type === 'preVote' || m.type === 'vote') {
      // "Reply false if term < currentTerm" (Figure 2), with our term: a candidate that
      // cannot hear of it otherwise (one this node's configuration does not name) learns
      // the term it must exceed.
      this.send({ type: m.type === 'vote' ? 'voteResp' : 'preVoteResp', to: m.from, term: this.term, reject: true });
    }
  }

  /**
   * A node grants at most one vote per term, first come first served, and only to a
   * candidate whose log is at least as up to date as its own (§5.2, §5.4.1). A pre-vote
   * for a later term is granted on the log check alone and changes nothing.
   */
  private handleVoteRequest(m: Message): void {
    const resp = m.type === 'vote' ? 'voteResp' : 'preVoteResp';
    const canVote =
      this.vote === m.from ||
      (this.vote === null && this.leader === null) ||
      (m.type === 'preVote' && m.term > this.term);
    const upToDate = this.log.isUpToDate(m.index, m.logTerm);
    if (canVote && upToDate) {
      // Answer in the candidate's term, so that it does not drop the grant as stale.
      this.send({ type: resp, to: m.from, term: m.term });
      if (m.type === 'vote') {
        this.electionElapsed = 0;
        this.vote = m.from;
      }
      return;
    }
    this.send({ type: resp, to: m.from, term: this.term, reject: true });
    if (!upToDate) this.campaignSoon();
  }

  /**
   * campaignSoon: a member asked for its vote by a candidate whose log is behind its own
   * knows that the group seeks a leader and that it is a better one; when it follows no
   * live leader, it campaigns at its next tick instead of at the end of its own timeout.
   * Otherwise a hopeless candidate that times out first delays every election by up to a
   * timeout, and without pre-vote two candidates whose timers keep meeting can split
   * the votes for many terms. Safety does not depend on when a member campaigns.
   */
  private campaignSoon(): void {
    const leaderLive = this.leader !== null && this.electionElapsed < this.cfg.electionTicks;
    if (this.role === 'leader' || leaderLive || !this.promotable()) return;
    const soon = 1 + Math.floor(this.cfg.random() * Math.ceil(this.cfg.electionTicks / 2));
    this.electionElapsed = Math.max(this.electionElapsed, this.randomizedElectionTimeout - soon);
  }

  private stepLeader(m: Message): void {
    switch (m.type) {
      case 'readIndex':
        // Beyond the bound a forwarded read is dropped; the asker times out and retries.
        if (this.pendingReadCount() < this.cfg.maxPendingReads) this.handleReadIndex(m.from, m.context ?? NO_DATA);
        return;
      case 'transferLeader':
        this.transferTo(new TextDecoder().decode(m.context ?? NO_DATA));
        return;
      case 'appResp':
      case 'heartbeatResp':
        break;
      default:
        // Another leader in our own term cannot exist (election safety); anything else is stale.
        return;
    }
    const pr = this.prs.get(m.from);
    if (pr === undefined) return;
    pr.recentActive = true;
    if (m.type === 'heartbeatResp') this.handleHeartbeatResp(m, pr);
    else if (m.reject) this.handleAppReject(m, pr);
    else this.handleAppAck(m, pr);
  }

  private handleAppReject(m: Message, pr: Progress): void {
    // The follower says where our logs may agree: skip every entry of a term it lacks.
    let hint = m.rejectHint;
    if (m.logTerm > 0) hint = this.log.findConflictByTerm(m.rejectHint, m.logTerm).index;
    if (!pr.maybeDecrTo(m.index, hint)) return;
    if (pr.state === 'replicate') pr.becomeProbe();
    this.sendAppend(m.from);
  }

  private handleAppAck(m: Message, pr: Progress): void {
    const wasPaused = pr.isPaused();
    if (!pr.maybeUpdate(m.index)) return;
    if (pr.state === 'probe') {
      pr.becomeReplicate();
    } else if (pr.state === 'snapshot' && pr.match + 1 >= this.log.firstIndex()) {
      // The member has the snapshot (or caught up otherwise): stream from the log again.
      pr.becomeProbe();
      pr.becomeReplicate();
    } else if (pr.state === 'replicate') {
      pr.inflights.freeLE(m.index);
    }
    if (this.maybeCommit()) this.onCommitAdvanced();
    else if (wasPaused) this.sendAppend(m.from); // it may be missing the latest commit index
    // A leader outside its configuration steps down once the configuration commits.
    if (this.role !== 'leader') return;
    while (this.maybeSendAppend(m.from, false));
    if (m.from === this.leadTransferee && pr.match === this.log.lastIndex()) this.sendTimeoutNow(m.from);
  }

  private handleHeartbeatResp(m: Message, pr: Progress): void {
    pr.probeSent = false;
    // An answer that frees the window may have been lost: let one more message out, which
    // the member rejects if it missed something, turning the stream back into a probe.
    if (pr.state === 'replicate' && pr.inflights.full()) pr.inflights.freeFirstOne();
    if (pr.match < this.sendable(m.from)) this.sendAppend(m.from);
    const seq = decodeSeq(m.context);
    if (seq === null || !this.isVoter(m.from)) return;
    const voters = this.conf.voters;
    const confirmed = (acks: ReadonlySet<NodeId>) => voters.filter((v) => acks.has(v)).length >= this.quorum;
    for (const req of this.readOnly.ack(seq, m.from, confirmed)) this.respondRead(req.from, req.index, req.context);
  }

  private stepCandidate(m: Message): void {
    const myAnswer = this.role === 'preCandidate' ? 'preVoteResp' : 'voteResp';
    switch (m.type) {
      case 'app':
      case 'heartbeat':
      case 'snap':
        // "If AppendEntries RPC received from new leader: convert to follower" (§5.2).
        this.becomeFollower(m.term, m.from);
        this.stepFollower(m);
        return;
      case myAnswer: {
        const result = this.poll(m.from, !m.reject);
        if (result === 'won') {
          if (this.role === 'preCandidate') this.campaign('election');
          else this.winElection();
        } else if (result === 'lost') {
          this.becomeFollower(this.term, null);
        }
        return;
      }
      default:
        return;
    }
  }

  private stepFollower(m: Message): void {
    switch (m.type) {
      case 'app':
        this.heardFromLeader(m.from);
        this.handleAppend(m);
        return;
      case 'heartbeat':
        this.heardFromLeader(m.from);
        this.handleHeartbeat(m);
        return;
      case 'snap':
        this.heardFromLeader(m.from);
        this.handleSnapshot(m);
        return;
      case 'transferLeader':
        if (this.leader !== null) this.send({ type: 'transferLeader', to: this.leader, term: 0, context: m.context ?? NO_DATA });
        return;
      case 'timeoutNow':
        // The leader asks us to campaign now; skip pre-vote, the leader is stepping aside.
        this.campaign('transfer');
        return;
      case 'readIndexResp':
        this.readStates.push({ index: m.index, context: m.context ?? NO_DATA });
        return;
      default:
        // A readIndex sent to a follower is dropped: the asker retries at the leader.
        return;
    }
  }

  private heardFromLeader(from: NodeId): void {
    this.electionElapsed = 0;
    this.leader = from;
  }

  /** The follower's side of AppendEntries (§5.3), with the conflict hint for fast backtracking. */
  private handleAppend(m: Message): void {
    if (m.index < this.log.committed) {
      // Everything up to commit agrees with the leader; say so and let it skip ahead.
      this.send({ type: 'appResp', to: m.from, index: this.log.committed });
      return;
    }
    const last = this.log.maybeAppend(m.index, m.logTerm, m.commit, m.entries);
    if (last !== null) {
      // The entries may have replaced a suffix holding a change: the configuration is
      // again the latest one the log holds.
      if (m.entries.length > 0) this.confs.track(m.entries, (index, term) => this.log.matchTerm(index, term));
      this.send({ type: 'appResp', to: m.from, index: last });
      return;
    }
    const hint = this.log.findConflictByTerm(Math.min(m.index, this.log.lastIndex()), m.logTerm);
    this.send({ type: 'appResp', to: m.from, index: m.index, reject: true, rejectHint: hint.index, logTerm: hint.term });
  }

  private handleHeartbeat(m: Message): void {
    // A leader's heartbeat commits no further than what this member acknowledged.
    if (m.commit > this.log.lastIndex()) throw new LostLogError(m.commit, this.log.lastIndex(), m.from);
    this.log.commitTo(m.commit);
    const answer: Outgoing = { type: 'heartbeatResp', to: m.from };
    if (m.context !== undefined) answer.context = m.context;
    this.send(answer);
  }

  /** InstallSnapshot (§7): the answer tells the leader how far our log now reaches. */
  private handleSnapshot(m: Message): void {
    const s = m.snapshot as NonNullable<Message['snapshot']>;
    if (s.meta.index <= this.log.committed) {
      this.send({ type: 'appResp', to: m.from, index: this.log.committed });
      return;
    }
    if (this.log.matchTerm(s.meta.index, s.meta.term)) {
      // Our log already holds the snapshot's last entry: keep the log and commit up to it.
      this.log.commitTo(s.meta.index);
      this.send({ type: 'appResp', to: m.from, index: this.log.committed });
      return;
    }
    this.log.restore(s);
    this.confs.reset(s.meta.conf);
    this.send({ type: 'appResp', to: m.from, index: this.log.lastIndex() });
  }

  // ---------------------------------------------------------------- leader

  private bcastAppend(): void {
    for (const p of this.prs.keys()) if (p !== this.id) this.sendAppend(p);
  }

  private sendAppend(to: NodeId): void {
    this.maybeSendAppend(to, true);
  }

  /**
   * maybeSendAppend sends `to` the entries from its `next` on, or a snapshot when they are
   * compacted. With `sendIfEmpty` false it sends nothing when there are no entries to send.
   * Returns whether it sent a message.
   *
   * A learner receives committed entries only. Its copy counts toward no quorum, so an
   * uncommitted entry would gain nothing there, and it could do harm: a leader that counts
   * the learner as promoted (the promotion uncommitted in its log) needs its vote, which
   * the learner refuses when it holds a later-term suffix from another leader, while as a
   * learner in its own log it never campaigns; with a voter lost, nobody is ever elected.
   */
  private maybeSendAppend(to: NodeId, sendIfEmpty: boolean): boolean {
    const pr = this.prs.get(to) as Progress;
    if (pr.isPaused()) return false;
    const prevIndex = pr.next - 1;
    const prevTerm = this.log.term(prevIndex);
    const ents = prevTerm === undefined ? undefined : this.log.slice(pr.next, Math.max(this.sendable(to), prevIndex) + 1, this.cfg.maxSizePerMsg);
    if (prevTerm === undefined || ents === undefined) return this.sendSnapshot(to, pr);
    if (ents.length === 0 && !sendIfEmpty) return false;
    this.send({ type: 'app', to, index: prevIndex, logTerm: prevTerm, entries: ents, commit: this.log.committed });
    pr.sentEntries(prevIndex + ents.length, ents.reduce((n, e) => n + entryBytes(e), 0));
    return true;
  }

  /** sendable is the last index the leader sends `to`: the commit index for a learner. */
  private sendable(to: NodeId): number {
    return isLearner(this.conf, to) ? this.log.committed : this.log.lastIndex();
  }

  private sendSnapshot(to: NodeId, pr: Progress): boolean {
    // A snapshot is large: send it only to a member that answered recently.
    if (!pr.recentActive) return false;
    const snapshot = this.log.snapshot;
    assert(snapshot !== null, 'a compacted log has a snapshot');
    this.send({ type: 'snap', to, snapshot });
    pr.becomeSnapshot(snapshot.meta.index);
    return true;
  }

  protected bcastHeartbeat(): void {
    const seq = this.readOnly.lastSeq();
    for (const [p, pr] of this.prs) {
      if (p === this.id) continue;
      // Never tell a member to commit beyond what it is known to hold.
      const m: Outgoing = { type: 'heartbeat', to: p, commit: Math.min(pr.match, this.log.committed) };
      if (seq !== null) m.context = encodeSeq(seq);
      this.send(m);
    }
  }

  /**
   * maybeCommit advances commit to the highest index a quorum holds durably, but only
   * when that entry is of the current term: "Raft never commits log entries from previous
   * terms by counting replicas" (§5.4.2, Figure 8). Earlier entries commit with it.
   */
  protected maybeCommit(): boolean {
    const index = this.quorumMatch();
    if (index <= this.log.committed || this.log.term(index) !== this.term) return false;
    this.log.commitTo(index);
    return true;
  }

  /** quorumMatch is the highest index that a quorum of voters holds durably. */
  protected quorumMatch(): number {
    const matches = this.conf.voters.map((p) => (this.prs.get(p) as Progress).match).sort((a, b) => b - a);
    return matches[this.quorum - 1] as number;
  }

  private onCommitAdvanced(): void {
    this.releasePendingReads();
    this.bcastAppend();
    // A leader outside its configuration leads only until that configuration commits.
    if (!isMember(this.conf, this.id) && this.log.committed >= this.confs.lastIndex()) this.becomeFollower(this.term, null);
  }

  private tickHeartbeat(): void {
    this.heartbeatElapsed++;
    this.electionElapsed++;
    if (this.electionElapsed >= this.cfg.electionTicks) {
      this.electionElapsed = 0;
      // "A leader steps down if an election timeout elapses without a successful round of
      // heartbeats to a majority of its cluster" (thesis §6.2).
      if (this.cfg.checkQuorum && !this.quorumActive()) {
        this.becomeFollower(this.term, null);
        return;
      }
      for (const [id, pr] of this.prs) if (id !== this.id) pr.recentActive = false;
      // A transfer that did not finish within an election timeout is abandoned.
      this.leadTransferee = null;
      this.retireRemoved();
    }
    for (const pr of this.prs.values()) if (pr.state === 'snapshot') this.tickSnapshot(pr);
    if (this.heartbeatElapsed >= this.cfg.heartbeatTicks) {
      this.heartbeatElapsed = 0;
      this.bcastHeartbeat();
    }
  }

  private quorumActive(): boolean {
    let active = 0;
    for (const id of this.conf.voters) if (id === this.id || this.prs.get(id)?.recentActive === true) active++;
    return active >= this.quorum;
  }

  /**
   * onConfChanged follows a change of the configuration in force (appended at `index`).
   * The leader starts replicating to an added member, keeps telling a removed one until
   * its removal is committed and known, and may now commit with the new quorum.
   */
  private onConfChanged(before: ConfState, index: number): void {
    if (this.role !== 'leader') return;
    const now = this.conf;
    for (const id of members(now)) {
      this.retiring.delete(id);
      if (!this.prs.has(id)) this.prs.set(id, this.newProgress(this.log.lastIndex()));
    }
    for (const id of members(before)) if (!isMember(now, id)) this.retiring.set(id, { index, committedTicks: 0 });
    if (this.leadTransferee !== null && !isVoter(now, this.leadTransferee)) this.leadTransferee = null;
    if (this.maybeCommit()) this.onCommitAdvanced();
  }

  /** retireRemoved stops replicating to removed members once their removal was committed an election timeout ago. */
  private retireRemoved(): void {
    for (const [id, r] of this.retiring) {
      if (r.index > this.log.committed) continue;
      if (r.committedTicks++ === 0) continue;
      this.retiring.delete(id);
      this.prs.delete(id);
    }
  }

  private newProgress(lastIndex: number): Progress {
    return new Progress(lastIndex + 1, this.cfg.maxInflightMsgs, this.cfg.maxInflightBytes);
  }

  private transferTo(to: NodeId): void {
    const pr = this.prs.get(to);
    if (pr === undefined || to === this.id) return;
    if (this.leadTransferee === to) return;
    this.leadTransferee = to;
    // The transfer must finish within one election timeout, counted from now.
    this.electionElapsed = 0;
    if (pr.match === this.log.lastIndex()) this.sendTimeoutNow(to);
    else this.sendAppend(to);
  }

  private sendTimeoutNow(to: NodeId): void {
    this.send({ type: 'timeoutNow', to });
  }

  /**
   * tickSnapshot: a member receiving a snapshot is left alone, however long the
   * transfer takes. The transport streams the data and tells the outcome
   * (reportSnapshot), or the member's own answer ends the state; a timer resending
   * it would restart a slow transfer forever. (A hook, so a test can break it.)
   */
  protected tickSnapshot(_pr: Progress): void {}

  protected handleReadIndex(from: NodeId, context: Uint8Array): void {
    // Until the leader commits an entry of its own term it does not know the latest
    // commit index (§8): hold the read until its no-op commits.
    if (!this.committedEntryInCurrentTerm()) {
      this.pendingReads.push({ from, context });
      return;
    }
    if (this.quorum === 1 && this.isVoter(this.id)) {
      this.respondRead(from, this.log.committed, context);
      return;
    }
    this.readOnly.add(this.log.committed, from, context, this.id);
    this.bcastHeartbeat();
  }

  protected respondRead(from: NodeId, index: number, context: Uint8Array): void {
    if (from === this.id) this.readStates.push({ index, context });
    else this.send({ type: 'readIndexResp', to: from, index, context });
  }

  private releasePendingReads(): void {
    if (!this.committedEntryInCurrentTerm() || this.pendingReads.length === 0) return;
    const reads = this.pendingReads;
    this.pendingReads = [];
    for (const r of reads) this.handleReadIndex(r.from, r.context);
  }

  private pendingReadCount(): number {
    return this.pendingReads.length + this.readOnly.pending();
  }

  protected committedEntryInCurrentTerm(): boolean {
    return this.log.term(this.log.committed) === this.term;
  }

  // ---------------------------------------------------------------- elections

  private tickElection(): void {
    this.electionElapsed++;
    // A member that may not campaign lets its timer run on: otherwise it would believe
    // itself forever inside the last leader's lease and ignore the votes a newer
    // configuration needs from it (a learner promoted in entries it has not received).
    if (this.electionElapsed >= this.randomizedElectionTimeout && this.promotable()) {
      this.electionElapsed = 0;
      this.hup();
    }
  }

  private campaign(kind: CampaignKind): void {
    if (!this.promotable()) return;
    let voteType: 'vote' | 'preVote';
    let term: number;
    if (kind === 'preElection') {
      this.becomePreCandidate();
      voteType = 'preVote';
      // Ask for votes in the term we would move to, without moving there yet.
      term = this.term + 1;
    } else {
      this.becomeCandidate();
      voteType = 'vote';
      term = this.term;
    }
    if (this.poll(this.id, true) === 'won') {
      // A group of one wins at once.
      if (kind === 'preElection') this.campaign('election');
      else this.winElection();
      return;
    }
    for (const p of this.conf.voters) {
      if (p === this.id) continue;
      const m: Outgoing = { type: voteType, to: p, term, index: this.log.lastIndex(), logTerm: this.log.lastTerm() };
      if (kind === 'transfer') m.context = CAMPAIGN_TRANSFER;
      this.send(m);
    }
  }

  /** poll counts the answers of the voters in force; an answer of anyone else does not count. */
  private poll(from: NodeId, granted: boolean): 'won' | 'lost' | 'pending' {
    if (!this.votes.has(from)) this.votes.set(from, granted);
    let yes = 0;
    let no = 0;
    for (const id of this.conf.voters) {
      const v = this.votes.get(id);
      if (v === true) yes++;
      else if (v === false) no++;
    }
    if (yes >= this.quorum) return 'won';
    if (no > this.conf.voters.length - this.quorum) return 'lost';
    return 'pending';
  }

  private winElection(): void {
    this.becomeLeader();
    this.bcastAppend();
  }

  private reset(term: number): void {
    if (this.term !== term) {
      this.term = term;
      this.vote = null;
    }
    this.leader = null;
    this.electionElapsed = 0;
    this.heartbeatElapsed = 0;
    this.randomizedElectionTimeout = this.cfg.electionTicks + Math.floor(this.cfg.random() * this.cfg.electionTicks);
    this.leadTransferee = null;
    this.votes.clear();
    this.prs.clear();
    this.readOnly.reset();
    this.pendingReads = [];
    this.retiring.clear();
  }

  becomeFollower(term: number, leader: NodeId | null): void {
    this.reset(term);
    this.leader = leader;
    this.role = 'follower';
  }

  private becomePreCandidate(): void {
    assert(this.role !== 'leader', 'a leader does not pre-campaign');
    // The term and vote stay: a pre-candidate has promised nothing.
    this.votes.clear();
    this.leader = null;
    this.role = 'preCandidate';
  }

  private becomeCandidate(): void {
    assert(this.role !== 'leader', 'a leader does not campaign');
    this.reset(this.term + 1);
    this.vote = this.id;
    this.role = 'candidate';
  }

  private becomeLeader(): void {
    assert(this.role === 'candidate', 'only a candidate becomes leader');
    this.reset(this.term);
    this.leader = this.id;
    this.role = 'leader';
    const next = this.log.lastIndex() + 1;
    // A leader elected while its own removal is uncommitted is not in its configuration,
    // but tracks its own copy all the same.
    for (const p of new Set([...members(this.conf), this.id])) this.prs.set(p, this.newProgress(next - 1));
    const self = this.prs.get(this.id) as Progress;
    // The leader's own copy counts toward a quorum only once it is durable.
    self.match = this.log.persisted;
    self.recentActive = true;
    // A no-op of the new term lets the entries of earlier terms commit (§5.4.2, §8).
    this.log.append([{ index: next, term: this.term, data: NO_DATA }]);
  }

  // ---------------------------------------------------------------- plumbing

  private send(m: Outgoing): void {
    const out: Message = {
      type: m.type,
      from: this.id,
      to: m.to,
      term: m.term ?? this.term,
      logTerm: m.logTerm ?? 0,
      index: m.index ?? 0,
      entries: m.entries ?? [],
      commit: m.commit ?? 0,
      reject: m.reject ?? false,
      rejectHint: m.rejectHint ?? 0,
    };
    if (m.snapshot !== undefined) out.snapshot = m.snapshot;
    if (m.context !== undefined) out.context = m.context;
    this.msgs.push(out);
  }

  private error(code: RaftErrorCode, message: string): RaftError {
    return { ok: false, code, message, leader: this.leader };
  }
}

export function validateConfig(c: Config): void {
  const fail = (what: string): never => {
    throw new RangeError(`raft config: ${what}`);
  };
  if (typeof c.id !== 'string' || c.id.length === 0) fail('id must be a non-empty string');
  if (!Array.isArray(c.peers) || !(c.peers.length === 0 || c.peers.includes(c.id))) fail(`peers must include id ${c.id} (or be empty for a member that joins)`);
  if (new Set(c.peers).size !== c.peers.length) fail('peers must be unique');
  const positive: [string, number][] = [
    ['electionTicks', c.electionTicks],
    ['heartbeatTicks', c.heartbeatTicks],
    ['maxInflightMsgs', c.maxInflightMsgs],
    ['maxSizePerMsg', c.maxSizePerMsg],
    ['maxUncommittedEntries', c.maxUncommittedEntries],
  ];
  for (const [name, v] of positive) if (!Number.isSafeInteger(v) || v < 1) fail(`${name} must be a positive integer`);
  if (c.heartbeatTicks >= c.electionTicks) fail('heartbeatTicks must be less than electionTicks');
  if (c.maxInflightBytes !== undefined && !(c.maxInflightBytes >= 1)) fail('maxInflightBytes must be positive');
  if (c.maxPendingReads !== undefined && !(Number.isSafeInteger(c.maxPendingReads) && c.maxPendingReads >= 1)) {
    fail('maxPendingReads must be a positive integer');
  }
  if (typeof c.random !== 'function') fail('random must be a function returning [0, 1)');
}
