/**
 * The replica: a Raft group member whose committed entries feed the ledger's state
 * machine. A standalone node is a group of one, so there is one code path.
 *
 * The driver honours the Raft contract for every Ready, in order: persist (one synced
 * LevelDB batch of the Raft log for all the entries of the batch), send, apply the
 * committed entries, serve reads, advance. A leader's appends are the one exception
 * the contract allows: they leave while the write is on the disk. Proposals that
 * arrive while a write is on the disk wait for the next Ready, so many proposals share
 * one fsync.
 *
 * Applying is two phases (core/store.ts): the records every committed operation of
 * the Ready reads are loaded together from the state store, then each operation is
 * applied over one view of it, later ones seeing earlier ones' writes; the view's
 * writes, the journal records of what took effect (`{index, op, result, entry_hash}`,
 * what `GET /admin/v1/log/export` serves) and the applied index go to the store in one
 * batch. The waiting requests are answered as soon as their operations are applied:
 * their entries are durable in the Raft log, and the store serves the batch's records
 * from memory until it lands.
 *
 * Restart costs what was not yet applied: the store says where it is, and Raft hands
 * back only the committed entries after it. The Raft log is compacted only below an
 * index the store has made durable, so those entries are always there.
 *
 * A replica whose disk fails stops safely: its clocks stop, waiting requests are
 * answered 503 `commit_unavailable` (their entries may be in the log; an intent
 * already applied was answered, and a restart applies it again from the log), new ones 422
 * `gateway_error`, `/readyz` answers not ready, and the reason is logged once.
 */
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { decodeOperationText, encodeOperation, operationText, type Applied, type Operation } from '@apl/core';
import {
  checkStart, confState, decodeConfEntry, isEmptyBoot, isMember, LevelLogStore, LostLogError, RawNode, seededRandom, splitMessages, WalLogStore, wasRemoved,
  type Boot, type ClusterState, type ConfChange, type ConfState, type Entry, type LogStore, type Message, type NodeId, type Ready, type Status,
} from '@apl/raft';
import { ConfigError } from './config.js';
import { DataDirLock } from './data-lock.js';
import { PROMOTE_LAG_ENTRIES_MAX, readRemoved, writeMembers, writeRemoved, type Removed } from './membership.js';
import { ApiError } from './errors.js';
import { startBatch } from './apply-batch.js';
import { LedgerStore, type SnapshotChunk, type StorePosition, type WrapDb } from './ledger-store.js';
import type { Logger } from './log.js';
import type { Metrics } from './metrics.js';

/** how many compaction intervals the log may grow by while a member installs a store. */
const SNAPSHOT_HOLD_INTERVALS = 5;

/** Carries Raft messages to the other members. */
export interface Transport {
  send(messages: Message[]): void;
}

/** A member's role as the status routes and logs say it (Replica.role). */
export type MemberRole = Status['role'] | 'learner' | 'removed';

export interface ReplicaOptions {
  id: NodeId;
  /** the voters a new group is bootstrapped with, and each one's context (its addresses, membership.ts). */
  peers: NodeId[];
  peerContext: Record<NodeId, string>;
  /** told of every change of the configuration in force (the latest in the log), and once at start. */
  onMembers?: (conf: ConfState) => void;
  /** the identity checks of a start (see @apl/raft checkStart): this cluster's id, and whether it already runs. */
  clusterId: string;
  clusterState: ClusterState;
  dataDir: string;
  raft: { tick_ms: number; election_ticks: number; heartbeat_ticks: number; max_inflight_msgs: number; max_size_per_msg: number; max_uncommitted_entries: number; wal_segment_bytes: number };
  tickIntervalMs: number;
  commitTimeoutMs: number;
  proposalsInFlightMax: number;
  snapshotIntervalEntries: number;
  /** entries kept before the applied index when the log is compacted. */
  snapshotCatchupEntries: number;
  /** how far past its usual interval the log may grow for a member behind (`snapshot_hold_entries`; see holdsCompaction). */
  snapshotHoldEntries: number;
  /** a member is ready while it is at most this many committed entries behind (`ready_lag_entries_max`). */
  readyLagEntriesMax: number;
  cacheEntriesMax: number;
  writeBufferBytes: number;
  blockBytes: number;
  transport: Transport;
  /** the configuration names no other member: the node runs no peer mesh, and a store of a cluster's member is refused. */
  standalone?: boolean;
  /** forwards an operation's bytes to the primary; absent on a standalone node or with forward_writes off. */
  forward?: (leader: NodeId, operation: Uint8Array, timeoutMs: number) => Promise<{ index: number; term: number }>;
  /** forwards a membership change to the primary; absent on a standalone node. */
  forwardConfChange?: (leader: NodeId, change: ConfChange, timeoutMs: number) => Promise<{ index: number; term: number }>;
  log: Logger;
  metrics: Metrics;
  /** wraps the state store's database (tests inject faults through it). */
  wrapDb?: WrapDb;
  /**
   * told, with what to do, when the replica stops for good: a restart cannot help (its
   * log lost acknowledged entries, or a later start of this member runs elsewhere).
   */
  onFatal?: (message: string) => void;
}

interface Waiter {
  term: number;
  /** op is the proposal as read back from its bytes: the entry at this index and term holds exactly them. */
  op: Operation;
  /** text is the operation's canonical JSON: the entry's bytes, as text. */
  text: string;
  resolve: (a: Applied) => void;
  reject: (e: ApiError) => void;
  timer: NodeJS.Timeout;
}

interface ReadWaiter {
  index: number | null;
  /** the Raft tick at which its index was last asked for (see askReadsAgain). */
  asked: number;
  resolve: () => void;
  reject: (e: ApiError) => void;
  timer: NodeJS.Timeout;
}

/**
 * An operation the log could not read back: every replica decodes each entry with
 * the operation schema, so such an entry is never proposed.
 */
export class UnreadableOperation extends Error {
  constructor(readonly issues: { path: string; message: string }[]) {
    super(`the operation does not read back: ${issues.map((i) => `${i.path} ${i.message}`).join('; ')}`);
  }
}

/** A proposal that cannot be made here because this member does not lead. */
export class NotLeaderError extends Error {
  constructor(readonly leader: NodeId | null) {
    super('not the primary');
  }
}

/**
 * How many applied results a member remembers, so that a forwarded proposal whose
 * entry was applied here before the primary's answer arrived is still answered.
 */
const RECENT_RESULTS_MAX = 4096;

const UNCONFIRMED = 'The commit could not be confirmed here; it may or may not have been recorded. Retry with the same transaction id, or read the transaction.';
const SHUTTING_DOWN = 'The node is shutting down; nothing was recorded. Resubmit to another replica.';
const CANNOT_WRITE = 'The node cannot write its state; nothing was recorded. Resubmit to another replica.';
const UNCONFIRMED_CHANGE = 'The membership change could not be confirmed in time; it may or may not have taken effect. GET /admin/v1/cluster shows the members in force.';
const REMOVED_WRITE = 'This member was removed from the cluster; nothing was recorded. Send to another replica.';
const STOPPED = 'The node stopped before the commit was confirmed; it may or may not have been recorded. Retry with the same transaction id on another replica, or read the transaction.';
const REMOVED_READ = 'This member was removed from the cluster; it serves nothing, its state is no longer kept current. Send to another replica.';
/** The record of a received store that holds the Raft configuration at its index (reconcile reads it). */
const CONF_RECORD = 'raft/conf';

/** A compaction of the Raft log below `index`, recording the store's position `pos`, once the store is synced. */
interface PendingCompaction {
  index: number;
  pos: StorePosition;
  synced: boolean;
}

/**
 * Whether compaction up to `index` waits: while the log since the last compaction (at
 * `snapshotIndex`) still holds entries a member needs.
 *
 * - **A live member installing the store, or taking the entries written meanwhile.**
 *   Compacted past them, the member would need another store when it is done, and under
 *   steady writes (each store taking longer to send than the catch-up entries take to be
 *   written) it would never catch up. The hold ends once the log has grown by
 *   SNAPSHOT_HOLD_INTERVALS intervals since the last compaction, so that a stalled
 *   transfer or a slow member cannot keep it growing.
 * - **A member behind whose entries the log still holds** (its match is at or after the
 *   last compaction): one stopped, restarting, paused or cut off, and then catching up.
 *   Back within the hold, it catches up from the log instead of by a whole store, which
 *   for a large ledger takes minutes and leaves the group one failure from unavailable
 *   meanwhile. The hold ends once the log has grown by `holdEntries` more than an
 *   interval, so that a member gone for good costs the log a bounded tail. The primary
 *   knows the match only of members it has heard from in its term; one silent since
 *   before the election holds nothing.
 */
export function holdsCompaction(progress: Status['progress'], index: number, snapshotIndex: number, intervalEntries: number, holdEntries: number): boolean {
  const members = Object.values(progress ?? {});
  const grown = index - snapshotIndex;
  const live = members.some((p) => p.recentActive && (p.state === 'snapshot' || p.match < index));
  if (live && grown < SNAPSHOT_HOLD_INTERVALS * intervalEntries) return true;
  // A match of 0 is a member not heard from in this term (or with an empty log), even before the first compaction.
  const behind = members.some((p) => p.state !== 'snapshot' && p.match > 0 && p.match >= snapshotIndex && p.match < index);
  return behind && grown < intervalEntries + holdEntries;
}

export class Replica {
  private readonly waiters = new Map<number, Waiter>();
  /**
   * Operations forwarded to this member as primary, as appendForwarded read them back,
   * by index, until their entry is applied here: the entry is then not decoded again.
   * At most proposalsInFlightMax; an entry replaced by a new primary is told apart by its term.
   */
  private readonly forwarded = new Map<number, { term: number; op: Operation; text: string }>();
  /**
   * recent results by index, oldest first: [index, term, result]; at most RECENT_RESULTS_MAX.
   * The result is kept only for an entry applied while this member waits on a forward
   * (null otherwise): a forwarded entry lands above everything applied when it was
   * sent, so no later answer can name an entry applied before. A primary or a
   * standalone node, which forwards nothing, then holds no result past its answer.
   */
  private readonly recent = new Map<number, { term: number; applied: Applied | null }>();
  /** the forwards this member is waiting on the primary's answer to. */
  private forwarding = 0;
  /** a received store waiting for Raft to accept the snapshot it belongs to. */
  private received: { name: string; index: number } | null = null;
  /** the store transfer being received: the term of its message, how to give it up, and when it has ended. */
  private receiving: { term: number; abandon: (why: string) => void; ended: Promise<void> } | null = null;
  /** the term the waiters were registered in; a new term rejects the older ones. */
  private term = 0;
  /** the applied index whose batch has landed in the store (the journal holds it). Invariant: landedIndex <= applied. */
  private landedIndex: number;
  private readonly reads = new Map<string, ReadWaiter>();
  /** Raft ticks since start: the clock of askReadsAgain. */
  private ticks = 0;
  /** appliedListeners are told of each applied batch (the change feed follows them). */
  private readonly appliedListeners = new Set<() => void>();
  /** readPrefix makes ReadIndex contexts unique across restarts of this member. */
  private readonly readPrefix = `${randomBytes(6).toString('hex')}:`;
  private readSeq = 0;
  /** The primary as observe() last saw it; a change asks the waiting reads again. */
  private leaderSeen: NodeId | null = null;
  /** This member's role as observe() last saw it; a change is logged (role_changed). */
  private roleSeen: MemberRole | null = null;
  /** When this member last stopped being the primary (Date.now()), or null. */
  private steppedDownAt: number | null = null;
  private pumping = false;
  /** membership changes waiting for their commit, by index. */
  private readonly confWaiters = new Map<number, { term: number; resolve: () => void; reject: (e: ApiError) => void; timer: NodeJS.Timeout }>();
  /** the configuration last told to onMembers. */
  private conf: ConfState | null = null;
  /** set once this member applied its own removal: it serves nothing any more. */
  private removed: Removed | null;
  private failed: Error | null = null;
  /** the hand-over this member began when it started to stop (handOver), or null: it still takes leadership. */
  private handingOver: Promise<void> | null = null;
  /** proposals waiting for this primary's leadership transfer to end. At most proposalsInFlightMax. */
  private awaitingTransfer = 0;
  private closed = false;
  private timers: NodeJS.Timeout[] = [];
  /** snapshotIndex is the index of the latest compaction. */
  private snapshotIndex: number;
  /** a compaction waiting for the store's sync, or null. */
  private compaction: PendingCompaction | null = null;

  private constructor(
    private readonly opts: ReplicaOptions,
    private readonly raft: RawNode,
    private readonly log: LogStore,
    readonly store: LedgerStore,
    snapshotIndex: number,
    removed: Removed | null,
    private readonly lock: DataDirLock,
    /** which start of a node on this data directory this is (its lock counts them); the peer mesh names it. */
    readonly starts: number,
  ) {
    this.snapshotIndex = snapshotIndex;
    this.landedIndex = store.position.applied;
    this.removed = removed;
  }

  static async open(opts: ReplicaOptions): Promise<Replica> {
    mkdirSync(opts.dataDir, { recursive: true });
    const lock = await DataDirLock.take(opts.dataDir);
    try {
      return await Replica.openLocked(opts, lock);
    } catch (err) {
      await lock.release();
      throw err;
    }
  }

  private static async openLocked(opts: ReplicaOptions, lock: DataDirLock): Promise<Replica> {
    const walDir = join(opts.dataDir, 'wal');
    const walMade = !existsSync(walDir) && !existsSync(join(opts.dataDir, 'raft', 'CURRENT'));
    // The Raft log and the state store open together: the log is read on this thread,
    // the store on its own (a restart reads a whole segment of the log, and LevelDB
    // replays its own log). If either fails, the other is closed again.
    const [logOpened, storeOpened] = await Promise.allSettled([
      openLog(opts.dataDir, opts.raft.wal_segment_bytes),
      LedgerStore.open(join(opts.dataDir, 'ledger'), { cacheEntriesMax: opts.cacheEntriesMax, writeBufferBytes: opts.writeBufferBytes, blockBytes: opts.blockBytes, ...(opts.wrapDb ? { wrap: opts.wrapDb } : {}) }),
    ]);
    if (logOpened.status === 'rejected' || storeOpened.status === 'rejected') {
      if (logOpened.status === 'fulfilled') await logOpened.value.close();
      if (storeOpened.status === 'fulfilled') await storeOpened.value.close();
      throw logOpened.status === 'rejected' ? logOpened.reason : (storeOpened as PromiseRejectedResult).reason;
    }
    const [log, store] = [logOpened.value, storeOpened.value];
    const loaded = await log.load();
    if (log instanceof WalLogStore && log.droppedTail !== null) {
      const d = log.droppedTail;
      opts.log.warn({ event: 'wal_tail_dropped', segment: d.segment, offset: d.offset, bytes: d.bytes },
        `the Raft log ended in a record that was not whole (${d.bytes} bytes at ${d.offset} of ${d.segment}: a write cut by a crash, or a segment cut short); it was dropped`);
    }
    // A joining member records no bootstrap members: it learns the configuration from the log.
    const configured = { clusterId: opts.clusterId, nodeId: opts.id, members: opts.clusterState === 'join' ? [] : opts.peers };
    const stored = await log.identity();
    // A Raft log with nothing in it beside a store that applied entries is a log that was
    // lost (a volume not mounted at wal/, a directory moved): it held this member's term,
    // its vote and entries the store may not have. Started on it, the member would vote
    // again in a term it voted in, and a standalone node would drop what it acknowledged.
    if (stored === null && isEmptyBoot(loaded) && store.position.applied > 0) {
      await log.close();
      await store.close();
      if (walMade) rmSync(walDir, { recursive: true, force: true }); // so that the log can be put back in its place
      throw new ConfigError(`the Raft log (${walDir}) is empty, but the state store beside it has applied ${store.position.applied} entries: `
        + 'the log was lost (a volume not mounted, a directory moved). It holds this member\'s term, its vote and entries the store may not have, so the member does not start without it: '
        + 'put the log back, or restore the whole data directory from a backup; a cluster member whose log is gone is replaced (docs/operations.md, "Replacing a dead replica")');
    }
    const check = checkStart({ stored, configured, clusterState: opts.clusterState, empty: isEmptyBoot(loaded) && store.position.applied === 0 });
    if (!check.ok) {
      await log.close();
      await store.close();
      throw new ConfigError(check.message);
    }
    if (check.bootstrap) await log.bootstrap(configured);
    const bootstrapMembers = (stored ?? configured).members;
    let boot: Boot;
    try {
      boot = await reconcile(log, loaded, store, opts.dataDir);
    } catch (err) {
      await log.close();
      await store.close();
      throw err;
    }
    const applied = store.position.applied;
    const compacted = boot.snapshot?.meta.index ?? 0;
    if (applied < compacted) {
      await log.close();
      await store.close();
      throw new ConfigError(`the state store is at index ${applied}, below the Raft log's compaction at ${compacted}: the entries between are gone, so this data directory cannot be recovered alone (restore it from a backup, or replace the member)`);
    }
    const raft = new RawNode({
      id: opts.id,
      peers: bootstrapMembers,
      context: Object.fromEntries(bootstrapMembers.map((id) => [id, opts.peerContext[id] ?? ''])),
      electionTicks: opts.raft.election_ticks,
      heartbeatTicks: opts.raft.heartbeat_ticks,
      preVote: true,
      checkQuorum: true,
      maxInflightMsgs: opts.raft.max_inflight_msgs,
      maxSizePerMsg: opts.raft.max_size_per_msg,
      maxUncommittedEntries: opts.raft.max_uncommitted_entries,
      // Election timeouts must differ between members; the state machine never sees this.
      random: seededRandom(randomBytes(4).readUInt32LE()),
      applied,
    }, boot);
    // A member's data started as a standalone node (no members configured: no peer mesh)
    // could reach none of the others, and failed at its first message to one.
    const conf = raft.status().conf;
    const refusal = opts.standalone && [...conf.voters, ...conf.learners].some((id) => id !== opts.id) ? memberStartedAlone(opts.id, conf) : null;
    // Counted once every check has passed: a start refused counts none.
    let starts = 0;
    try {
      if (refusal !== null) throw new ConfigError(refusal);
      starts = await lock.countStart();
    } catch (err) {
      await log.close();
      await store.close();
      throw err;
    }
    opts.log.info({ event: 'replica_open', applied, commit: boot.hardState.commit, term: boot.hardState.term, last: raft.status().lastIndex }, 'replica opened');
    return new Replica(opts, raft, log, store, compacted, readRemoved(opts.dataDir), lock, starts);
  }

  /** Starts the clocks: Raft ticks, and ledger ticks proposed by the primary. */
  start(): void {
    // A group of one elects itself at once (campaign does nothing for a non-voter).
    const conf = this.raft.status().conf;
    if (conf.voters.length === 1 && conf.voters[0] === this.opts.id) this.raft.campaign();
    this.observeMembers(conf);
    if (conf.voters.length > 1 || conf.learners.length > 0) this.saveMembers(this.store.position.applied, conf);
    this.timers.push(setInterval(() => {
      this.raft.tick();
      this.ticks++;
      this.askReadsAgain(this.opts.raft.election_ticks);
      this.kick();
    }, this.opts.raft.tick_ms));
    this.timers.push(setInterval(() => {
      if (!this.isLeader() || this.failed) return;
      // The answer's message is an agent's (it speaks of transaction ids); the tick's line says its code.
      this.propose({ type: 'Tick', v: 1 }).catch((err: Error) => this.opts.log.warn({ event: 'tick_failed', err: err instanceof ApiError ? err.body.error : err.message }, 'ledger tick not committed; the next one carries the clock on'));
    }, this.opts.tickIntervalMs));
    this.kick();
  }

  isLeader(): boolean {
    return this.raft.status().role === 'leader';
  }

  status(): Status {
    return this.raft.status();
  }

  /**
   * Whether the member serves: open and not stopping (from the moment it begins to
   * stop, so that a load balancer drains it while it hands over), not failed, a member,
   * a primary known, and the log applied, but for at most `readyLagEntriesMax` entries:
   * a follower under load is always a few committed entries behind (the next batch on
   * its way to the store), and answering 503 for that turned it away from its load
   * balancer about every second probe.
   */
  ready(): boolean {
    const s = this.raft.status();
    return !this.closed && this.handingOver === null && this.failed === null && this.removed === null && isMember(s.conf, this.opts.id) &&
      s.leader !== null && !this.catchingUp(s);
  }

  /** Whether the member is more than `readyLagEntriesMax` entries behind what it knows committed. */
  catchingUp(s: Status = this.raft.status()): boolean {
    return s.commit - this.store.position.applied > this.opts.readyLagEntriesMax;
  }

  /**
   * This member's role as an operator reads it: Raft's own, but `learner` for a member
   * that receives the log without a vote, and `removed` once its removal is in the
   * configuration in force (Raft's, from the moment the entry is in its log) or applied.
   * Between the two, Raft still calls a removed learner a follower, which it never was.
   */
  role(s: Status = this.raft.status()): MemberRole {
    if (this.removed || wasRemoved(s.conf, this.opts.id)) return 'removed';
    return s.role !== 'leader' && s.conf.learners.includes(this.opts.id) ? 'learner' : s.role;
  }

  /** Why the member does not serve as a member, or null: removed, or not yet added. */
  membership(): string | null {
    if (this.removed) return `this member was removed from the cluster at index ${this.removed.index}; it serves nothing and may be stopped`;
    if (!isMember(this.raft.status().conf, this.opts.id)) return 'this member is not in the cluster yet: it waits for an operator to add it (POST /admin/v1/cluster/members at any member)';
    return null;
  }

  /** Hands a message from a peer to Raft. */
  step(m: Message): void {
    let r: ReturnType<RawNode['step']>;
    try {
      r = this.raft.step(m);
    } catch (err) {
      if (err instanceof LostLogError) return this.loseLog(err);
      throw err;
    }
    if (!r.ok) this.opts.log.warn({ event: 'raft_message_refused', from: m.from, type: m.type, why: r.message }, 'raft message refused');
    this.kick();
  }

  transferLeadership(to: NodeId): void {
    const r = this.raft.transferLeadership(to);
    if (!r.ok) throw r.code === 'not_leader' ? new NotLeaderError(r.leader) : new ApiError('invalid_transition', r.message);
    this.kick();
  }

  /**
   * Proposes an operation and resolves with its result once it is committed, applied
   * and written here. Rejects (never throws) with UnreadableOperation (not proposed),
   * NotLeaderError, or an ApiError: gateway_error when the operation is certainly not
   * in the log, commit_unavailable when it may be.
   */
  propose(op: Operation): Promise<Applied> {
    const refusal = this.refusal();
    if (refusal) return Promise.reject(refusal);
    if (this.waiters.size >= this.opts.proposalsInFlightMax) {
      return Promise.reject(new ApiError('gateway_error', 'Too many proposals are waiting for their commit; nothing was recorded. Resubmit.'));
    }
    const bytes = encodeOperation(op);
    const text = operationText(bytes);
    const back = decodeOperationText(text);
    if (!back.ok) return Promise.reject(new UnreadableOperation(back.issues));
    if (this.isLeader()) return this.proposeHere(bytes, back.value, text);
    // A primary that has just handed leadership over knows no primary until the new one
    // is heard from: the proposal waits for it, as one made during the transfer does.
    if (this.raft.status().leader === null && this.steppedDownAt !== null && Date.now() - this.steppedDownAt < this.electionTimeoutMs
      && this.awaitingTransfer < this.opts.proposalsInFlightMax) {
      return this.afterTransfer(bytes, back.value, text);
    }
    return this.proposeThroughPrimary(bytes, back.value, text);
  }

  /**
   * Appends a forwarded operation's bytes to the log here, the primary, and answers
   * where; the follower that forwarded it waits for the entry itself. The bytes are
   * read back exactly as a local proposal's are.
   */
  appendForwarded(bytes: Uint8Array): { index: number; term: number } {
    const refusal = this.refusal();
    if (refusal) throw refusal;
    const text = operationText(bytes);
    const back = decodeOperationText(text);
    if (!back.ok) throw new UnreadableOperation(back.issues);
    const r = this.raft.propose([bytes]);
    if (!r.ok) {
      if (r.code === 'not_leader') throw new NotLeaderError(r.leader);
      throw new ApiError('gateway_error', `The operation could not be proposed (${r.code}); nothing was recorded. Resubmit.`);
    }
    if (this.forwarded.size < this.opts.proposalsInFlightMax) {
      this.forwarded.set(r.firstIndex, { term: r.term, op: back.value, text });
    }
    this.kick();
    return { index: r.firstIndex, term: r.term };
  }

  /** Proposes here, the primary. A proposal made during a leadership transfer waits for its end once (`afterTransfer`). */
  private proposeHere(bytes: Uint8Array, op: Operation, text: string, waitTransfer = true): Promise<Applied> {
    const r = this.raft.propose([bytes]);
    if (!r.ok) {
      if (r.code === 'not_leader') return Promise.reject(new NotLeaderError(r.leader));
      if (r.code === 'transfer_in_progress' && waitTransfer && this.awaitingTransfer < this.opts.proposalsInFlightMax) return this.afterTransfer(bytes, op, text);
      return Promise.reject(new ApiError('gateway_error', `The operation could not be proposed (${r.code}); nothing was recorded. Resubmit.`));
    }
    const promise = this.wait(r.firstIndex, r.term, op, text);
    this.kick();
    return promise;
  }

  /**
   * A proposal that arrives while this primary hands leadership over (transfer-leadership,
   * the removal of the primary, a stop) would be refused: Raft appends nothing during a
   * transfer. It waits for the transfer to end instead, at most about an election
   * timeout (Raft abandons a transfer then), and goes to the new primary as a
   * follower's proposal does; if the transfer failed and this member still leads, it is
   * proposed here. Nothing was appended before, so either way it is recorded at most once.
   */
  private async afterTransfer(bytes: Uint8Array, op: Operation, text: string): Promise<Applied> {
    this.awaitingTransfer++;
    try {
      await this.transferEnded();
    } finally {
      this.awaitingTransfer--;
    }
    const refusal = this.refusal();
    if (refusal) throw refusal;
    if (this.isLeader()) return this.proposeHere(bytes, op, text, false);
    return this.proposeThroughPrimary(bytes, op, text);
  }

  /**
   * Resolves once this member's leadership transfer has ended: it leads with no
   * transfer under way (the transfer was abandoned), or it follows a known primary (the
   * transfer completed, and the new primary was heard from). Raft ends a transfer within
   * an election timeout; the wait is bounded by two, in case ticks run late.
   */
  private async transferEnded(): Promise<void> {
    const deadline = Date.now() + 2 * this.electionTimeoutMs;
    const ongoing = () => {
      const s = this.raft.status();
      return s.role === 'leader' ? s.leadTransferee !== null : s.leader === null;
    };
    while (ongoing() && Date.now() < deadline && !this.closed && this.failed === null) {
      await new Promise((r) => setTimeout(r, this.opts.raft.tick_ms));
    }
  }

  private get electionTimeoutMs(): number {
    return this.opts.raft.tick_ms * this.opts.raft.election_ticks;
  }

  /**
   * A follower's proposal: the primary appends it and says at which index and term;
   * this member then waits until it applies that entry itself and answers from its own
   * state, which is the primary's to the byte (the state machine is deterministic).
   */
  private async proposeThroughPrimary(bytes: Uint8Array, op: Operation, text: string): Promise<Applied> {
    const leader = this.raft.status().leader;
    if (leader === null || !this.opts.forward) throw new NotLeaderError(leader);
    // Counted until the answer is read against `recent` below: an entry applied before then is remembered with its result.
    this.forwarding++;
    let at: { index: number; term: number };
    try {
      at = await this.opts.forward(leader, bytes, this.opts.commitTimeoutMs);
    } finally {
      this.forwarding--;
    }
    const known = this.recent.get(at.index);
    if (known) {
      if (known.term === at.term && known.applied) return known.applied;
      throw new ApiError('gateway_error', 'The proposal was replaced by a new primary before it committed; nothing was recorded. Resubmit.');
    }
    if (this.store.position.applied >= at.index || at.term < this.term) throw new ApiError('commit_unavailable', UNCONFIRMED);
    return this.wait(at.index, at.term, op, text);
  }

  /**
   * Waits for the entry at (index, term). A waiter is removed by its own timer or by
   * its entry; an older waiter at the same index (a proposal of an earlier term whose
   * slot a new primary reused) is answered first, never overwritten.
   */
  private wait(index: number, term: number, op: Operation, text: string): Promise<Applied> {
    const older = this.waiters.get(index);
    if (older) {
      this.waiters.delete(index);
      clearTimeout(older.timer);
      older.reject(new ApiError('commit_unavailable', UNCONFIRMED));
    }
    const promise = new Promise<Applied>((resolve, reject) => {
      const w: Waiter = {
        term, op, text, resolve, reject,
        timer: setTimeout(() => {
          if (this.waiters.get(index) === w) this.waiters.delete(index);
          this.opts.metrics.proposalsInFlight.set(this.waiters.size);
          reject(new ApiError('commit_unavailable', 'The commit could not be confirmed in time; it may or may not have been recorded. Retry with the same transaction id, or read the transaction.'));
        }, this.opts.commitTimeoutMs),
      };
      this.waiters.set(index, w);
    });
    this.opts.metrics.proposalsInFlight.set(this.waiters.size);
    return promise;
  }

  /**
   * Receives a streamed store for a snapshot message from the primary, then hands the
   * message to Raft. The store is swapped in when Raft's Ready carries the snapshot,
   * before Raft persists it, so the log never claims a prefix the store does not hold.
   */
  async installSnapshot(m: Message, position: { applied: number; term: number; stateHash: string }, chunks: AsyncIterable<SnapshotChunk>): Promise<void> {
    const meta = m.snapshot?.meta;
    if (!meta) throw new Error('a snapshot message without metadata');
    if (position.applied < meta.index) throw new Error(`the streamed store is at ${position.applied}, below the snapshot's index ${meta.index}`);
    if (position.applied <= this.store.position.applied) throw new Error(`this member already applied ${this.store.position.applied}, beyond the streamed store's ${position.applied}`);
    // A store Raft took waits for the pump to swap it in: a second one received meanwhile
    // (from a primary that replaced the sender) would leave Raft handing out a snapshot
    // whose store is gone. The sender tries again once this one is in.
    const notInstalled = () => {
      if (this.received !== null) throw new Error(`the store received for the snapshot at ${this.received.index} is not installed yet: this transfer is refused, and the sender tries again later`);
    };
    notInstalled();
    // One store is received at a time. A transfer from a primary of a later term takes
    // the place of one from an earlier term: Raft would not take the earlier snapshot once
    // it hears the later term, and its sender, stalled without its connection closing (a
    // paused process, a hung host), would hold this member for snapshot_timeout_ms while
    // the new primary, which may need this member for a quorum, is refused.
    const current = this.receiving;
    if (current !== null && m.term > current.term) {
      current.abandon(`a transfer from ${m.from} in term ${m.term} takes the place of this one, from term ${current.term}`);
      await current.ended;
      notInstalled(); // the earlier one may have ended whole, and been taken
    }
    if (this.receiving !== null) throw new Error('a store is being received already: this transfer is refused, and the sender tries again later');
    const abort = new AbortController();
    let ended: () => void = () => undefined;
    this.receiving = { term: m.term, abandon: (why) => abort.abort(new Error(why)), ended: new Promise<void>((r) => (ended = r)) };
    let name: string;
    try {
      // The configuration is recorded with the index the received store is at: a store
      // found ahead of the log at a start is one installed just before a stop only if it is
      // still at that index (reconcile).
      name = await this.store.receiveSnapshot({ stateHash: position.stateHash, applied: position.applied }, abandonable(chunks, abort.signal), { [CONF_RECORD]: JSON.stringify({ ...meta.conf, received_at: position.applied }) });
    } finally {
      this.receiving = null;
      ended();
    }
    this.step(m);
    // Raft takes the snapshot only from its current leader, and only past its commit.
    if (this.raft.pendingSnapshotIndex() === meta.index) {
      this.received = { name, index: meta.index };
    } else {
      this.opts.log.info({ event: 'snapshot_not_taken', index: meta.index, from: m.from }, 'a received store was dropped: Raft did not take its snapshot (a stale sender, or this member is past it)');
      await this.store.discardReceived(name);
    }
  }

  /** Opens this member's store to stream it to a peer. */
  openSnapshot(): ReturnType<LedgerStore['openSnapshot']> {
    return this.store.openSnapshot();
  }

  reportSnapshot(to: NodeId, status: 'finish' | 'failure'): void {
    this.raft.reportSnapshot(to, status === 'finish');
    this.kick();
  }

  reportUnreachable(to: NodeId): void {
    this.raft.reportUnreachable(to);
    this.kick();
  }

  /** The most up-to-date other voter, to hand leadership to; null if none is known. */
  bestTransferee(): NodeId | null {
    const progress = this.raft.status().progress ?? {};
    let best: [NodeId, number] | null = null;
    for (const [id, p] of Object.entries(progress)) {
      if (id !== this.opts.id && p.voter && p.recentActive && (best === null || p.match > best[1])) best = [id, p.match];
    }
    return best?.[0] ?? null;
  }

  /**
   * Changes the membership (add a learner, promote it, remove a member) through the
   * primary, wherever it is, and resolves once this member has applied the change. A
   * primary asked to remove itself hands leadership over first, and the change goes to
   * the next primary.
   */
  async changeMembership(change: ConfChange): Promise<{ index: number }> {
    const refusal = this.refusal();
    if (refusal) throw refusal;
    for (let attempt = 0; ; attempt++) {
      const leader = this.raft.status().leader;
      try {
        if (leader === null) throw new NotLeaderError(null);
        const at = leader === this.opts.id ? await this.appendConfChange(change) : await this.forwardConfChange(leader, change);
        await this.waitConf(at.index, at.term);
        return { index: at.index };
      } catch (err) {
        if (!(err instanceof NotLeaderError) || attempt >= 2) throw err;
        await new Promise((r) => setTimeout(r, this.opts.raft.tick_ms * this.opts.raft.election_ticks));
      }
    }
  }

  private forwardConfChange(leader: NodeId, change: ConfChange): Promise<{ index: number; term: number }> {
    if (!this.opts.forwardConfChange) throw new NotLeaderError(leader);
    return this.opts.forwardConfChange(leader, change, this.opts.commitTimeoutMs);
  }

  /**
   * Appends a membership change here, the primary, and says where. A learner is
   * promoted only once it has caught up (it would otherwise count toward the quorum
   * while unable to acknowledge anything new); the primary is removed only after it
   * handed leadership to another voter.
   */
  async appendConfChange(change: ConfChange): Promise<{ index: number; term: number }> {
    const refusal = this.refusal();
    if (refusal) throw refusal;
    const s = this.raft.status();
    if (s.role !== 'leader') throw new NotLeaderError(s.leader);
    if (change.type === 'remove' && change.node === this.opts.id) return this.handOverBeforeRemoval();
    if (change.type === 'promote') {
      const p = s.progress?.[change.node];
      const lag = p ? s.commit - p.match : null;
      if (p && !p.voter && (p.state !== 'replicate' || (lag ?? 0) > PROMOTE_LAG_ENTRIES_MAX)) {
        throw new ApiError('invalid_transition', `Learner ${change.node} has not caught up (${lag} entries behind, ${p.state}); promote it once GET /admin/v1/cluster shows its lag near 0.`, { id: change.node, lag });
      }
    }
    const r = this.raft.proposeConfChange(change);
    if (!r.ok) {
      if (r.code === 'not_leader') throw new NotLeaderError(r.leader);
      if (r.code === 'conf_change_refused') throw new ApiError('invalid_transition', `The membership change was refused: ${r.message}.`, { id: change.node });
      throw new ApiError('commit_unavailable', `The membership change could not be proposed now (${r.code}); nothing was changed. Retry.`);
    }
    this.opts.log.info({ event: 'membership_proposed', change, index: r.firstIndex, term: r.term }, 'membership change proposed');
    this.kick();
    return { index: r.firstIndex, term: r.term };
  }

  private async handOverBeforeRemoval(): Promise<never> {
    const to = this.bestTransferee();
    if (to === null) throw new ApiError('invalid_transition', `${this.opts.id} is the primary and no other voter is caught up to take over; nothing was changed.`, { id: this.opts.id });
    this.transferLeadership(to);
    await this.transferEnded();
    const { leader, done } = this.handedOver();
    this.opts.log.info({ event: 'leadership_handed_over', to, done, leader, reason: 'removal' },
      done ? `leadership handed over to ${leader}, which is asked to remove ${this.opts.id}`
        : `leadership transfer to ${to} did not end with another primary (${leader === null ? 'none is known' : 'this member still leads'}): ${this.opts.id} is not removed`);
    throw new NotLeaderError(this.isLeader() ? null : leader ?? to);
  }

  /** Waits until this member applied the membership change at (index, term). */
  private waitConf(index: number, term: number): Promise<void> {
    const known = this.recent.get(index);
    if (known) {
      if (known.term === term) return Promise.resolve();
      return Promise.reject(new ApiError('gateway_error', 'The membership change was replaced by a new primary before it committed; nothing was changed. Retry.'));
    }
    if (this.store.position.applied >= index) return Promise.reject(new ApiError('commit_unavailable', UNCONFIRMED_CHANGE));
    return new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.confWaiters.delete(index);
        reject(new ApiError('commit_unavailable', UNCONFIRMED_CHANGE));
      }, this.opts.commitTimeoutMs);
      this.confWaiters.set(index, { term, resolve, reject, timer });
    });
  }

  /**
   * Throws the answer to any read, linearizable or local, on a member that was removed:
   * its state is no longer kept current, so it serves nothing. A plane calls it before
   * serving a read; readBarrier calls it too.
   */
  refuseRead(): void {
    if (this.removed) throw new ApiError('gateway_error', REMOVED_READ);
  }

  /** Resolves once this member has applied everything committed before the call (ReadIndex). */
  readBarrier(): Promise<void> {
    if (this.removed) return Promise.reject(new ApiError('gateway_error', REMOVED_READ));
    if (this.closed) return Promise.reject(new ApiError('commit_unavailable', 'The node is shutting down; read from another replica.'));
    if (this.failed) return Promise.reject(new ApiError('commit_unavailable', 'The node cannot serve linearizable reads: its state store failed. Read from another replica.'));
    const ctx = `${this.readPrefix}${++this.readSeq}`;
    const r = this.raft.readIndex(Buffer.from(ctx));
    if (!r.ok) {
      if (r.code === 'not_leader') return Promise.reject(new NotLeaderError(r.leader));
      return Promise.reject(new ApiError('commit_unavailable', `A linearizable read is not possible now (${r.code}); retry, or read with consistency=local.`));
    }
    const p = new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.reads.delete(ctx);
        reject(new ApiError('commit_unavailable', 'A linearizable read could not be confirmed in time; retry, or read with consistency=local.'));
      }, this.opts.commitTimeoutMs);
      this.reads.set(ctx, { index: null, asked: this.ticks, resolve, reject, timer });
    });
    this.kick();
    return p;
  }

  /**
   * Begins to stop: from now on this member takes no leadership (Raft ignores a
   * transfer to it and never campaigns), so that a primary stopping at the same time
   * does not hand over to it. If it leads, it hands leadership to its most up-to-date
   * voter that answered recently and resolves once the transfer has ended, within about
   * an election timeout: the new primary leads, or the transfer was abandoned (every
   * other voter is stopping too, or unreachable) and the others elect a leader once
   * this one is gone. Logs `leadership_handed_over` with the outcome. Idempotent; close
   * calls it, and a node calls it first, while its planes still serve.
   */
  handOver(): Promise<void> {
    this.handingOver ??= this.handOverNow();
    return this.handingOver;
  }

  private async handOverNow(): Promise<void> {
    this.raft.stopCampaigning();
    if (!this.isLeader() || this.closed || this.failed) return;
    const to = this.bestTransferee();
    if (to === null) {
      const alone = this.raft.status().conf.voters.every((id) => id === this.opts.id);
      this.opts.log.info({ event: 'leadership_handed_over', to: null, done: false }, alone ? 'no other voter in the group: stopping' : 'no other voter answered recently: stopping without a hand-over');
      return;
    }
    const r = this.raft.transferLeadership(to);
    if (!r.ok) {
      this.opts.log.warn({ event: 'leadership_handed_over', to, done: false, why: r.message }, 'leadership transfer refused: stopping without a hand-over');
      return;
    }
    this.kick();
    await this.transferEnded();
    const { leader, done } = this.handedOver();
    this.opts.log.info(
      { event: 'leadership_handed_over', to, done, leader },
      done ? 'leadership handed over before stopping'
        : leader === null ? `leadership transfer to ${to} ended with no primary known after an election timeout (${to} stopping too, or unreachable); stopping without a hand-over`
          : `leadership transfer to ${to} abandoned after an election timeout (it did not take over: stopping too, or unreachable); stopping without it`,
    );
  }

  /**
   * After a transfer ended: the primary known, and whether leadership was handed over,
   * which needs another member to lead (a member that lost its leadership to an election
   * nobody won, the transferee stopping too, knows no primary).
   */
  private handedOver(): { leader: NodeId | null; done: boolean } {
    const leader = this.raft.status().leader;
    return { leader, done: leader !== null && leader !== this.opts.id };
  }

  async close(): Promise<void> {
    if (this.closed) return;
    await this.handOver();
    if (this.closed) return;
    this.closed = true;
    this.stopClocks();
    while (this.pumping) await new Promise((r) => setTimeout(r, 5));
    await this.store.landed();
    this.failAll('The node shut down before the commit was confirmed; it may or may not have been recorded. Retry with the same transaction id, or read the transaction.');
    await this.log.close();
    await this.store.close();
    await this.lock.release();
  }

  /** Why a new proposal is refused now, or null. */
  private refusal(): ApiError | null {
    if (this.closed) return new ApiError('gateway_error', SHUTTING_DOWN);
    if (this.failed) return new ApiError('gateway_error', CANNOT_WRITE);
    if (this.removed) return new ApiError('gateway_error', REMOVED_WRITE);
    return null;
  }

  private kick(): void {
    if (this.pumping || this.closed || this.failed) return;
    this.pumping = true;
    setImmediate(() => {
      this.pump()
        .catch((err: Error) => this.fail(err))
        .finally(() => {
          this.pumping = false;
          if (this.raft.hasReady() && !this.closed && !this.failed) this.kick();
        });
    });
  }

  private async pump(): Promise<void> {
    while (this.raft.hasReady() && !this.failed) {
      const started = performance.now();
      const rd = this.raft.ready();
      if (rd.snapshot) await this.swapInStore(rd.snapshot.meta.index);
      // Committed entries that earlier Readies persisted are durable already: their
      // reads and their apply overlap this Ready's write. One this Ready writes waits for it.
      // A leader's appends leave while its own write is on the disk, so that the followers
      // write in parallel with it (splitMessages); every other message waits for the write.
      const { early, late } = splitMessages(rd);
      const persisting = this.persist(rd);
      this.opts.transport.send(early);
      const firstNew = rd.entries[0]?.index ?? Infinity;
      const applying = this.applyEntries(rd.committedEntries, rd.committedEntries.some((e) => e.index >= firstNew) ? persisting : undefined);
      applying.catch(() => undefined); // a failure is thrown by the await below, after the write's own
      await persisting;
      this.opts.transport.send(late);
      await applying;
      for (const rs of rd.readStates) this.onReadState(rs.index, Buffer.from(rs.context).toString());
      this.raft.advance(rd);
      this.serveReads();
      this.observe();
      await this.maybeCompact();
      this.opts.metrics.readyDuration.observe((performance.now() - started) / 1000);
    }
  }

  /**
   * Swaps in the store received for the snapshot Raft accepted. Requests waiting for
   * entries the store now covers cannot be answered from their own apply any more:
   * they are answered 503, and a retry with the same transaction id reads the outcome.
   */
  private async swapInStore(index: number): Promise<void> {
    const received = this.received;
    if (received === null || received.index !== index) throw new Error(`Raft accepted a snapshot at ${index} but no store was received for it`);
    this.received = null;
    const { retired } = await this.store.install(received.name);
    retired.then(
      () => this.opts.log.info({ event: 'store_retired', index }, 'the store replaced is closed and removed'),
      (err: Error) => this.opts.log.warn({ event: 'store_retire_failed', index, err: err.message }, 'the store replaced was not removed; the next start removes it'),
    );
    const applied = this.store.position.applied;
    for (const [at, w] of this.waiters) {
      if (at > applied) continue;
      this.waiters.delete(at);
      clearTimeout(w.timer);
      w.reject(new ApiError('commit_unavailable', UNCONFIRMED));
    }
    this.recent.clear();
    for (const at of this.forwarded.keys()) if (at <= applied) this.forwarded.delete(at);
    this.landedIndex = applied;
    this.snapshotIndex = Math.max(this.snapshotIndex, index);
    this.compaction = null; // its sync was of the store replaced
    this.opts.log.info({ event: 'snapshot_installed', index, applied }, 'state store installed from the primary');
  }

  private async persist(rd: Ready): Promise<void> {
    if (!rd.snapshot && rd.entries.length === 0 && !rd.hardState) return;
    const start = process.hrtime.bigint();
    await this.log.save(rd);
    if (rd.mustSync) {
      this.opts.metrics.fsyncs.inc();
      this.opts.metrics.fsyncDuration.observe(Number(process.hrtime.bigint() - start) / 1e9);
    }
  }

  /**
   * Applies committed entries over one view of the store (once `durable` settles),
   * hands the view to the store and answers the waiting requests: an answer never waits
   * for the store's batch to land. Each entry is durable in the Raft log, which a
   * restart re-applies from the store's index, and the store serves its records from
   * the writes in flight until the batch lands; range reads, the journal and the change
   * feed wait for it. Membership changes are settled once their batch has landed.
   */
  private async applyEntries(entries: Entry[], durable?: Promise<void>): Promise<void> {
    const fresh = entries.filter((e) => e.index > this.store.position.applied);
    const batch = fresh.map((e) => ({ index: e.index, term: e.term, op: this.decode(e) }));
    const { results, landed, seconds } = await startBatch(this.store, batch, durable);
    const handed = performance.now();
    if (batch.length > 0) {
      this.opts.metrics.applyStage.observe({ stage: 'prefetch' }, seconds.prefetch);
      this.opts.metrics.applyStage.observe({ stage: 'apply' }, seconds.apply);
    }
    results.forEach((a, k) => {
      if (a === null) return;
      this.opts.metrics.entriesApplied.inc();
      if (batch[k]!.op!.op.type === 'SubmitIntent') this.opts.metrics.intents.inc({ outcome: outcomeLabel(a) });
    });
    if (fresh.length > 0) this.opts.metrics.tick.set(this.store.position.tick);
    fresh.forEach((e, k) => {
      this.remember(e, results[k] ?? null);
      if (e.type !== 'conf') this.settle(e, results[k] ?? null);
    });
    landed.then(() => {
      if (batch.length > 0) this.opts.metrics.applyStage.observe({ stage: 'store_write' }, (performance.now() - handed) / 1000);
      for (const e of fresh) if (e.type === 'conf') this.settleConf(e);
      if (fresh.length > 0) {
        this.landedIndex = fresh[fresh.length - 1]!.index;
        for (const l of this.appliedListeners) l();
      }
    }, (err: Error) => this.fail(err));
  }

  /**
   * Writes MEMBERS (membership.ts) for the tools that start members; a file it cannot
   * write (a full disk) is logged, never a stop: the membership itself is in the log.
   */
  private saveMembers(index: number, conf: ConfState): void {
    try {
      writeMembers(this.opts.dataDir, index, conf);
    } catch (err) {
      this.opts.log.warn({ event: 'members_file_failed', err: (err as Error).message }, 'the MEMBERS file of the data directory was not written');
    }
  }

  /** Calls `listener` after each batch of entries is applied and has landed in the store; returns the unsubscribe. */
  onApplied(listener: () => void): () => void {
    this.appliedListeners.add(listener);
    return () => this.appliedListeners.delete(listener);
  }

  private remember(e: Entry, applied: Applied | null): void {
    this.recent.set(e.index, { term: e.term, applied: this.forwarding > 0 ? applied : null });
    if (this.recent.size > RECENT_RESULTS_MAX) this.recent.delete(this.recent.keys().next().value!);
  }

  /**
   * The operation of an entry: this member's own proposal, or one forwarded to it, as
   * it read it back, or the entry decoded. Null for a no-op or an unreadable entry:
   * every replica reads the same bytes the same way, so skipping is deterministic
   * (stopping would stop every replica at every restart). Proposers never write such
   * an entry (see propose), so an unreadable one is a bug worth shouting about.
   */
  private decode(e: Entry): { op: Operation; text: string } | null {
    const f = this.forwarded.get(e.index);
    if (f !== undefined) this.forwarded.delete(e.index);
    if (e.data.length === 0 || e.type === 'conf') return null;
    const w = this.waiters.get(e.index);
    if (w?.term === e.term) return { op: w.op, text: w.text };
    if (f?.term === e.term) return { op: f.op, text: f.text };
    const text = operationText(e.data);
    const d = decodeOperationText(text);
    if (!d.ok) {
      this.opts.log.error({ event: 'entry_unreadable', index: e.index, issues: d.issues }, 'log entry is not an operation; it has no effect');
      return null;
    }
    return { op: d.value, text };
  }

  /**
   * A membership change this member applied: it answers the request waiting for it,
   * and when it removes this member, the member stops serving for good (the marker
   * survives restarts) and says so in its log and /readyz.
   */
  private settleConf(e: Entry): void {
    const { change, conf } = decodeConfEntry(e.data);
    this.opts.log.info({ event: 'membership_applied', index: e.index, change, voters: conf.voters, learners: conf.learners }, 'membership change applied');
    this.saveMembers(e.index, conf);
    const w = this.confWaiters.get(e.index);
    if (w) {
      this.confWaiters.delete(e.index);
      clearTimeout(w.timer);
      if (w.term === e.term) w.resolve();
      else w.reject(new ApiError('gateway_error', 'The membership change was replaced by a new primary before it committed; nothing was changed. Retry.'));
    }
    if (!isMember(conf, this.opts.id) && change.node === this.opts.id && this.removed === null) {
      this.removed = { index: e.index, term: e.term };
      writeRemoved(this.opts.dataDir, this.removed);
      this.opts.log.warn({ event: 'member_removed', index: e.index }, 'this member was removed from the cluster: it serves nothing any more and may be stopped');
    }
  }

  /** Answers the proposal waiting at this entry's index, if it is this proposal. */
  private settle(e: Entry, applied: Applied | null): void {
    const w = this.waiters.get(e.index);
    if (!w) return;
    this.waiters.delete(e.index);
    clearTimeout(w.timer);
    if (w.term === e.term && applied) w.resolve(applied);
    else w.reject(new ApiError('gateway_error', 'The proposal was replaced by a new primary before it committed; nothing was recorded. Resubmit.'));
  }

  private onReadState(index: number, ctx: string): void {
    const r = this.reads.get(ctx);
    if (r) r.index = index;
  }

  private serveReads(): void {
    for (const [ctx, r] of this.reads) {
      if (r.index === null || this.store.position.applied < r.index) continue;
      this.reads.delete(ctx);
      clearTimeout(r.timer);
      r.resolve();
    }
  }

  /** Tells onMembers when the configuration in force changed (the mesh follows it). */
  private observeMembers(conf: ConfState): void {
    if (conf === this.conf) return;
    this.conf = conf;
    this.opts.onMembers?.(conf);
  }

  private observe(): void {
    const s = this.raft.status();
    this.observeMembers(s.conf);
    if (s.term > this.term) this.onNewTerm(s.term);
    const role = this.role(s);
    if (s.leader !== this.leaderSeen || role !== this.roleSeen) {
      if (this.roleSeen === 'leader' && role !== 'leader') this.steppedDownAt = Date.now();
      this.leaderSeen = s.leader;
      this.roleSeen = role;
      if (s.leader !== null) this.askReadsAgain();
      this.opts.log.info({ event: 'role_changed', role, term: s.term, leader: s.leader },
        `${this.opts.id} is ${role === 'leader' ? 'the primary' : role === 'removed' ? 'removed from the cluster' : `a ${role}`} in term ${s.term}; ${s.leader === null ? 'no primary is known' : `the primary is ${s.leader}`}`);
    }
    const m = this.opts.metrics;
    m.appliedIndex.set(this.store.position.applied);
    m.commitIndex.set(s.commit);
    m.term.set(s.term);
    m.isLeader.set(s.role === 'leader' ? 1 : 0);
    m.proposalsInFlight.set(this.waiters.size);
    m.storeCacheEntries.set(this.store.cacheSize);
  }

  /**
   * Asks the primary known now, again, for the index of every read still waiting for
   * one whose last request is at least `olderThanTicks` Raft ticks old. The request
   * travels once and Raft does not resend it, nor says when it drops it:
   * - when a primary is known again, or another one, every waiting read asks at once
   *   (0): it may have asked one that is gone;
   * - on every tick, a read that asked an election timeout ago asks again: its request
   *   may have been lost on a link being made again (a peer just restarted).
   * Otherwise the read would wait out the commit timeout and fail, though the primary
   * answers in a round trip. A read answered twice takes the later index, which is as
   * linearizable.
   */
  private askReadsAgain(olderThanTicks = 0): void {
    for (const [ctx, r] of this.reads) {
      if (r.index !== null || this.ticks - r.asked < olderThanTicks) continue;
      r.asked = this.ticks;
      this.raft.readIndex(Buffer.from(ctx));
    }
  }

  /**
   * A new term: a proposal of an earlier term may still commit (a new primary commits
   * what it holds) or not, and this member can no longer tell; its waiter is answered
   * 503, and a retry with the same transaction id is answered from the log.
   */
  private onNewTerm(term: number): void {
    this.term = term;
    for (const [at, w] of this.waiters) {
      if (w.term >= term) continue;
      this.waiters.delete(at);
      clearTimeout(w.timer);
      w.reject(new ApiError('commit_unavailable', UNCONFIRMED));
    }
  }

  /**
   * Compacts the Raft log once enough has been applied since the last compaction, and
   * only below what the store has made durable: a restart re-applies from the store's
   * index, so every entry after it must still be in the log. The store's sync (an
   * fsync of LevelDB's log, which may wait on the disk for hundreds of milliseconds)
   * runs beside the driver's loop, and a later pass compacts once it is done; the
   * compaction's own write is small: the log writes a snapshot record and deletes the
   * segments it covers (WalLogStore).
   */
  private async maybeCompact(): Promise<void> {
    const pending = this.compaction;
    if (pending !== null) {
      if (!pending.synced) return;
      this.compaction = null;
      const { index, pos } = pending;
      // A member may have begun installing a store while the sync ran: the hold is
      // decided again now, and a later pass starts over once it has ended.
      if (this.compactionHeld(this.raft.status(), index)) return;
      const meta = { compacted: index, store: { applied: pos.applied, term: pos.term, head: pos.head, state_hash: pos.stateHash } };
      const snap = this.raft.compact(index, Buffer.from(JSON.stringify(meta)));
      if (!snap) return;
      await this.log.saveSnapshot(snap);
      this.snapshotIndex = index;
      this.opts.log.info({ event: 'log_compacted', index, applied: pos.applied }, 'raft log compacted');
      return;
    }
    const pos = this.store.position;
    // The log keeps a tail of catch-up entries before the applied index. A store
    // received from the primary may be ahead of the snapshot Raft accepted with it, and
    // Raft compacts only what it has applied itself.
    const status = this.raft.status();
    const index = Math.min(pos.applied - this.opts.snapshotCatchupEntries, status.applied);
    if (index - this.snapshotIndex < this.opts.snapshotIntervalEntries || index <= 0) return;
    if (this.compactionHeld(status, index)) return;
    // The sync queues behind every batch handed to the store, so once it is done the
    // store is durable up to pos.applied, and index is at most that.
    const next: PendingCompaction = { index, pos, synced: false };
    this.compaction = next;
    this.store.sync().then(() => (next.synced = true), (err: Error) => this.fail(err));
  }

  /** Whether compaction up to `index` waits for a member (holdsCompaction, with this member's settings). */
  private compactionHeld(status: Status, index: number): boolean {
    return holdsCompaction(status.progress, index, this.snapshotIndex, this.opts.snapshotIntervalEntries, this.opts.snapshotHoldEntries);
  }

  private fail(err: Error): void {
    if (this.failed) return;
    this.halt(err, { event: 'replica_failed', err: err.message }, 'the replica stopped: its log or its state store cannot be written; it answers no writes until restarted',
      'The node failed before the commit was confirmed; it may or may not have been recorded. Retry with the same transaction id on another replica, or read the transaction.');
  }

  /**
   * Stops this replica where it is: its clocks stop, the reason is logged once, and every
   * waiting request is answered 503 (`failAll`). A replica that must not come back as
   * this member (`loseLog`, `supersede`) also tells `onFatal`, which ends the process.
   */
  private halt(err: Error, fields: Record<string, unknown>, message: string, why: string): void {
    this.failed = err;
    this.stopClocks();
    this.opts.log.fatal(fields, message);
    this.failAll(why);
  }

  /**
   * The primary counts on entries this member acknowledged and no longer holds (an older
   * copy of its data directory put back, or a disk that dropped synced writes). Going on
   * as this member could lose what its acknowledgements helped commit, and restarting
   * cannot bring the entries back: it stops, says what to do, and is told to `onFatal`.
   */
  private loseLog(err: LostLogError): void {
    if (this.failed) return;
    const id = this.opts.id;
    const message = `member ${id} stops: the primary ${err.leader} counts on index ${err.acknowledged}, which this member acknowledged, `
      + `but its log in ${this.opts.dataDir} ends at ${err.lastIndex}. Its data directory lost writes it had acknowledged (an older copy put back, `
      + `or a disk that dropped synced writes), so it must not rejoin as ${id}: remove it (DELETE /admin/v1/cluster/members/${id} at the primary), `
      + 'then add a member with a new id and an empty data directory (docs/operations.md, "Backups").';
    this.halt(err, { event: 'log_lost', acknowledged: err.acknowledged, last_index: err.lastIndex, leader: err.leader }, message, STOPPED);
    this.opts.onFatal?.(message);
  }

  /**
   * A peer has heard from a later start of this member: another process runs as it (a
   * copy of this data directory started elsewhere, where this directory's lock does not
   * reach), or this directory is an older copy put back. Two processes as one member
   * could each vote in one term, and an older copy lacks what it acknowledged: this
   * process is the one that gives way. It stops, says what to do, and is told to
   * `onFatal`. Nothing is done once the replica is closing.
   */
  supersede(peer: NodeId, details: string): void {
    if (this.failed || this.closed) return;
    const id = this.opts.id;
    const message = `member ${id} stops: ${peer} has heard from a later start of ${id} than this one (start ${this.starts} of ${this.opts.dataDir}): ${details}. `
      + `Two processes must never run as one member. If another process runs as ${id} (this data directory copied and started elsewhere), that one goes on and this one stops; `
      + `if this data directory was put back from an older copy, it must not rejoin as ${id}: remove it (DELETE /admin/v1/cluster/members/${id} at the primary), `
      + 'then add a member with a new id and an empty data directory (docs/operations.md, "Backups"). '
      + `(The starts are counted in ${join(this.opts.dataDir, 'lock')}: a directory whose lock/ was removed counts from 1 again.)`;
    this.halt(new Error(message), { event: 'member_superseded', peer, starts: this.starts, details }, message, STOPPED);
    this.opts.onFatal?.(message);
  }

  private stopClocks(): void {
    for (const t of this.timers) clearInterval(t);
    this.timers = [];
  }

  /**
   * Answers every waiting request 503 `commit_unavailable`: a waiting proposal's entry
   * may be in the log, and a waiting read cannot be confirmed here any more.
   */
  private failAll(why: string): void {
    for (const w of this.waiters.values()) {
      clearTimeout(w.timer);
      w.reject(new ApiError('commit_unavailable', why));
    }
    this.waiters.clear();
    for (const w of this.confWaiters.values()) {
      clearTimeout(w.timer);
      w.reject(new ApiError('commit_unavailable', UNCONFIRMED_CHANGE));
    }
    this.confWaiters.clear();
    for (const r of this.reads.values()) {
      clearTimeout(r.timer);
      r.reject(new ApiError('commit_unavailable', 'The read could not be confirmed here; read from another replica.'));
    }
    this.reads.clear();
  }

  /** The index up to which the journal on disk holds what was applied (the change feed reads up to it). */
  get journalIndex(): number {
    return this.landedIndex;
  }

  /** The index of the entry that removed this member from the cluster, or null while it is one. */
  get removedAt(): number | null {
    return this.removed?.index ?? null;
  }

  /** The index of the last committed entry applied here (no-ops included). */
  get appliedIndex(): number {
    return this.store.position.applied;
  }

  /** The fatal error that stopped the replica, if any. */
  get failure(): Error | null {
    return this.failed;
  }
}

/**
 * `chunks` until `signal` aborts; then reading fails at once with the abort's reason,
 * even while the source waits for a chunk (a stalled sender). The source is asked to
 * close but not waited for: a stalled one answers only when its stream ends.
 */
async function* abandonable<T>(chunks: AsyncIterable<T>, signal: AbortSignal): AsyncGenerator<T> {
  const it = chunks[Symbol.asyncIterator]();
  const aborted = new Promise<never>((_, reject) => {
    if (signal.aborted) reject(signal.reason as Error);
    signal.addEventListener('abort', () => reject(signal.reason as Error), { once: true });
  });
  aborted.catch(() => undefined);
  let done = false;
  try {
    for (;;) {
      const next = await Promise.race([it.next(), aborted]);
      if (next.done) {
        done = true;
        return;
      }
      yield next.value;
    }
  } finally {
    if (!done) it.return?.().catch(() => undefined);
  }
}

/**
 * The Raft log: the write-ahead log under `<data_dir>/wal`, or, for a data directory
 * made by a release before it, the LevelDB log under `<data_dir>/raft`, kept as it is.
 */
async function openLog(dataDir: string, segmentBytes: number): Promise<LogStore> {
  const legacy = join(dataDir, 'raft');
  if (existsSync(join(legacy, 'CURRENT'))) return LevelLogStore.open(legacy);
  return WalLogStore.open(join(dataDir, 'wal'), { segmentBytes });
}

/**
 * A store that is ahead of the Raft log's last entry (it installed a streamed store,
 * then the process stopped before Raft wrote the snapshot) gets the snapshot written
 * now: the store's applied index and its entry's term, committed on the primary, with
 * the configuration the streamed store came with.
 *
 * A store ahead of the log in any other way applied entries the log no longer holds: a
 * segment cut short or damaged where the log reads a torn write. Those entries were
 * durable and acknowledged, and the configuration they changed is gone with them, so
 * the member does not start (a member started on a configuration it made up could
 * count a removed member in its quorum).
 */
async function reconcile(log: LogStore, boot: Boot, store: LedgerStore, dataDir: string): Promise<Boot> {
  const position = store.position;
  const last = (boot.snapshot?.meta.index ?? 0) + boot.entries.length;
  if (position.applied <= last) return boot;
  const recorded = await store.record(CONF_RECORD);
  const received = recorded === null ? null : recordedConf(recorded);
  // A received store recorded before its index was recorded with it is taken as it was.
  if (received === null || (received.at !== null && received.at !== position.applied)) {
    throw new ConfigError(`the state store has applied entries up to index ${position.applied}, but the Raft log in ${dataDir} ends at ${last}: `
      + 'entries that were durable and acknowledged are gone from the log (a segment cut short or damaged), and with them the membership they may have changed, so the member does not start. '
      + 'Put the log back, or restore the whole data directory from a backup; a cluster member is replaced (docs/operations.md, "Replacing a dead replica")');
  }
  const meta = { index: position.applied, term: position.term, conf: received.conf };
  const data = Buffer.from(JSON.stringify({ applied: position.applied, term: position.term, head: position.head, state_hash: position.stateHash }));
  await log.save({ snapshot: { meta, data }, entries: [], hardState: { ...boot.hardState, term: Math.max(boot.hardState.term, position.term), commit: position.applied }, mustSync: true });
  return log.load();
}

/**
 * The configuration a received store recorded, and the index the store was received at
 * (null for one recorded before it was; one recorded before removed ids were remembered has none).
 */
function recordedConf(text: string): { conf: ConfState; at: number | null } {
  const c = JSON.parse(text) as Omit<ConfState, 'removed'> & { removed?: NodeId[]; received_at?: number };
  return { conf: confState(c.voters, c.learners, c.context, c.removed), at: c.received_at ?? null };
}

function outcomeLabel(a: Applied): string {
  if (!a.result.ok) return a.result.error.error;
  const v = a.result.value as { kind?: string; outcome?: { verdict: string } };
  return v.kind === 'replayed' ? 'replayed' : (v.outcome?.verdict ?? 'unknown');
}

/** Why a cluster member's data does not start as a standalone node. */
function memberStartedAlone(self: NodeId, conf: ConfState): string {
  const learners = conf.learners.length > 0 ? `; learners ${conf.learners.join(', ')}` : '';
  return `this data directory is ${self}'s, a member of a cluster of ${conf.voters.length} (voters ${conf.voters.join(', ')}${learners}), `
    + 'but its configuration\'s members name no other member (a standalone node). Alone it could not commit anything, nor reach the other members: '
    + 'start it with its cluster\'s members (members, APL_MEMBERS) and cluster_id, as the cluster runs it. '
    + 'A copy of one member\'s data is started with copies of the others, taken together (docs/operations.md, "Backups")';
}
