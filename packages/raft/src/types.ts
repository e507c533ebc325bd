// The records that cross the library's boundary: entries, hard state, snapshots,
// messages, Ready, results and configuration. Every record here is plain data (no
// classes, functions or Maps), so that a transport can encode a Message field by field
// and a store can encode an Entry or a HardState without knowing the core.

/** NodeId names a member of the group. */
export type NodeId = string;

/**
 * ConfState is a configuration: the voters, the learners (they receive the log but
 * neither vote nor count toward a quorum), an opaque context per member, chosen by
 * the application, and the ids removed so far, which are never members again.
 * Invariant: voters, learners and removed are sorted and pairwise disjoint.
 */
export interface ConfState {
  voters: NodeId[];
  learners: NodeId[];
  context: Record<NodeId, string>;
  /** the ids removed by the changes that led to this configuration; a change that adds one back is refused. */
  removed: NodeId[];
}

/**
 * ConfChange is one membership change: add a learner (with its context), promote a
 * learner to voter, or remove a member. See membership.ts.
 */
export interface ConfChange {
  type: 'addLearner' | 'promote' | 'remove';
  node: NodeId;
  context?: string;
}

/** EntryType: `normal` entries are the application's; `conf` entries change membership. */
export type EntryType = 'normal' | 'conf';

/**
 * Entry is one slot of the replicated log. Invariant: `index >= 1`, `term >= 1`.
 * An entry whose `data` is empty is a no-op that a new leader appends to commit the
 * entries of earlier terms (Raft §5.4.2, §8); the application skips it. Entries are
 * treated as immutable once created: the core shares them between its log and messages.
 */
export interface Entry {
  index: number;
  term: number;
  data: Uint8Array;
  /** absent means `normal`. A `conf` entry's data is a ConfEntry (membership.ts). */
  type?: EntryType;
}

/**
 * HardState is what a node must persist before it sends any message that depends on it.
 * `vote` is the member voted for in `term` (null: none). `commit` is advisory: losing it
 * is safe, it is relearned from the leader.
 */
export interface HardState {
  term: number;
  vote: NodeId | null;
  commit: number;
}

/** SnapshotMeta says which prefix of the log a snapshot replaces: entries `[1, index]`. */
export interface SnapshotMeta {
  index: number;
  term: number;
  /** the configuration in force at `index`. */
  conf: ConfState;
}

/** Snapshot is the application's state after applying entries `[1, meta.index]`. */
export interface Snapshot {
  meta: SnapshotMeta;
  data: Uint8Array;
}

/**
 * The wire message types. The list is exported so that a transport can map each type to
 * a protobuf enum value and back; its order is the enum order and never changes.
 *
 * - app / appResp: AppendEntries (also the leader's probe and commit carrier) and its answer.
 * - vote / voteResp, preVote / preVoteResp: RequestVote and the pre-vote round (§9.6).
 * - heartbeat / heartbeatResp: the leader's periodic beat; `context` carries ReadIndex rounds.
 * - snap: InstallSnapshot; the answer is an appResp.
 * - timeoutNow: the leader tells the transferee to campaign at once (§3.10).
 * - readIndex / readIndexResp: a follower's linearizable read forwarded to the leader.
 * - transferLeader: a follower forwards a transfer request to the leader
 *   (`context` holds the transferee's id in UTF-8).
 */
export const MESSAGE_TYPES = [
  'app',
  'appResp',
  'vote',
  'voteResp',
  'preVote',
  'preVoteResp',
  'heartbeat',
  'heartbeatResp',
  'snap',
  'timeoutNow',
  'readIndex',
  'readIndexResp',
  'transferLeader',
] as const;

export type MessageType = (typeof MESSAGE_TYPES)[number];

/**
 * Message is one Raft RPC, flat like etcd's raftpb.Message so it maps 1:1 onto protobuf.
 * Fields a type does not use hold their zero value (0, false, []).
 *
 * - `term`: the sender's term; 0 for readIndex and transferLeader, which are requests
 *   forwarded to the leader and never change anyone's term.
 * - `logTerm`, `index`: app: the (term, index) of the entry just before `entries`;
 *   vote/preVote: the candidate's last entry; appResp: the highest index the follower
 *   now matches, or on reject the index that was rejected; readIndexResp: the read index.
 * - `commit`: the sender's commit index (app, heartbeat).
 * - `reject`, `rejectHint`: a rejected app carries in `rejectHint` the follower's best
 *   guess of the highest index that could match, and in `logTerm` that entry's term,
 *   so the leader can skip a whole term of conflicting entries at once (§5.3).
 */
export interface Message {
  type: MessageType;
  from: NodeId;
  to: NodeId;
  term: number;
  logTerm: number;
  index: number;
  entries: Entry[];
  commit: number;
  reject: boolean;
  rejectHint: number;
  snapshot?: Snapshot;
  context?: Uint8Array;
}

export type Role = 'follower' | 'preCandidate' | 'candidate' | 'leader';

/** SoftState is volatile and need not be persisted; Ready carries it when it changes. */
export interface SoftState {
  leader: NodeId | null;
  role: Role;
}

/**
 * ReadState answers `readIndex(context)`: once the local state machine has applied
 * `index`, a read of it is linearizable.
 */
export interface ReadState {
  index: number;
  context: Uint8Array;
}

/**
 * Ready is a batch of work for the caller. See the numbered duties in index.ts.
 *
 * - `hardState`: persist it (null: unchanged since the previous Ready).
 * - `snapshot`: persist it, replacing the whole stored log, before `entries`.
 * - `entries`: persist them; the first may overwrite a stored entry, in which case every
 *   stored entry from its index on is replaced (a conflicting suffix is truncated).
 * - `mustSync`: the write must be synced (fsync) before `messages` are sent. It is false
 *   only when nothing but the commit index changed.
 * - `messages`: send them only after the write above is durable.
 * - `committedEntries`: apply them in order, after the write (and the snapshot restore).
 * - `readStates`: reads that may be served once `applied >= index`.
 */
export interface Ready {
  softState: SoftState | null;
  hardState: HardState | null;
  snapshot: Snapshot | null;
  entries: Entry[];
  mustSync: boolean;
  messages: Message[];
  committedEntries: Entry[];
  readStates: ReadState[];
  /**
   * termDurable is true when this Ready changes neither the term nor the vote: the ones
   * in force are on disk already, and a leader's appends may leave before the Ready is
   * persisted (splitMessages).
   */
  termDurable: boolean;
}

/** Boot is what a store loads to restart a node. */
export interface Boot {
  hardState: HardState;
  snapshot: Snapshot | null;
  /** entries after the snapshot, contiguous from `snapshot.meta.index + 1` (or 1). */
  entries: Entry[];
}

/**
 * The closed set of errors the library answers a caller or a peer with. None of them
 * is a bug; each asks the caller to do something else:
 * - not_leader: propose/read on a node that does not lead (`leader` is the hint, or null).
 * - transfer_in_progress: the leader is handing over; retry at the next leader.
 * - uncommitted_limit: backpressure, `maxUncommittedEntries` would be exceeded.
 * - invalid_proposal: an empty batch, an empty entry (reserved for no-ops) or a batch
 *   larger than `maxUncommittedEntries` (it could never be accepted).
 * - read_limit: backpressure, `maxPendingReads` reads already wait for confirmation.
 * - unknown_peer: a node id that is not a member (or, for a transfer, not a voter).
 * - invalid_message: a message that is malformed or not addressed to this node.
 * - conf_change_refused: a membership change that is not valid now: another change is
 *   uncommitted, the leader has not committed an entry of its term yet, the change
 *   itself is invalid (see membership.ts), or it removes the leader (transfer first).
 */
export const RAFT_ERROR_CODES = [
  'not_leader',
  'transfer_in_progress',
  'uncommitted_limit',
  'invalid_proposal',
  'read_limit',
  'unknown_peer',
  'invalid_message',
  'conf_change_refused',
] as const;

export type RaftErrorCode = (typeof RAFT_ERROR_CODES)[number];

export interface RaftError {
  ok: false;
  code: RaftErrorCode;
  message: string;
  /** the leader this node knows of, so a caller can redirect. */
  leader: NodeId | null;
}

export type RaftResult<T extends object = object> = ({ ok: true } & T) | RaftError;

export interface ProposeOk {
  /** the term the entries were appended in; an entry is still this proposal only if its term matches. */
  term: number;
  /** the proposal occupies log indexes `[firstIndex, lastIndex]`. */
  firstIndex: number;
  lastIndex: number;
}

export interface Config {
  id: NodeId;
  /**
   * the voters the group was bootstrapped with, `id` included; their contexts are in
   * `context`. It is used only while the log and snapshot hold no configuration of their
   * own (the first conf entry carries the whole configuration). Empty for a member that
   * joins a running group: it waits, voting for no one and campaigning never, until a
   * leader adds it.
   */
  peers: NodeId[];
  /** the bootstrap members' contexts (default: empty strings). */
  context?: Record<NodeId, string>;
  /** a follower campaigns after a randomized timeout in `[electionTicks, 2 * electionTicks)` ticks. */
  electionTicks: number;
  /** a leader beats every `heartbeatTicks` ticks. Invariant: `heartbeatTicks < electionTicks`. */
  heartbeatTicks: number;
  /** run a pre-vote round before incrementing the term (§9.6). */
  preVote: boolean;
  /** a leader steps down when it has not heard from a quorum for an election timeout (§6.2). */
  checkQuorum: boolean;
  /** at most this many append messages in flight to one follower. */
  maxInflightMsgs: number;
  /** at most this many entry bytes in flight to one follower (default: unbounded). */
  maxInflightBytes?: number;
  /** an append message carries at most this many entry bytes (but at least one entry). */
  maxSizePerMsg: number;
  /** the leader refuses proposals beyond this many entries appended but not committed. */
  maxUncommittedEntries: number;
  /** the leader holds at most this many reads awaiting confirmation (default 4096); beyond, reads are refused. */
  maxPendingReads?: number;
  /** a Ready carries at most this many bytes of committed entries (default `maxSizePerMsg`). */
  maxCommittedSizePerReady?: number;
  /** the only source of randomness: returns a number in [0, 1). */
  random: () => number;
  /**
   * the index the application has already applied on restart (default: the snapshot's
   * index). It may exceed the stored commit index, which is written without fsync.
   */
  applied?: number;
}

/** ProgressStatus is the leader's view of one member's replication. */
export interface ProgressStatus {
  match: number;
  next: number;
  state: 'probe' | 'replicate' | 'snapshot';
  /** false for a learner, and for a removed member the leader still tells about its removal. */
  voter: boolean;
  paused: boolean;
  recentActive: boolean;
  inflight: number;
}

export interface Status {
  id: NodeId;
  term: number;
  vote: NodeId | null;
  role: Role;
  leader: NodeId | null;
  commit: number;
  applied: number;
  /** the highest index known durable on this node. */
  persisted: number;
  firstIndex: number;
  lastIndex: number;
  snapshotIndex: number;
  leadTransferee: NodeId | null;
  /** the configuration in force (the latest in the log) and the index of its entry (0: bootstrap or snapshot). */
  conf: ConfState;
  confIndex: number;
  /** per-member replication, on the leader only. */
  progress: Record<NodeId, ProgressStatus> | null;
}
