/**
 * The replica: a Raft group member whose committed entries feed the ledger's state
 * machine. A standalone node is a group of one, so there is one code path.
 *
 * The driver honours the Raft contract for every Ready, in order: persist (one synced
 * LevelDB batch of the Raft log for all the entries of the batch), send, apply the
 * committed entries, serve reads, advance. Proposals that arrive while a write is on
 * the disk wait for the next Ready, so many proposals share one fsync.
 *
 * Applying is two phases (core/store.ts): the records every committed operation of
 * the Ready reads are loaded together from the state store, then each operation is
 * applied over one view of it, later ones seeing earlier ones' writes; the view's
 * writes, the journal records of what took effect (`{index, op, result, entry_hash}`,
 * what `GET /admin/v1/log/export` serves) and the applied index go to the store in one
 * batch. Only then are the waiting requests answered.
 *
 * Restart costs what was not yet applied: the store says where it is, and Raft hands
 * back only the committed entries after it. The Raft log is compacted only below an
 * index the store has made durable, so those entries are always there.
 *
 * A replica whose disk fails stops safely: its clocks stop, waiting requests are
 * answered 503 `commit_unavailable` (their entries may be in the log), new ones 422
 * `gateway_error`, `/readyz` answers not ready, and the reason is logged once.
 */
import { randomBytes } from 'node:crypto';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { decodeOperation, encodeOperation, type Applied, type Operation } from '@apl/core';
import { LevelLogStore, RawNode, seededRandom, type Entry, type Message, type NodeId, type Ready, type Status } from '@apl/raft';
import { ApiError } from './errors.js';
import { startBatch } from './apply-batch.js';
import { LedgerStore, type WrapDb } from './ledger-store.js';
import type { Logger } from './log.js';
import type { Metrics } from './metrics.js';

/** Carries Raft messages to the other members. */
export interface Transport {
  send(messages: Message[]): void;
}

export interface ReplicaOptions {
  id: NodeId;
  peers: NodeId[];
  dataDir: string;
  raft: { tick_ms: number; election_ticks: number; heartbeat_ticks: number; max_inflight_msgs: number; max_size_per_msg: number; max_uncommitted_entries: number };
  tickIntervalMs: number;
  commitTimeoutMs: number;
  proposalsInFlightMax: number;
  snapshotIntervalEntries: number;
  cacheEntriesMax: number;
  writeBufferBytes: number;
  transport: Transport;
  log: Logger;
  metrics: Metrics;
  /** wraps the state store's database (tests inject faults through it). */
  wrapDb?: WrapDb;
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

const SHUTTING_DOWN = 'The node is shutting down; nothing was recorded. Resubmit to another replica.';
const CANNOT_WRITE = 'The node cannot write its state; nothing was recorded. Resubmit to another replica.';

export class Replica {
  private readonly waiters = new Map<number, Waiter>();
  private readonly reads = new Map<string, ReadWaiter>();
  /** readPrefix makes ReadIndex contexts unique across restarts of this member. */
  private readonly readPrefix = `${randomBytes(6).toString('hex')}:`;
  private readSeq = 0;
  private pumping = false;
  private failed: Error | null = null;
  private closed = false;
  private timers: NodeJS.Timeout[] = [];
  /** snapshotIndex is the index of the latest compaction. */
  private snapshotIndex: number;

  private constructor(
    private readonly opts: ReplicaOptions,
    private readonly raft: RawNode,
    private readonly log: LevelLogStore,
    readonly store: LedgerStore,
    snapshotIndex: number,
  ) {
    this.snapshotIndex = snapshotIndex;
  }

  static async open(opts: ReplicaOptions): Promise<Replica> {
    mkdirSync(opts.dataDir, { recursive: true });
    const log = await LevelLogStore.open(join(opts.dataDir, 'raft'));
    const store = await LedgerStore.open(join(opts.dataDir, 'ledger'), { cacheEntriesMax: opts.cacheEntriesMax, writeBufferBytes: opts.writeBufferBytes, ...(opts.wrapDb ? { wrap: opts.wrapDb } : {}) });
    const boot = await log.load();
    const applied = store.position.applied;
    const compacted = boot.snapshot?.meta.index ?? 0;
    if (applied < compacted) {
      throw new Error(`the state store is at index ${applied}, below the Raft log's compaction at ${compacted}: the entries between are gone, so this data directory cannot be recovered alone (restore it from a backup, or replace the member)`);
    }
    const raft = new RawNode({
      id: opts.id,
      peers: opts.peers,
      electionTicks: opts.raft.election_ticks,
      heartbeatTicks: opts.raft.heartbeat_ticks,
      preVote: true,
      checkQuorum: opts.peers.length > 1,
      maxInflightMsgs: opts.raft.max_inflight_msgs,
      maxSizePerMsg: opts.raft.max_size_per_msg,
      maxUncommittedEntries: opts.raft.max_uncommitted_entries,
      // Election timeouts must differ between members; the state machine never sees this.
      random: seededRandom(randomBytes(4).readUInt32LE()),
      applied,
    }, boot);
    opts.log.info({ event: 'replica_open', applied, commit: boot.hardState.commit, term: boot.hardState.term, last: raft.status().lastIndex }, 'replica opened');
    return new Replica(opts, raft, log, store, compacted);
  }

  /** Starts the clocks: Raft ticks, and ledger ticks proposed by the primary. */
  start(): void {
    if (this.opts.peers.length === 1) this.raft.campaign();
    this.timers.push(setInterval(() => {
      this.raft.tick();
      this.kick();
    }, this.opts.raft.tick_ms));
    this.timers.push(setInterval(() => {
      if (!this.isLeader() || this.failed) return;
      this.propose({ type: 'Tick', v: 1 }).catch((err: Error) => this.opts.log.warn({ event: 'tick_failed', err: err.message }, 'ledger tick not committed'));
    }, this.opts.tickIntervalMs));
    this.kick();
  }

  isLeader(): boolean {
    return this.raft.status().role === 'leader';
  }

  status(): Status {
    return this.raft.status();
  }

  /** Whether the member serves: open, not failed, a primary known, and the log applied. */
  ready(): boolean {
    const s = this.raft.status();
    return !this.closed && this.failed === null && s.leader !== null && this.store.position.applied >= s.commit;
  }

  /** Hands a message from a peer to Raft. */
  step(m: Message): void {
    const r = this.raft.step(m);
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
    const back = decodeOperation(bytes);
    if (!back.ok) return Promise.reject(new UnreadableOperation(back.issues));
    const r = this.raft.propose([bytes]);
    if (!r.ok) {
      if (r.code === 'not_leader') return Promise.reject(new NotLeaderError(r.leader));
      return Promise.reject(new ApiError('gateway_error', `The operation could not be proposed (${r.code}); nothing was recorded. Resubmit.`));
    }
    const index = r.firstIndex;
    const promise = new Promise<Applied>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiters.delete(index);
        this.opts.metrics.proposalsInFlight.set(this.waiters.size);
        reject(new ApiError('commit_unavailable', 'The commit could not be confirmed in time; it may or may not have been recorded. Retry with the same transaction id, or read the transaction.'));
      }, this.opts.commitTimeoutMs);
      this.waiters.set(index, { term: r.term, op: back.value, text: Buffer.from(bytes).toString('utf8'), resolve, reject, timer });
    });
    this.opts.metrics.proposalsInFlight.set(this.waiters.size);
    this.kick();
    return promise;
  }

  /** Resolves once this member has applied everything committed before the call (ReadIndex). */
  readBarrier(): Promise<void> {
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
      this.reads.set(ctx, { index: null, resolve, reject, timer });
    });
    this.kick();
    return p;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.stopClocks();
    while (this.pumping) await new Promise((r) => setTimeout(r, 5));
    await this.store.landed();
    this.failAll('The node shut down before the commit was confirmed; it may or may not have been recorded. Retry with the same transaction id, or read the transaction.');
    await this.log.close();
    await this.store.close();
  }

  /** Why a new proposal is refused now, or null. */
  private refusal(): ApiError | null {
    if (this.closed) return new ApiError('gateway_error', SHUTTING_DOWN);
    if (this.failed) return new ApiError('gateway_error', CANNOT_WRITE);
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
      const rd = this.raft.ready();
      if (rd.snapshot) throw new Error(`a snapshot arrived from the leader (index ${rd.snapshot.meta.index}); installing one needs the peer mesh, which carries the store`);
      // Committed entries that earlier Readies persisted are durable already: their
      // reads and their apply overlap this Ready's write. One this Ready writes waits for it.
      const persisting = this.persist(rd);
      const firstNew = rd.entries[0]?.index ?? Infinity;
      const applying = this.applyEntries(rd.committedEntries, rd.committedEntries.some((e) => e.index >= firstNew) ? persisting : undefined);
      applying.catch(() => undefined); // a failure is thrown by the await below, after the write's own
      await persisting;
      this.opts.transport.send(rd.messages);
      await applying;
      for (const rs of rd.readStates) this.onReadState(rs.index, Buffer.from(rs.context).toString());
      this.raft.advance(rd);
      this.serveReads();
      this.observe();
      await this.maybeCompact();
    }
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
   * Applies committed entries over one view of the store (once `durable` settles) and
   * hands the view to the store; the waiting requests are answered when it has landed,
   * while the next Ready goes on.
   */
  private async applyEntries(entries: Entry[], durable?: Promise<void>): Promise<void> {
    const fresh = entries.filter((e) => e.index > this.store.position.applied);
    const batch = fresh.map((e) => ({ index: e.index, term: e.term, op: this.decode(e) }));
    const { results, landed } = await startBatch(this.store, batch, durable);
    results.forEach((a, k) => {
      if (a === null) return;
      this.opts.metrics.entriesApplied.inc();
      if (batch[k]!.op!.op.type === 'SubmitIntent') this.opts.metrics.intents.inc({ outcome: outcomeLabel(a) });
    });
    if (fresh.length > 0) this.opts.metrics.tick.set(this.store.position.tick);
    landed.then(() => fresh.forEach((e, k) => this.settle(e, results[k] ?? null)), (err: Error) => this.fail(err));
  }

  /**
   * The operation of an entry: this member's own proposal as it read it back, or the
   * entry decoded. Null for a no-op or an unreadable entry: every replica reads the
   * same bytes the same way, so skipping is deterministic (stopping would stop every
   * replica at every restart). Proposers never write such an entry (see propose), so
   * an unreadable one is a bug worth shouting about.
   */
  private decode(e: Entry): { op: Operation; text: string } | null {
    if (e.data.length === 0) return null;
    const w = this.waiters.get(e.index);
    if (w?.term === e.term) return { op: w.op, text: w.text };
    const d = decodeOperation(e.data);
    if (!d.ok) {
      this.opts.log.error({ event: 'entry_unreadable', index: e.index, issues: d.issues }, 'log entry is not an operation; it has no effect');
      return null;
    }
    return { op: d.value, text: Buffer.from(e.data.buffer, e.data.byteOffset, e.data.byteLength).toString('utf8') };
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

  private observe(): void {
    const s = this.raft.status();
    const m = this.opts.metrics;
    m.appliedIndex.set(this.store.position.applied);
    m.commitIndex.set(s.commit);
    m.term.set(s.term);
    m.isLeader.set(s.role === 'leader' ? 1 : 0);
    m.proposalsInFlight.set(this.waiters.size);
    m.storeCacheEntries.set(this.store.cacheSize);
  }

  /**
   * Compacts the Raft log once enough has been applied since the last compaction, and
   * only below what the store has made durable: a restart re-applies from the store's
   * index, so every entry after it must still be in the log.
   */
  private async maybeCompact(): Promise<void> {
    const pos = this.store.position;
    if (pos.applied - this.snapshotIndex < this.opts.snapshotIntervalEntries) return;
    await this.store.sync();
    const meta = { applied: pos.applied, term: pos.term, head: pos.head, state_hash: pos.stateHash };
    const snap = this.raft.compact(pos.applied, Buffer.from(JSON.stringify(meta)));
    if (!snap) return;
    await this.log.saveSnapshot(snap);
    this.snapshotIndex = pos.applied;
    this.opts.log.info({ event: 'log_compacted', index: pos.applied }, 'raft log compacted');
  }

  private fail(err: Error): void {
    if (this.failed) return;
    this.failed = err;
    this.stopClocks();
    this.opts.log.fatal({ event: 'replica_failed', err: err.message }, 'the replica stopped: its log or its state store cannot be written; it answers no writes until restarted');
    this.failAll('The node failed before the commit was confirmed; it may or may not have been recorded. Retry with the same transaction id on another replica, or read the transaction.');
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
    for (const r of this.reads.values()) {
      clearTimeout(r.timer);
      r.reject(new ApiError('commit_unavailable', 'The read could not be confirmed here; read from another replica.'));
    }
    this.reads.clear();
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

function outcomeLabel(a: Applied): string {
  if (!a.result.ok) return a.result.error.error;
  const v = a.result.value as { kind?: string; outcome?: { verdict: string } };
  return v.kind === 'replayed' ? 'replayed' : (v.outcome?.verdict ?? 'unknown');
}
