/**
 * @apl/raft: Raft consensus as a pure state machine, a durable LevelDB log store and a
 * deterministic simulator.
 *
 * The core (RawNode) does no I/O, reads no clock and draws randomness only from
 * `config.random`. Input is a tick (`tick()`), a message from a peer (`step(m)`) or a
 * local request (`propose`, `readIndex`, `transferLeadership`, `campaign`, `compact`,
 * `stopCampaigning` when the member shuts down). Output is a Ready: state to persist,
 * messages to send, entries to apply.
 *
 * The caller's duties, for each Ready, in this order:
 *
 *   1. Persist. Write `rd.snapshot` (if any, it replaces the stored log), `rd.entries`
 *      (the first may overwrite stored entries: delete every stored entry from its
 *      index on) and `rd.hardState` (if not null) in one atomic write, fsynced when
 *      `rd.mustSync`. `LogStore.save(rd)` does exactly this.
 *   2. Send. Only after the write is durable, send `rd.messages`. They depend on it: a
 *      vote must not leave before the vote is on disk, an acknowledgement of entries
 *      must not leave before the entries are. The one exception: `splitMessages(rd)`
 *      names a leader's appends (`early`), which may be sent before or during the
 *      write, so that the followers persist in parallel with the leader; the rest
 *      (`late`) waits for it.
 *   3. Apply. If `rd.snapshot` is set, restore the state machine from `snapshot.data`.
 *      Then apply `rd.committedEntries` in order, skipping entries with empty data (a
 *      new leader's no-op). Serve each `rd.readStates[k]` once applied >= its index.
 *   4. Advance. Call `advance(rd)`. Only then may `ready()` be called again.
 *
 * Between ready() and advance() the caller may keep calling tick(), step() and the local
 * requests (for example while awaiting the disk): their effects go into the next Ready.
 * hasReady() is false while a Ready is outstanding.
 *
 * Invariants the library keeps (and the simulator checks after every step):
 *   - Election safety: at most one leader per term.
 *   - Log matching: two logs with an entry of the same index and term are identical up
 *     to that index.
 *   - Leader completeness: a committed entry is in the log of every later leader.
 *   - State machine safety: every node applies the same entry at a given index.
 *   - A leader commits by counting replicas only entries of its own term (Figure 8),
 *     and counts its own copy only once it is durable (after advance).
 *   - Durability: an entry is reported committed only when a quorum has it on disk.
 *
 * Restart: load the store (`LogStore.load()`), restore the state machine from
 * `boot.snapshot` if any, and construct a RawNode with the Boot. Committed entries after
 * the snapshot come back in committedEntries (pass `config.applied` if the application
 * keeps a later applied index of its own).
 *
 * Compaction: after applying, call `compact(appliedIndex, stateBytes)` and persist the
 * returned snapshot with `LogStore.saveSnapshot`. Followers too far behind then receive it.
 *
 * Snapshots between processes: a `snap` message in Ready carries the metadata; the
 * transport streams the data beside it and reports the outcome with
 * `reportSnapshot(to, ok)`. The leader never resends on a timer while a transfer runs.
 * A transport that cannot reach a peer calls `reportUnreachable(to)`.
 *
 * Start: a store records the member's identity (cluster id, node id, bootstrap members)
 * at bootstrap; `checkStart` refuses a store of another cluster or member, and an empty
 * store when the configuration says the cluster already runs.
 *
 * Membership: `config.peers` are the bootstrap voters. Changes go through the log one
 * server at a time (`proposeConfChange`: add a learner, promote it, remove a member);
 * committedEntries include them as entries of type `conf`, which the application does
 * not apply to its state machine (decodeConfEntry reads them). A member started with
 * `peers: []` joins: it waits until a leader adds it. See membership.ts and docs/raft.md.
 */
export { RawNode, emptyBoot, splitMessages } from './rawnode.js';
export { LevelLogStore } from './level-store.js';
export { LogStoreCorruptError } from './store-records.js';
export { SEGMENT_BYTES, WalLogStore } from './wal-store.js';
export { MemoryLogStore, type LogStore, type SaveBatch } from './storage.js';
export { LostLogError, RaftInvariantError } from './assert.js';
export { checkStart, isEmptyBoot, type ClusterState, type Identity, type StartCheck } from './identity.js';
export { seededRandom } from './random.js';
export { confState, decodeConfEntry, isMember, isVoter, members, wasRemoved, type ConfEntry } from './membership.js';
export {
  MESSAGE_TYPES,
  RAFT_ERROR_CODES,
  type Boot,
  type ConfChange,
  type ConfState,
  type Config,
  type Entry,
  type HardState,
  type Message,
  type MessageType,
  type NodeId,
  type ProgressStatus,
  type ProposeOk,
  type RaftErrorCode,
  type RaftError,
  type RaftResult,
  type Ready,
  type ReadState,
  type Role,
  type Snapshot,
  type SnapshotMeta,
  type SoftState,
  type Status,
} from './types.js';
export {
  decodeSnapshotMeta,
  encodeSnapshotMeta,
  messageCodec,
  WireError,
  wireTypes,
  type MessageCodec,
  type WireErrorCode,
} from './wire/codec.js';
