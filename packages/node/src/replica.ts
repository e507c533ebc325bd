/**
 * The replica: a Raft group member whose committed entries feed the ledger's state
 * machine. A standalone node is a group of one, so there is one code path.
 *
 * The driver honours the Raft contract for every Ready, in order: persist (one synced
 * LevelDB batch for all the entries of the batch), send, restore a snapshot, apply the
 * committed entries, serve reads, advance. Proposals that arrive while a write is on
 * the disk wait for the next Ready, so many proposals share one fsync.
 *
 * Every operation that took effect (that extended the hash chain) is also written
 * to the journal, a LevelDB store of `{index, op, result, entry_hash}` records that
 * is never compacted: it is what `GET /admin/v1/log/export` serves to auditors. The journal is synced before the Raft
 * log is compacted past it; after a crash, entries it lost are re-applied from the
 * Raft log and written again, with the same bytes.
 */
import { randomBytes } from 'node:crypto';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { Level } from 'level';
import {
  apply, canonicalJson, createLedger, decodeOperation, decodeSnapshot, encodeOperation, encodeSnapshot,
  type Applied, type Ledger, type Operation,
} from '@apl/core';
import { LevelLogStore, RawNode, seededRandom, type Entry, type Message, type NodeId, type Ready, type Status } from '@apl/raft';
import { ApiError } from './errors.js';
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
  transport: Transport;
  log: Logger;
  metrics: Metrics;
}

interface Waiter {
  term: number;
  /** op is the proposal as read back from its bytes: the entry at this index and term holds exactly them. */
  op: Operation;
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

const JOURNAL_KEY = (index: number) => index.toString(16).padStart(16, '0');
const JOURNAL_LAST_KEY = 'f'.repeat(16);

export class Replica {
  ledger: Ledger;
  private readonly waiters = new Map<number, Waiter>();
  private readonly reads = new Map<string, ReadWaiter>();
  private readSeq = 0;
  private pumping = false;
  private failed: Error | null = null;
  private closed = false;
  private timers: NodeJS.Timeout[] = [];
  /**
   * applied is the index of the last committed entry this replica has applied,
   * a new leader's no-op and unreadable entries included; ledger.applied counts
   * operations only. Invariant: ledger.applied <= applied <= commit.
   */
  private applied: number;
  /** snapshotIndex is the index of the latest compaction snapshot. */
  private snapshotIndex: number;
  private journalSynced = 0;

  private constructor(
    private readonly opts: ReplicaOptions,
    private readonly raft: RawNode,
    private readonly store: LevelLogStore,
    private readonly journal: Level<string, string>,
    ledger: Ledger,
    applied: number,
  ) {
    this.ledger = ledger;
    this.applied = applied;
    this.snapshotIndex = applied;
  }

  static async open(opts: ReplicaOptions): Promise<Replica> {
    mkdirSync(opts.dataDir, { recursive: true });
    const store = await LevelLogStore.open(join(opts.dataDir, 'raft'));
    const journal = new Level<string, string>(join(opts.dataDir, 'journal'));
    await journal.open();
    const boot = await store.load();
    const ledger = boot.snapshot ? decodeSnapshot(boot.snapshot.data) : createLedger();
    // The snapshot covers the log up to its index, no-ops after the last operation included.
    const applied = Math.max(ledger.applied, boot.snapshot?.meta.index ?? 0);
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
    const r = new Replica(opts, raft, store, journal, ledger, applied);
    opts.log.info({ event: 'replica_open', applied: ledger.applied, commit: boot.hardState.commit, term: boot.hardState.term }, 'replica opened');
    return r;
  }

  /** Starts the clocks: Raft ticks, and ledger ticks proposed by the primary. */
  start(): void {
    if (this.opts.peers.length === 1) this.raft.campaign();
    this.timers.push(setInterval(() => {
      this.raft.tick();
      this.kick();
    }, this.opts.raft.tick_ms));
    this.timers.push(setInterval(() => {
      if (!this.isLeader()) return;
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
    return !this.closed && this.failed === null && s.leader !== null && this.applied >= s.commit;
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
   * Proposes an operation and resolves with its result once it is committed and
   * applied here. Rejects with UnreadableOperation (it is not proposed), NotLeaderError,
   * or an ApiError: gateway_error when the operation is certainly not in the log,
   * commit_unavailable when it may be.
   */
  propose(op: Operation): Promise<Applied> {
    this.checkOpen();
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
      this.waiters.set(index, { term: r.term, op: back.value, resolve, reject, timer });
    });
    this.opts.metrics.proposalsInFlight.set(this.waiters.size);
    this.kick();
    return promise;
  }

  /** Resolves once this member has applied everything committed before the call (ReadIndex). */
  readBarrier(): Promise<void> {
    this.checkOpen();
    const ctx = `${this.opts.id}:${++this.readSeq}`;
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

  /** The journal's records from `fromIndex` on, in log order. */
  async *journalRecords(fromIndex = 0): AsyncGenerator<string> {
    for await (const value of this.journal.values({ gte: JOURNAL_KEY(fromIndex), lte: JOURNAL_LAST_KEY })) yield value;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const t of this.timers) clearInterval(t);
    while (this.pumping) await new Promise((r) => setTimeout(r, 5));
    this.failAll(new ApiError('gateway_error', 'The node is shutting down; nothing was recorded. Resubmit to another replica.'));
    await this.store.close();
    await this.journal.close();
  }

  private checkOpen(): void {
    if (this.closed) throw new ApiError('gateway_error', 'The node is shutting down; nothing was recorded. Resubmit to another replica.');
    if (this.failed) throw new ApiError('gateway_error', 'The node cannot write its log; nothing was recorded. Resubmit to another replica.');
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
      await this.persist(rd);
      this.opts.transport.send(rd.messages);
      if (rd.snapshot) this.restore(rd);
      const journal = this.applyEntries(rd.committedEntries);
      if (journal.length > 0) await this.journal.batch(journal);
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
    await this.store.save(rd);
    if (rd.mustSync) {
      this.opts.metrics.fsyncs.inc();
      this.opts.metrics.fsyncDuration.observe(Number(process.hrtime.bigint() - start) / 1e9);
    }
  }

  private restore(rd: Ready): void {
    this.ledger = decodeSnapshot(rd.snapshot!.data);
    this.applied = rd.snapshot!.meta.index;
    this.snapshotIndex = this.applied;
    this.opts.log.info({ event: 'snapshot_restored', applied: this.ledger.applied }, 'state restored from a snapshot');
  }

  /** Applies committed entries; returns the journal writes for them. */
  private applyEntries(entries: Entry[]): { type: 'put'; key: string; value: string }[] {
    const journal: { type: 'put'; key: string; value: string }[] = [];
    for (const e of entries) {
      if (e.index <= this.applied) continue;
      this.applied = e.index;
      if (e.data.length === 0) {
        this.settle(e, null);
        continue;
      }
      const proposed = this.waiters.get(e.index);
      const decoded = proposed?.term === e.term ? { ok: true as const, value: proposed.op } : decodeOperation(e.data);
      if (!decoded.ok) {
        // Every replica reads the same bytes the same way, so skipping is deterministic;
        // stopping here would stop every replica at every restart. Proposers never
        // write such an entry (see propose), so this is a bug worth shouting about.
        this.opts.log.error({ event: 'entry_unreadable', index: e.index, issues: decoded.issues }, 'log entry is not an operation; it has no effect');
        this.settle(e, null);
        continue;
      }
      const applied = apply(this.ledger, e.index, decoded.value);
      if (applied.entry_hash !== null) {
        journal.push({ type: 'put', key: JOURNAL_KEY(e.index), value: canonicalJson({ index: e.index, op: decoded.value, result: applied.result, entry_hash: applied.entry_hash }) });
      }
      this.opts.metrics.entriesApplied.inc();
      if (decoded.value.type === 'SubmitIntent') this.opts.metrics.intents.inc({ outcome: outcomeLabel(applied) });
      this.settle(e, applied);
    }
    return journal;
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
      if (r.index === null || this.applied < r.index) continue;
      this.reads.delete(ctx);
      clearTimeout(r.timer);
      r.resolve();
    }
  }

  private observe(): void {
    const s = this.raft.status();
    const m = this.opts.metrics;
    m.appliedIndex.set(this.applied);
    m.commitIndex.set(s.commit);
    m.term.set(s.term);
    m.isLeader.set(s.role === 'leader' ? 1 : 0);
    m.tick.set(this.ledger.state.tick);
    m.proposalsInFlight.set(this.waiters.size);
  }

  /** Compacts the Raft log once enough has been applied since the last snapshot. */
  private async maybeCompact(): Promise<void> {
    const applied = this.applied;
    if (applied - this.snapshotIndex < this.opts.snapshotIntervalEntries) return;
    if (this.journalSynced < applied) {
      // The journal must hold every entry the compaction will drop from the Raft log.
      await this.journal.batch([{ type: 'put', key: 'synced', value: String(applied) }], { sync: true });
      this.journalSynced = applied;
    }
    const snap = this.raft.compact(applied, encodeSnapshot(this.ledger));
    if (!snap) return;
    await this.store.saveSnapshot(snap);
    this.snapshotIndex = applied;
    this.opts.log.info({ event: 'log_compacted', index: applied }, 'raft log compacted');
  }

  private fail(err: Error): void {
    this.failed = err;
    this.opts.log.fatal({ event: 'replica_failed', err: err.message }, 'the replica stopped: its log cannot be written or applied');
    this.failAll(new ApiError('gateway_error', 'The node cannot write its log; nothing was recorded. Resubmit to another replica.'));
  }

  private failAll(e: ApiError): void {
    for (const w of this.waiters.values()) {
      clearTimeout(w.timer);
      w.reject(e);
    }
    this.waiters.clear();
    for (const r of this.reads.values()) {
      clearTimeout(r.timer);
      r.reject(e);
    }
    this.reads.clear();
  }

  /** The index of the last committed entry applied here (no-ops included). */
  get appliedIndex(): number {
    return this.applied;
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
