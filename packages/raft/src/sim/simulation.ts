// A deterministic simulation of a Raft group in one process. One seed chooses the group
// (3 or 5 voters, spare ids that may join, pre-vote, check-quorum, flow-control limits,
// compaction interval) and drives every event: ticks, message delivery over a faulty
// network (drop, delay, reorder, duplicate, symmetric and one-way partitions), disk
// writes that take time, crashes that lose unsynced writes and in-flight saves,
// restarts, client proposals, reads, leadership transfers and membership changes. Each
// node runs the caller's loop the way a server would: persist the Ready (the save takes
// simulated time, during which the node keeps receiving messages and ticks), then send,
// then apply, then advance.
//
// Membership: an operator adds a spare id as a learner (its process starts on an empty
// store, knowing no configuration), promotes a learner, and removes a voter or a
// learner, always at a node that believes it leads, while every other fault goes on.
// A removed member runs until it applies its own removal (it was told), or until its
// removal has been committed for three election timeouts; then its process is stopped
// for good, and its id is never used again.
//
// The checkers run after every event. When the fault phase ends the network heals and
// every member restarts; then a leader must emerge and a new proposal must be applied on
// every member of the configuration within a bound (liveness).
import { createHash, type Hash } from 'node:crypto';
import { RaftInvariantError } from '../assert.js';
import { RawNode, splitMessages } from '../rawnode.js';
import { MemoryLogStore } from '../storage.js';
import type { Boot, ConfChange, ConfState, Config, Entry, Message, NodeId, Ready, Snapshot } from '../types.js';
import { applyChange, decodeConfEntry, members } from '../membership.js';
import { Checker, entryKey, Violation, type CheckerName } from './checker.js';
import { Prng } from './prng.js';
import { messageCodec } from '../wire/codec.js';
import { checkStart, isEmptyBoot } from '../identity.js';

export type NodeFactory = (config: Config, boot: Boot) => RawNode;

export interface SimOptions {
  seed: number;
  /** inject network faults, crashes and restarts (default true). */
  faults?: boolean;
  /** length of the fault phase in ticks (default 1000). */
  faultTicks?: number;
  /** after healing, a stable leader must emerge within this many ticks (default 10 election timeouts of the seed). */
  leaderTicks?: number;
  /**
   * after healing, until a new proposal is applied on every node, the group must make
   * progress (an entry made durable, committed or applied somewhere) at least every this
   * many ticks (default 10 election timeouts of the seed).
   * A backlog of entries may take long to replicate; a group that stops moving is stuck.
   */
  stallTicks?: number;
  /** after healing, a new proposal must be applied everywhere within this many ticks in any case (default 3000). */
  recoveryTicks?: number;
  /** builds nodes; tests pass deliberately broken variants. */
  factory?: NodeFactory;
  /** a deliberately broken driver that sends a Ready's messages before persisting it. */
  sendBeforePersist?: boolean;
  /**
   * the driver sends a leader's appends before persisting the Ready (splitMessages), as
   * the node does, so that followers write in parallel with the leader. Default: on for
   * odd seeds, so that both orderings run.
   */
  pipeline?: boolean;
  /** a deliberately broken start that accepts an empty store in a running cluster (a wiped disk). */
  acceptEmptyStore?: boolean;
  /**
   * check that no leader holds two uncommitted changes (default true). Off, a broken
   * leader that proposes changes back to back must be caught by the other checkers.
   */
  checkOneAtATime?: boolean;
  /** receives every trace line. */
  onTrace?: (line: string) => void;
}

export interface SimResult {
  seed: number;
  ok: boolean;
  violation: { checker: CheckerName; message: string; time: number } | null;
  /** sha256 over the event trace: equal for equal seeds. */
  traceHash: string;
  events: number;
  /** highest commit index reached. */
  commit: number;
  acked: number;
  /** what happened, so that a checker never passes on a run where nothing did. */
  counts: SimCounts;
  crashes: number;
  maxTerm: number;
  /** the voters the group started with, and every id it may use (the others are spares). */
  nodes: number;
  ids: number;
  /** simulated ticks from healing to a stable leader, or -1. */
  leaderTicks: number;
  /** simulated ticks from healing to a new proposal applied everywhere, or -1. */
  recoveryTicks: number;
}

export interface SimCounts {
  /** reads answered (a ReadState served) and proposals acknowledged to their client. */
  readsAnswered: number;
  acked: number;
  crashes: number;
  /** snapshots a member restored from a leader's transfer (not at its own restart). */
  snapshotInstalls: number;
  snapshotTransfersFailed: number;
  pauses: number;
  writeFailures: number;
  /** crashes between a compaction and its snapshot write. */
  compactionCrashes: number;
  /** members whose disk was wiped, and the starts refused on the empty store. */
  wipes: number;
  wipeRefusals: number;
  /** membership changes a leader accepted (appended), by kind. */
  addsProposed: number;
  promotesProposed: number;
  removesProposed: number;
  /** membership changes committed (applied somewhere), by kind. */
  learnersAdded: number;
  learnersPromoted: number;
  membersRemoved: number;
  /** changes a leader refused: another is uncommitted, no entry of its term is committed yet, or it would remove itself. */
  confRefused: number;
  /** leaders that crashed with a change uncommitted in their log. */
  confInterrupted: number;
  /** removed members that applied their own removal before their process was stopped. */
  removedTold: number;
  /** removed ids the operator asked a leader to add back, refused (ids are never reused). */
  reuseRefused: number;
}

/** zeroCounts is a SimCounts with every count at zero, to sum runs into. */
export function zeroCounts(): SimCounts {
  return {
    readsAnswered: 0,
    acked: 0,
    crashes: 0,
    snapshotInstalls: 0,
    snapshotTransfersFailed: 0,
    pauses: 0,
    writeFailures: 0,
    compactionCrashes: 0,
    wipes: 0,
    wipeRefusals: 0,
    addsProposed: 0,
    promotesProposed: 0,
    removesProposed: 0,
    learnersAdded: 0,
    learnersPromoted: 0,
    membersRemoved: 0,
    confRefused: 0,
    confInterrupted: 0,
    removedTold: 0,
    reuseRefused: 0,
  };
}

/** Simulated time: a tick is TICK time units; message and disk delays are in units. */
const TICK = 10;

type Event =
  | { kind: 'tick'; id: NodeId; gen: number }
  | { kind: 'deliver'; to: NodeId; wire: Uint8Array }
  | { kind: 'snapDone'; from: NodeId; gen: number; to: NodeId; wire: Uint8Array | null; key: string }
  | { kind: 'resume'; id: NodeId; gen: number }
  | { kind: 'readAt'; id: NodeId; gen: number }
  | { kind: 'saved'; id: NodeId; gen: number }
  | { kind: 'client' }
  | { kind: 'reader' }
  | { kind: 'stale'; id: NodeId; gen: number; term: number }
  | { kind: 'fault' }
  | { kind: 'restart'; id: NodeId; gen: number }
  | { kind: 'heal' }
  | { kind: 'probe' }
  | { kind: 'cut'; id: NodeId }
  | { kind: 'member'; eager: NodeId | null; gen: number }
  | { kind: 'takeover'; id: NodeId; gen: number }
  | { kind: 'crashAt'; id: NodeId; gen: number }
  | { kind: 'split' }
  | { kind: 'decommission'; id: NodeId; told: boolean };

interface Slot {
  id: NodeId;
  /** gen counts crashes; events of an earlier incarnation are ignored. */
  gen: number;
  node: RawNode | null;
  disk: MemoryLogStore;
  random: Prng;
  /** the Ready whose write is in progress, or null. */
  saving: Ready | null;
  /** the longest an fsync takes on this node's disk now (a stalled disk takes long). */
  fsyncMax: number;
  /** the state machine: how far it applied and a hash chain over what it applied. */
  applied: number;
  state: number;
  /** proposals of this incarnation awaiting apply: index -> entry key. */
  proposals: Map<number, string>;
  /** this member's clock: time units between its ticks (members drift apart). */
  tickEvery: number;
  /** the process is paused (SIGSTOP) until this time: it ticks, receives and writes nothing. */
  pausedUntil: number;
  /** the state after each recent applied index, for a snapshot taken a tail behind. */
  history: Map<number, number>;
  /** the member refused to start on a wiped disk: it stays down, as an operator would find it. */
  retired: boolean;
  /** the process was started at least once: a bootstrap member, or a spare provisioned to join. */
  joined: boolean;
  /** a leader accepted this member's removal: it is never added again (an id is never reused). */
  leaving: boolean;
  /** removed, and its process stopped for good. */
  gone: boolean;
  /**
   * the disk a wipe destroyed, until the member starts on the new one. The checkers see
   * it: a member that is down for good does not lie about what it held, one that came
   * back on an empty store does.
   */
  lostDisk: MemoryLogStore | null;
}

interface Knobs {
  /** the gap between faults, in time units: churn faster than elections settle, or calmer. */
  faultGap: [number, number];
  /** the chance that a new leader is cut off soon after it wins. */
  leaderCutRate: number;
  preVote: boolean;
  checkQuorum: boolean;
  heartbeatTicks: number;
  maxInflightMsgs: number;
  maxSizePerMsg: number;
  maxUncommittedEntries: number;
  compactEvery: number;
  /** compaction keeps this many entries before the applied index (a lagging member catches up from the log). */
  compactTail: number;
  electionTicks: number;
  /** snapshots are padded to this many bytes and sent in chunks of snapChunkBytes: large and slow transfers. */
  snapBytes: number;
  snapChunkBytes: number;
  /** the gap between membership changes, in time units, or null: the members never change. */
  confGap: [number, number] | null;
}

export function runSimulation(opts: SimOptions): SimResult {
  return new Simulation(opts).run();
}

class Simulation {
  private readonly rng: Prng;
  private readonly net: Prng;
  private readonly faultRng: Prng;
  private readonly clientRng: Prng;
  private readonly memberRng: Prng;
  /** every id the run may use: the bootstrap voters, then the spares that may join. */
  private readonly ids: NodeId[];
  /** the bootstrap voters (config.peers of the members that start the group). */
  private readonly initial: NodeId[];
  private readonly slots = new Map<NodeId, Slot>();
  private readonly knobs: Knobs;
  /** whether the driver sends a leader's appends before the write (SimOptions.pipeline). */
  private readonly pipelined: boolean;
  private readonly checker: Checker;
  private readonly hash: Hash = createHash('sha256');
  /** trace lines not yet hashed. */
  private traced = '';
  private readonly factory: NodeFactory;
  /** every delivered message crosses the wire codec, as it does between processes. */
  private readonly codec = messageCodec('sim');
  private readonly faultEnd: number;
  private readonly deadline: number;
  private readonly leaderDeadline: number;
  private readonly stall: number;
  /** when a stable leader was first seen after healing, or -1. */
  private leaderAt = -1;
  /** the group's progress (commits and applies, summed) and when it last grew. */
  private progress = 0;
  private progressAt = 0;

  private now = 0;
  private seq = 0;
  private readonly queue: { at: number; seq: number; ev: Event }[] = [];
  private events = 0;
  private phase: 'faults' | 'healed' | 'done' = 'faults';
  private healedAt = 0;
  private doneAt = -1;

  // network state
  private readonly blocked = new Set<string>();
  private dropRate = 0;
  private dupRate = 0;
  private maxDelay = 8;

  // client state
  private nextPayload = 0;
  private marker: { index: number; term: number; key: string } | null = null;
  private crashes = 0;
  /** no fault is injected before this time (a stale-leader scenario is under way). */
  private quietUntil = 0;
  private readonly counts: SimCounts = zeroCounts();

  // membership state
  /** the highest index of a conf entry applied anywhere: an entry beyond it, applied, is a change just committed. */
  private confApplied = 0;
  /** a leader handed over so that it could be removed: the next change removes it. */
  private removeNext: NodeId | null = null;
  /** members whose removal is committed. */
  private readonly removed = new Set<NodeId>();
  /** the latest leader cut off right after appending a change (its incarnation, term and the change's index). */
  private cutChange: { leader: NodeId; gen: number; term: number; index: number } | null = null;
  /**
   * snapshot transfers in flight, by `${from}#${incarnation}>${to}`: a process's transport
   * runs one per peer at a time, as the node's mesh does; a restarted process has a new one.
   */
  private readonly transfers = new Set<string>();
  /**
   * snapshots a leader asked for and has heard nothing about since, by `${from}>${to}`,
   * with the sender's incarnation and term. Asking again before a report or an answer
   * from the member is the blind resend that restarts a slow transfer forever.
   */
  private readonly awaiting = new Map<string, { tag: string; since: number }>();
  /** when the leader last heard about a pair's transfer: an answer of the member, or a report. */
  private readonly heard = new Map<string, number>();
  /** the time of each node's latest Ready: a Ready's messages were made after the previous one. */
  private readonly readyAt = new Map<NodeId, number>();

  constructor(private readonly opts: SimOptions) {
    this.rng = new Prng(opts.seed);
    this.net = this.rng.fork();
    this.faultRng = this.rng.fork();
    this.clientRng = this.rng.fork();
    this.memberRng = this.rng.fork();
    this.pipelined = opts.pipeline ?? opts.seed % 2 === 1;
    const n = this.rng.pick([3, 5]);
    this.knobs = {
      faultGap: this.rng.pick<[number, number]>([[20, 200], [10, 60]]),
      leaderCutRate: this.rng.pick([0, 0.3, 0.7]),
      preVote: this.rng.chance(0.75),
      checkQuorum: this.rng.chance(0.75),
      heartbeatTicks: this.rng.pick([1, 1, 3]),
      maxInflightMsgs: this.rng.pick([1, 2, 4, 64]),
      maxSizePerMsg: this.rng.pick([1, 64, 256, 4096]),
      maxUncommittedEntries: this.rng.pick([8, 64, 1024]),
      compactEvery: this.rng.pick([4, 16, 64]),
      compactTail: this.rng.pick([0, 0, 4, 32]),
      electionTicks: this.rng.pick([6, 10, 10, 20]),
      snapBytes: this.rng.pick([0, 512, 8192]),
      snapChunkBytes: this.rng.pick([256, 1024, 4096]),
      confGap: this.rng.chance(0.2) ? null : this.rng.pick<[number, number]>([[50, 200], [100, 600]]),
    };
    // Spare ids join over the run; with three voters there are two to four of them,
    // with five, two (seven ids at most).
    const spares = this.knobs.confGap === null ? 0 : n === 3 ? this.rng.int(2, 4) : 2;
    this.ids = Array.from({ length: n + spares }, (_, k) => `n${k + 1}`);
    this.initial = this.ids.slice(0, n);
    this.checker = new Checker(this.initial, opts.checkOneAtATime ?? true);
    this.factory = opts.factory ?? ((c, b) => new RawNode(c, b));
    this.faultEnd = (opts.faultTicks ?? 1000) * TICK;
    this.deadline = this.faultEnd + (opts.recoveryTicks ?? 3000) * TICK;
    this.leaderDeadline = this.faultEnd + (opts.leaderTicks ?? 10 * this.knobs.electionTicks) * TICK;
    this.stall = (opts.stallTicks ?? 10 * this.knobs.electionTicks) * TICK;
    for (const id of this.ids) {
      this.slots.set(id, {
        id,
        gen: 0,
        node: null,
        disk: new MemoryLogStore(),
        random: this.rng.fork(),
        saving: null,
        fsyncMax: 6,
        applied: 0,
        state: 0,
        proposals: new Map(),
        tickEvery: TICK + this.rng.int(-2, 3),
        pausedUntil: 0,
        history: new Map(),
        retired: false,
        joined: this.initial.includes(id),
        leaving: false,
        gone: false,
        lostDisk: null,
      });
    }
    this.trace(`seed ${opts.seed} nodes ${n} ids ${this.ids.length} pipelined ${this.pipelined} ${JSON.stringify(this.knobs)}`);
  }

  run(): SimResult {
    let violation: SimResult['violation'] = null;
    try {
      for (const s of this.slots.values()) if (s.joined) this.start(s);
      this.schedule(this.rng.int(1, 30), { kind: 'client' });
      this.schedule(this.rng.int(1, 30), { kind: 'reader' });
      if (this.knobs.confGap !== null) this.schedule(this.memberRng.int(...this.knobs.confGap), { kind: 'member', eager: null, gen: 0 });
      if (this.opts.faults ?? true) this.schedule(this.faultRng.int(...this.knobs.faultGap), { kind: 'fault' });
      this.schedule(this.faultEnd, { kind: 'heal' });
      this.loop();
      this.checker.checkAckedApplied();
    } catch (err) {
      if (err instanceof Violation) violation = { checker: err.checker, message: err.message, time: this.now };
      else throw err;
      this.trace(`violation ${err.message}`);
    }
    let commit = 0;
    let maxTerm = 0;
    for (const s of this.slots.values()) {
      commit = Math.max(commit, s.node?.raft.log.committed ?? 0);
      maxTerm = Math.max(maxTerm, s.node?.raft.term ?? 0);
    }
    return {
      seed: this.opts.seed,
      ok: violation === null,
      violation,
      traceHash: this.traceHash(),
      events: this.events,
      commit,
      acked: this.checker.maxAcked,
      counts: { ...this.counts, crashes: this.crashes, readsAnswered: this.checker.readsAnswered, acked: this.checker.ackedCount },
      crashes: this.crashes,
      maxTerm,
      nodes: this.initial.length,
      ids: this.ids.length,
      leaderTicks: this.leaderAt < 0 ? -1 : Math.round((this.leaderAt - this.healedAt) / TICK),
      recoveryTicks: this.doneAt < 0 ? -1 : Math.round((this.doneAt - this.healedAt) / TICK),
    };
  }

  private loop(): void {
    while (this.phase !== 'done') {
      const next = this.pop();
      if (next === undefined) throw new Violation('liveness', 'the simulation ran out of events');
      this.now = next.at;
      this.events++;
      this.handle(next.ev);
      this.checker.afterStep(this.views());
    }
  }

  private views(): { id: NodeId; node: RawNode | null; disk: MemoryLogStore }[] {
    const views = [];
    for (const s of this.slots.values()) views.push({ id: s.id, node: s.node, disk: s.lostDisk ?? s.disk });
    return views;
  }

  private handle(ev: Event): void {
    switch (ev.kind) {
      case 'tick':
        return this.onTick(ev.id, ev.gen);
      case 'deliver':
        return this.onDeliver(ev.to, ev.wire);
      case 'snapDone':
        return this.onSnapDone(ev);
      case 'resume':
        return this.onResume(ev.id, ev.gen);
      case 'readAt':
        return this.onReadAt(ev.id, ev.gen);
      case 'saved':
        return this.onSaved(ev.id, ev.gen);
      case 'client':
        return this.onClient();
      case 'reader':
        return this.onReader();
      case 'stale':
        return this.onStale(ev.id, ev.gen, ev.term);
      case 'fault':
        return this.onFault();
      case 'restart':
        return this.onRestart(ev.id, ev.gen);
      case 'heal':
        return this.onHeal();
      case 'probe':
        return this.onProbe();
      case 'cut':
        return this.onCut(ev.id);
      case 'member':
        return this.onMember(ev.eager, ev.gen);
      case 'takeover':
        return this.onTakeover(ev.id, ev.gen);
      case 'crashAt':
        return this.onCrashAt(ev.id, ev.gen);
      case 'split':
        return this.onSplit();
      case 'decommission':
        return this.decommission(ev.id, ev.told);
    }
  }

  // ------------------------------------------------------------ nodes

  /** identity is what every store of the run records: the cluster and the bootstrap voters. */
  private identity(id: NodeId): { clusterId: string; nodeId: NodeId; members: NodeId[] } {
    return { clusterId: 'sim', nodeId: id, members: this.initial };
  }

  private start(s: Slot): void {
    const boot = s.disk.loadSync();
    const configured = this.identity(s.id);
    const check = checkStart({ stored: s.disk.identitySync(), configured, clusterState: this.now === 0 ? 'new' : 'existing', empty: isEmptyBoot(boot) });
    if (!check.ok && !this.opts.acceptEmptyStore) {
      if (!s.retired) this.counts.wipeRefusals++;
      s.retired = true;
      this.trace(`refuse ${s.id}: ${check.message.slice(0, 60)}`);
      return;
    }
    if (!check.ok || check.bootstrap) s.disk.bootstrapSync(configured);
    s.lostDisk = null;
    const k = this.knobs;
    const config: Config = {
      id: s.id,
      // A member that joined knows no configuration until a leader's log or snapshot tells it.
      peers: this.initial.includes(s.id) ? this.initial : [],
      electionTicks: k.electionTicks,
      heartbeatTicks: k.heartbeatTicks,
      preVote: k.preVote,
      checkQuorum: k.checkQuorum,
      maxInflightMsgs: k.maxInflightMsgs,
      maxSizePerMsg: k.maxSizePerMsg,
      maxUncommittedEntries: k.maxUncommittedEntries,
      random: () => s.random.float(),
    };
    s.node = this.guard(() => this.factory(config, boot));
    s.saving = null;
    s.proposals = new Map();
    s.applied = 0;
    s.state = 0;
    s.history = new Map([[0, 0]]);
    s.pausedUntil = 0;
    if (boot.snapshot !== null) this.restoreState(s, boot.snapshot, false);
    this.checker.resetNode(s.id);
    this.trace(`start ${s.id} gen ${s.gen} term ${boot.hardState.term} last ${(boot.snapshot?.meta.index ?? 0) + boot.entries.length}`);
    this.schedule(this.now + 1 + this.rng.int(0, TICK - 1), { kind: 'tick', id: s.id, gen: s.gen });
  }

  /** A paused member resumes: what arrived meanwhile is delivered, its clock and disk go on. */
  private onResume(id: NodeId, gen: number): void {
    const s = this.slot(id);
    if (s.gen !== gen) return;
    this.trace(`resume ${id}`);
    s.pausedUntil = 0;
    // Clients that waited on it retry their reads as soon as it answers again.
    if (s.node?.raft.role === 'leader' && this.phase === 'faults') {
      for (let k = 0; k < 3; k++) this.schedule(this.now + this.clientRng.int(0, 2 * TICK), { kind: 'readAt', id, gen });
    }
  }

  private onReadAt(id: NodeId, gen: number): void {
    const s = this.slot(id);
    if (s.gen !== gen || s.node === null || s.pausedUntil > this.now || this.phase !== 'faults') return;
    this.read(s);
    this.pump(s);
  }

  /** Whether an event for a member must wait: it is paused. Reschedules it for when it resumes. */
  private deferred(s: Slot, ev: Event): boolean {
    if (s.pausedUntil <= this.now) return false;
    // What piled up while paused is handled in no particular order after the resume.
    this.schedule(s.pausedUntil + this.net.int(0, 2 * TICK), ev);
    return true;
  }

  private crash(s: Slot): void {
    this.crashes++;
    const r = s.node?.raft;
    if (r?.role === 'leader' && r.confs.lastIndex() > r.log.committed) this.counts.confInterrupted++;
    this.trace(`crash ${s.id} saving ${s.saving !== null}`);
    s.node = null;
    s.saving = null;
    s.gen++;
    s.disk.crash();
    this.checker.resetNode(s.id);
  }

  private onTick(id: NodeId, gen: number): void {
    const s = this.slot(id);
    if (s.gen !== gen || s.node === null) return;
    if (this.deferred(s, { kind: 'tick', id, gen })) return;
    this.trace(`tick ${id}`);
    const node = s.node;
    this.guard(() => node.tick());
    this.pump(s);
    this.schedule(this.now + s.tickEvery, { kind: 'tick', id, gen });
  }

  /** onDeliver decodes what the network carried: a node never sees the sender's object, only its bytes. */
  private onDeliver(to: NodeId, wire: Uint8Array): void {
    const s = this.slot(to);
    if (this.deferred(s, { kind: 'deliver', to, wire })) return;
    const m = this.codec.decode(wire);
    const node = s.node;
    if (node === null) {
      this.trace(`lost ${describe(m)}`);
      return;
    }
    this.trace(`dlv ${describe(m)}`);
    // An answer from the member tells the leader where it stands: it may ask for a snapshot again.
    if (m.type === 'appResp') this.heard.set(`${m.to}>${m.from}`, this.now);
    const r = this.guard(() => node.step(m));
    if (!r.ok) throw new Violation('assertion', `${m.to} rejected a message from ${m.from}: ${r.message}`);
    this.pump(s);
  }

  /** pump runs the node's Ready loop until it waits on the disk or has nothing to do. */
  private pump(s: Slot): void {
    for (;;) {
      const node = s.node;
      if (node === null || s.saving !== null || !node.hasReady()) return;
      const rd = node.ready();
      this.trace(`rdy ${s.id} ${describeReady(rd)}`);
      this.noteSnapshotRequests(s, rd.messages);
      if (rd.softState?.role === 'leader') this.onNewLeader(s.id);
      this.send(this.early(rd));
      if (rd.hardState === null && rd.snapshot === null && rd.entries.length === 0) {
        this.finish(s, rd);
        continue;
      }
      s.saving = rd;
      const delay = rd.mustSync ? this.rng.int(1, s.fsyncMax) : 1;
      this.schedule(this.now + delay, { kind: 'saved', id: s.id, gen: s.gen });
      return;
    }
  }

  private onSaved(id: NodeId, gen: number): void {
    const s = this.slot(id);
    const rd = s.saving;
    if (s.gen !== gen || rd === null) return;
    if (this.deferred(s, { kind: 'saved', id, gen })) return;
    if (this.phase === 'faults' && (this.opts.faults ?? true) && this.faultRng.chance(0.002)) {
      // The store refused or tore the write: the member stops (a crash), it never goes on
      // as if the write had happened; what was not synced before is lost with it.
      this.counts.writeFailures++;
      this.trace(`write failed ${id}`);
      this.crash(s);
      this.schedule(this.now + this.faultRng.int(30, 300), { kind: 'restart', id: s.id, gen: s.gen });
      return;
    }
    this.trace(`saved ${id}`);
    s.disk.saveSync(rd);
    s.saving = null;
    this.finish(s, rd);
    this.pump(s);
  }

  /** early: the messages of a Ready the driver sends before its write. */
  private early(rd: Ready): Message[] {
    if (this.opts.sendBeforePersist) return rd.messages;
    return this.pipelined ? splitMessages(rd).early : [];
  }

  /** late: the messages of a Ready the driver sends once it is durable. */
  private late(rd: Ready): Message[] {
    if (this.opts.sendBeforePersist) return [];
    return this.pipelined ? splitMessages(rd).late : rd.messages;
  }

  /** finish does the caller's duties after the write: send, apply, advance, compact. */
  private finish(s: Slot, rd: Ready): void {
    const node = s.node as RawNode;
    this.send(this.late(rd));
    if (rd.snapshot !== null) this.restoreState(s, rd.snapshot, true);
    for (const e of rd.committedEntries) this.apply(s, e);
    for (const rs of rd.readStates) this.checker.onReadAnswered(s.id, rs);
    this.guard(() => node.advance(rd));
    const at = s.applied - this.knobs.compactTail;
    if (at - node.raft.log.offset >= this.knobs.compactEvery && s.history.has(at)) {
      const snap = this.guard(() => node.compact(at, encodeState(at, s.history.get(at)!, this.knobs.snapBytes)));
      if (snap !== null) {
        if (this.phase === 'faults' && (this.opts.faults ?? true) && this.faultRng.chance(0.01)) {
          // The process dies after compacting in memory, before the snapshot is written.
          this.counts.compactionCrashes++;
          this.trace(`crash ${s.id} between compaction and its write`);
          this.crash(s);
          this.schedule(this.now + this.faultRng.int(30, 300), { kind: 'restart', id: s.id, gen: s.gen });
          return;
        }
        s.disk.saveSnapshotSync(snap);
        this.trace(`compact ${s.id} ${snap.meta.index}`);
        for (const k of s.history.keys()) if (k < at) s.history.delete(k);
      }
    }
  }

  private apply(s: Slot, e: Entry): void {
    if (e.index !== s.applied + 1) {
      throw new Violation('stateMachineSafety', `${s.id} applies ${e.index} after ${s.applied}`);
    }
    s.applied = e.index;
    s.state = mix(s.state, e);
    s.history.set(e.index, s.state);
    this.checker.onApply(s.id, e, s.state);
    if (e.type === 'conf') this.onConfApplied(s, e);
    const key = entryKey(e);
    if (s.proposals.get(e.index) === key) {
      this.checker.onAck(e);
      this.trace(`ack ${s.id} ${e.index}`);
    }
    s.proposals.delete(e.index);
  }

  private restoreState(s: Slot, snap: Snapshot, transferred: boolean): void {
    const [applied, state] = decodeState(snap.data);
    if (applied !== snap.meta.index) throw new Violation('stateMachineSafety', `${s.id}: snapshot at ${snap.meta.index} holds state at ${applied}`);
    s.applied = applied;
    s.state = state;
    s.history = new Map([[applied, state]]);
    if (transferred) this.counts.snapshotInstalls++;
    this.checker.onRestore(s.id, applied, state);
    this.trace(`restore ${s.id} ${applied}`);
  }

  // ------------------------------------------------------------ network

  private send(ms: Message[]): void {
    for (const m of ms) {
      if (m.type === 'snap') {
        this.sendSnapshot(m);
        continue;
      }
      if (this.blocked.has(`${m.from}>${m.to}`) || this.net.chance(this.dropRate)) {
        this.trace(`drop ${describe(m)}`);
        continue;
      }
      const ev: Event = { kind: 'deliver', to: m.to, wire: this.codec.encode(m) };
      this.schedule(this.now + this.net.int(1, this.maxDelay), ev);
      if (this.net.chance(this.dupRate)) this.schedule(this.now + this.net.int(1, this.maxDelay), ev);
    }
  }

  /**
   * A snapshot goes as the node's transport sends it: the message carries the metadata
   * and the data follows in chunks, each taking network time, so a large one is slow. A
   * broken link or a receiver that is down fails the transfer; the sender's Raft learns
   * the outcome through reportSnapshot. A leader must never start a second transfer to
   * a member while one is in flight (that is the blind resend that never lets a slow
   * transfer finish).
   */
  private sendSnapshot(m: Message): void {
    const s = this.slot(m.from);
    const pair = `${m.from}>${m.to}`;
    const transfer = `${m.from}#${s.gen}>${m.to}`;
    if (this.transfers.has(transfer)) {
      this.trace(`snap ${describe(m)} ignored: a transfer is in flight`);
      return;
    }
    this.transfers.add(transfer);
    const chunks = 1 + Math.floor((m.snapshot?.data.length ?? 0) / this.knobs.snapChunkBytes);
    let delay = 0;
    for (let k = 0; k < chunks; k++) delay += this.net.int(1, this.maxDelay);
    const lost = this.blocked.has(pair) || this.net.chance(this.dropRate);
    // A broken stream is noticed at once (the connection fails), not at the end of the transfer.
    if (lost) delay = this.net.int(1, this.maxDelay);
    this.trace(`snap ${describe(m)} chunks ${chunks} ${lost ? 'lost' : `${delay}u`}`);
    this.schedule(this.now + delay, { kind: 'snapDone', from: m.from, gen: s.gen, to: m.to, wire: lost ? null : this.codec.encode(m), key: transfer });
  }

  /**
   * A leader asks for a snapshot when its Ready carries one (the send may come later,
   * after the write). Asking again to the same member before the transport reported
   * the last transfer or the member answered is the blind resend.
   */
  private noteSnapshotRequests(s: Slot, ms: readonly Message[]): void {
    // The messages of this Ready were made after the previous Ready of this node.
    const since = this.readyAt.get(s.id) ?? 0;
    this.readyAt.set(s.id, this.now);
    for (const m of ms) {
      if (m.type !== 'snap') continue;
      const pair = `${m.from}>${m.to}`;
      const tag = `${s.gen}#${m.term}`;
      const last = this.awaiting.get(pair);
      if (last !== undefined && last.tag === tag && (this.heard.get(pair) ?? -1) < last.since) {
        throw new Violation('snapshotTransfer', `${m.from} asked again for a snapshot to ${m.to} in term ${m.term} before hearing how the last one went`);
      }
      this.awaiting.set(pair, { tag, since });
    }
  }

  /** The end of a transfer: the receiver steps the message if it got all of it; the sender hears the outcome. */
  private onSnapDone(ev: { from: NodeId; gen: number; to: NodeId; wire: Uint8Array | null; key: string }): void {
    this.transfers.delete(ev.key);
    const pair = `${ev.from}>${ev.to}`;
    const receiver = this.slot(ev.to);
    const ok = ev.wire !== null && receiver.node !== null && receiver.pausedUntil <= this.now && !this.blocked.has(pair);
    if (ok) this.onDeliver(ev.to, ev.wire!);
    else this.counts.snapshotTransfersFailed++;
    const sender = this.slot(ev.from);
    if (sender.gen !== ev.gen || sender.node === null) return;
    this.heard.set(pair, this.now);
    this.trace(`snap report ${ev.from}>${ev.to} ${ok ? 'finish' : 'failure'}`);
    const node = sender.node;
    this.guard(() => node.reportSnapshot(ev.to, ok));
    this.pump(sender);
  }

  // ------------------------------------------------------------ client

  private onClient(): void {
    this.trace('client');
    if (this.phase !== 'faults') return;
    this.schedule(this.now + this.clientRng.int(3, 30), { kind: 'client' });
    // Clients mostly find a node that believes it leads (perhaps a deposed one).
    // A paused process answers nobody until it resumes.
    const up = Array.from(this.slots.values()).filter((v) => v.node !== null && v.pausedUntil <= this.now);
    if (up.length === 0) return;
    const leaders = up.filter((v) => v.node?.raft.role === 'leader');
    const s = this.clientRng.pick(leaders.length > 0 && this.clientRng.chance(0.8) ? leaders : up);
    const roll = this.clientRng.float();
    if (roll < 0.6) this.propose(s);
    else if (roll < 0.95) {
      // A read goes to every node that believes it leads: a deposed leader that has not
      // heard of its successor is exactly where a read may go back in time.
      const targets = leaders.length > 0 ? leaders : [s];
      for (const l of targets) {
        this.read(l);
        this.pump(l);
      }
    } else this.transfer(s);
    this.pump(s);
  }

  private propose(s: Slot): void {
    const count = this.clientRng.int(1, 4);
    const data = Array.from({ length: count }, () => payload(`p${++this.nextPayload}`));
    const r = (s.node as RawNode).propose(data);
    this.trace(`propose ${s.id} ${count} ${r.ok ? `${r.firstIndex}-${r.lastIndex}` : r.code}`);
    if (r.ok) data.forEach((d, k) => s.proposals.set(r.firstIndex + k, entryKey({ index: 0, term: r.term, data: d })));
  }

  private read(s: Slot): void {
    const context = `r${++this.nextPayload}`;
    const r = (s.node as RawNode).readIndex(payload(context));
    this.trace(`read ${s.id} ${context} ${r.ok ? 'ok' : r.code}`);
    if (r.ok) this.checker.onReadAsked(context);
  }

  private transfer(s: Slot): void {
    const to = this.clientRng.pick(this.ids);
    const r = (s.node as RawNode).transferLeadership(to);
    this.trace(`transfer ${s.id} ${to} ${r.ok ? 'ok' : r.code}`);
  }

  // ------------------------------------------------------------ membership

  /**
   * onMember: the operator changes the membership at a node that believes it leads (a
   * deposed one too). `eager` names a leader that has just won: the change reaches it
   * before its first commit.
   */
  private onMember(eager: NodeId | null, gen: number): void {
    if (this.phase !== 'faults') return;
    let s: Slot | null = null;
    if (eager === null) {
      this.schedule(this.now + this.memberRng.int(...(this.knobs.confGap as [number, number])), { kind: 'member', eager: null, gen: 0 });
      const leaders = [...this.slots.values()].filter((v) => v.node?.raft.role === 'leader' && v.pausedUntil <= this.now);
      if (leaders.length > 0) s = this.memberRng.pick(leaders);
    } else if (this.slot(eager).gen === gen) {
      s = this.slot(eager);
    }
    if (s === null || s.node?.raft.role !== 'leader' || s.pausedUntil > this.now) return;
    this.trace(`member ${s.id}${eager === null ? '' : ' eager'}`);
    const before = s.node.raft.conf;
    if (this.proposeChange(s)) {
      // Back to back: a second change at once, which the leader must refuse until the
      // first commits; the operator picks the most dangerous one there is.
      if (this.memberRng.chance(0.3)) this.proposeChange(s, this.dangerousChange(s, null, before));
      this.afterChange(s, before);
    }
    this.proposeRemovedId(s);
    this.pump(s);
  }

  /**
   * proposeRemovedId asks leader `s` to add back the id its configuration removed last,
   * as an operator restarting a removed member on its old directory would. Ids are never
   * reused: a leader that accepts fails the run. It draws no random number, so the
   * operator's other choices are those it would make without it.
   */
  private proposeRemovedId(s: Slot): void {
    const node = s.node;
    if (node === null || node.raft.role !== 'leader' || node.raft.conf.removed.length === 0) return;
    const id = node.raft.conf.removed[node.raft.conf.removed.length - 1] as NodeId;
    const r = node.proposeConfChange({ type: 'addLearner', node: id, context: `addr-${id}` });
    this.trace(`conf ${s.id} addLearner ${id} (removed) ${r.ok ? r.firstIndex : r.code}`);
    if (r.ok) throw new Violation('membership', `${s.id} accepted ${id} back as a learner at ${r.firstIndex}, but ${id} was removed: ids are never reused`);
    if (r.code === 'conf_change_refused') this.counts.reuseRefused++;
  }

  /**
   * proposeChange proposes the operator's next change at leader `s` (`chosen`, or one
   * chooseChange picks); returns whether the leader accepted it.
   */
  private proposeChange(s: Slot, chosen: ConfChange | null = null): boolean {
    const change = chosen ?? this.chooseChange(s);
    if (change === null) return false;
    // The leader is never removed while it leads: half the time the operator hands over
    // first, and removes it at the next leader; otherwise the refusal is the answer.
    if (change.type === 'remove' && change.node === s.id && this.memberRng.chance(0.5)) {
      this.handOver(s);
      return false;
    }
    const target = this.slot(change.node);
    if (!target.joined) this.provision(target);
    const r = (s.node as RawNode).proposeConfChange(change);
    this.trace(`conf ${s.id} ${change.type} ${change.node} ${r.ok ? r.firstIndex : r.code}`);
    if (!r.ok) {
      if (r.code === 'conf_change_refused') this.counts.confRefused++;
      return false;
    }
    if (change.type === 'addLearner') this.counts.addsProposed++;
    else if (change.type === 'promote') this.counts.promotesProposed++;
    else {
      this.counts.removesProposed++;
      target.leaving = true;
    }
    return true;
  }

  /**
   * chooseChange picks a change from the leader's configuration (the latest in its log):
   * add a joiner as a learner, promote a learner (one that caught up, or now and then one
   * that did not), or remove a member. A member down for good on a wiped disk is most
   * often removed first, as an operator replacing it would. Returns null when nothing fits.
   */
  private chooseChange(s: Slot): ConfChange | null {
    const r = (s.node as RawNode).raft;
    const conf = r.conf;
    const f = this.memberRng;
    const next = this.removeNext;
    if (next !== null && next !== s.id) {
      this.removeNext = null;
      if (this.canRemove(conf, next)) return { type: 'remove', node: next };
    }
    const options: [weight: number, choose: () => ConfChange | null][] = [];
    const joiner = this.joiner(conf);
    if (joiner !== null) options.push([conf.learners.length < 2 ? 3 : 1, () => ({ type: 'addLearner', node: joiner, context: `addr-${joiner}` })]);
    const voters = conf.voters.length;
    const learners = conf.learners.filter((id) => !this.lost(id));
    if (learners.length > 0) {
      options.push([3, () => {
        const id = f.pick(learners);
        const caughtUp = (r.prs.get(id)?.match ?? 0) >= r.log.committed;
        return caughtUp || f.chance(0.3) ? { type: 'promote', node: id } : null;
      }]);
    }
    const removable = members(conf).filter((id) => this.canRemove(conf, id));
    const wiped = removable.filter((id) => this.lost(id));
    const removableVoters = removable.filter((id) => conf.voters.includes(id));
    const removableLearners = removable.filter((id) => conf.learners.includes(id));
    if (wiped.length > 0) options.push([10, () => ({ type: 'remove', node: f.pick(wiped) })]);
    if (removableVoters.length > 0) options.push([voters >= 4 ? 3 : 1, () => ({ type: 'remove', node: f.pick(removableVoters) })]);
    if (removableLearners.length > 0) options.push([1, () => ({ type: 'remove', node: f.pick(removableLearners) })]);
    if (options.length === 0) return null;
    let roll = f.float() * options.reduce((n, [w]) => n + w, 0);
    for (const [weight, choose] of options) {
      roll -= weight;
      if (roll < 0) return choose();
    }
    return null;
  }

  /**
   * canRemove: a learner may always go. A voter may go when the voters left make a
   * quorum without the members down for good, and, until the run's one wiped disk has
   * happened, when at least three are left, so that losing a disk never takes the quorum
   * with it. (The library itself refuses only the last voter and the leader.)
   */
  private canRemove(conf: ConfState, id: NodeId): boolean {
    if (!conf.voters.includes(id)) return conf.learners.includes(id);
    const left = conf.voters.filter((v) => v !== id);
    if (left.length < (this.counts.wipes === 0 ? 3 : 1)) return false;
    return left.filter((v) => !this.lost(v)).length >= Math.floor(left.length / 2) + 1;
  }

  /** lost: the member's disk was wiped; it will be refused at its restart, or already was. */
  private lost(id: NodeId): boolean {
    const s = this.slot(id);
    return s.retired || s.lostDisk !== null;
  }

  /** joiner is an id to add as a learner: a started spare the configuration lacks, else a spare never started, or null. */
  private joiner(conf: ConfState): NodeId | null {
    const ids = this.ids.filter((id) => {
      const s = this.slot(id);
      return !this.initial.includes(id) && !members(conf).includes(id) && !s.leaving && !s.retired && !s.gone;
    });
    return ids.find((id) => this.slot(id).joined) ?? ids[0] ?? null;
  }

  /** provision starts a spare's process on an empty store that records its identity, as a new member's setup would. */
  private provision(s: Slot): void {
    s.joined = true;
    s.disk.bootstrapSync(this.identity(s.id));
    this.trace(`provision ${s.id}`);
    this.start(s);
  }

  /** handOver transfers leadership to another voter that is up, so that the next change may remove `s`. */
  private handOver(s: Slot): void {
    const node = s.node as RawNode;
    const others = node.raft.conf.voters.filter((id) => id !== s.id && this.slot(id).node !== null);
    if (others.length === 0) return;
    const to = this.memberRng.pick(others);
    const r = node.transferLeadership(to);
    this.trace(`hand over ${s.id} ${to} ${r.ok ? 'ok' : r.code}`);
    if (r.ok) this.removeNext = s.id;
  }

  /**
   * afterChange: what may strike a change just appended (with faults on); `before` is
   * the leader's configuration before it. The leader crashes before the change commits;
   * or it is cut off at once from everyone but perhaps one member, so that the change
   * reaches almost nobody and the next leader does not hold it; or the group splits in
   * two soon after, each side perhaps with another configuration. The cut is likeliest
   * when the change moved the voters away from an even number: that is the setting of the
   * 2015 correction, where a change made on the old voters by the next leader may have
   * a majority that does not overlap one of this change (see onTakeover).
   */
  private afterChange(s: Slot, before: ConfState): void {
    if (!(this.opts.faults ?? true) || this.now < this.quietUntil) return;
    const f = this.memberRng;
    const r = (s.node as RawNode).raft;
    // Changes that moved the voters by more than one (a leader that accepted a second
    // change before the first committed) may leave two majorities that do not overlap:
    // the adversary splits the group along them at once. One change at a time never
    // gives it the chance.
    const split = this.disjointQuorums(s.id, r.conf, null, before);
    if (split !== null) return this.splitAlong(split);
    const moved = r.conf.voters.join() !== before.voters.join();
    const cut = !moved ? 0.1 : before.voters.length % 2 === 0 ? 0.6 : 0.2;
    const roll = f.float();
    if (roll < 0.15) {
      this.schedule(this.now + f.int(1, 30), { kind: 'crashAt', id: s.id, gen: s.gen });
    } else if (roll < 0.15 + cut) {
      this.cutChange = { leader: s.id, gen: s.gen, term: r.term, index: r.confs.lastIndex() };
      this.cutOff(s.id);
      const peers = this.present().filter((id) => id !== s.id);
      const peer = peers.length > 0 && f.chance(0.5) ? f.pick(peers) : null;
      if (peer !== null) {
        this.blocked.delete(`${s.id}>${peer}`);
        this.blocked.delete(`${peer}>${s.id}`);
      }
      // No other fault meanwhile: the others elect a leader without the change.
      this.quietUntil = this.now + 2 * this.knobs.electionTicks * TICK;
      this.trace(`cut ${s.id} after its change${peer === null ? '' : `, but for ${peer}`}`);
    } else if (roll < 0.3 + cut) {
      this.schedule(this.now + f.int(1, 20), { kind: 'split' });
    }
  }

  /**
   * takingOver: `s` has just won a term after the latest leader that was cut off with a
   * change, and its log lacks that change, which is still uncommitted in the old
   * leader's log: two sets of voters are in play.
   */
  private takingOver(s: Slot): boolean {
    const c = this.cutChange;
    const r = s.node?.raft;
    if (c === null || r === undefined || c.leader === s.id || r.term <= c.term || r.log.term(c.index) === c.term) return false;
    const old = this.slot(c.leader).node?.raft;
    if (this.slot(c.leader).gen !== c.gen || old === undefined || old.log.term(c.index) !== c.term || old.log.committed >= c.index) return false;
    return old.conf.voters.join() !== r.conf.voters.join();
  }

  /**
   * onTakeover plays the setting of the 2015 correction to §4.1. Leader L1 appended a
   * change and was cut off before it spread; L2 won without it. The operator proposes a
   * change at L2 before L2 has committed anything (the library must refuse it), and the
   * network splits at once, before L2's first entries leave: L2 with a quorum of its
   * configuration on one side, L1 with a quorum of its own on the other, if the two
   * configurations allow such a split. With one change at a time after a commit of the
   * leader's term they hardly ever do, and then L1's side holds entries newer than L1's
   * log (an earlier leader's committed no-op); a library that accepted the change could
   * commit it on L2's side while L1 is elected on the other.
   */
  private onTakeover(id: NodeId, gen: number): void {
    const s = this.slot(id);
    const c = this.cutChange;
    if (this.phase !== 'faults' || c === null || s.gen !== gen || s.node?.raft.role !== 'leader' || !this.takingOver(s)) return;
    this.cutChange = null;
    const old = (this.slot(c.leader).node as RawNode).raft.conf;
    this.trace(`takeover ${id} [${s.node.raft.conf.voters}] from ${c.leader} [${old.voters}]`);
    this.proposeChange(s, this.dangerousChange(s, c.leader, old));
    const split = this.disjointQuorums(id, s.node.raft.conf, c.leader, old);
    if (split !== null) this.splitAlong(split);
    this.pump(s);
  }

  /** splitAlong cuts `side` off from the rest, and lets nothing else happen for three election timeouts. */
  private splitAlong(side: Set<NodeId>): void {
    this.blocked.clear();
    for (const a of side) for (const b of this.ids) if (!side.has(b)) this.blocked.add(`${a}>${b}`).add(`${b}>${a}`);
    this.quietUntil = this.now + 3 * this.knobs.electionTicks * TICK;
    this.trace(`split [${[...side]}] from the rest`);
  }

  /**
   * dangerousChange is a change at `s` whose configuration admits a quorum disjoint from
   * one of `old` (holding `oldLeader`, if not null), if the operator's choices hold one;
   * else null. An adversary picks it; one change at a time after a commit makes it harmless.
   */
  private dangerousChange(s: Slot, oldLeader: NodeId | null, old: ConfState): ConfChange | null {
    const conf = (s.node as RawNode).raft.conf;
    const candidates: ConfChange[] = [
      ...conf.learners.filter((id) => !this.lost(id)).map((id): ConfChange => ({ type: 'promote', node: id })),
      ...conf.voters.filter((id) => id !== s.id && this.canRemove(conf, id)).map((id): ConfChange => ({ type: 'remove', node: id })),
    ];
    const dangerous = candidates.filter((c) => {
      const next = applyChange(conf, c);
      return typeof next !== 'string' && this.disjointQuorums(s.id, next, oldLeader, old, false) !== null;
    });
    return dangerous.length === 0 ? null : this.memberRng.pick(dangerous);
  }

  /**
   * disjointQuorums draws a side holding `a` and a quorum of `confA` among the members
   * that are up, whose complement holds `b` (if not null) and a quorum of `confB`; or
   * null if the two configurations admit no such split.
   */
  private disjointQuorums(a: NodeId, confA: ConfState, b: NodeId | null, confB: ConfState, draw = true): Set<NodeId> | null {
    const up = this.present().filter((id) => this.slot(id).node !== null && this.slot(id).pausedUntil <= this.now);
    const quorumIn = (side: Set<NodeId>, conf: ConfState): boolean => conf.voters.filter((v) => side.has(v)).length >= Math.floor(conf.voters.length / 2) + 1;
    const sides: Set<NodeId>[] = [];
    for (let mask = 0; mask < 1 << up.length; mask++) {
      const side = new Set(up.filter((_, k) => (mask >> k) & 1));
      const rest = new Set(up.filter((id) => !side.has(id)));
      if (side.has(a) && (b === null || rest.has(b)) && quorumIn(side, confA) && quorumIn(rest, confB)) sides.push(side);
    }
    if (sides.length === 0) return null;
    return draw ? this.memberRng.pick(sides) : (sides[0] as Set<NodeId>);
  }

  /** onCrashAt crashes a leader in the middle of its change (if it is still the same incarnation). */
  private onCrashAt(id: NodeId, gen: number): void {
    const s = this.slot(id);
    if (this.phase !== 'faults' || s.gen !== gen || s.node === null) return;
    this.crash(s);
    this.schedule(this.now + this.memberRng.int(30, 600), { kind: 'restart', id: s.id, gen: s.gen });
  }

  private onSplit(): void {
    if (this.phase !== 'faults' || this.now < this.quietUntil) return;
    this.partition();
  }

  /**
   * onConfApplied follows a conf entry that `s` applied. The first member to apply it
   * shows the change committed. A member that applies its own removal has been told,
   * and the operator stops it; one that never hears of it is stopped three election
   * timeouts after the removal committed (the leader stops telling it after one).
   */
  private onConfApplied(s: Slot, e: Entry): void {
    const { change } = decodeConfEntry(e.data);
    if (e.index > this.confApplied) {
      this.confApplied = e.index;
      if (change.type === 'addLearner') this.counts.learnersAdded++;
      else if (change.type === 'promote') this.counts.learnersPromoted++;
      else {
        this.counts.membersRemoved++;
        this.removed.add(change.node);
        this.schedule(this.now + 3 * this.knobs.electionTicks * TICK, { kind: 'decommission', id: change.node, told: false });
      }
    }
    if (change.type === 'remove' && change.node === s.id && !s.gone) this.schedule(this.now, { kind: 'decommission', id: s.id, told: true });
  }

  /** decommission stops a removed member's process for good. */
  private decommission(id: NodeId, told: boolean): void {
    const s = this.slot(id);
    if (s.gone) return;
    s.gone = true;
    if (told) this.counts.removedTold++;
    this.trace(`decommission ${id}${told ? ' told' : ''}`);
    if (s.node === null) return;
    s.node = null;
    s.saving = null;
    s.gen++;
    this.checker.resetNode(id);
  }

  // ------------------------------------------------------------ faults

  /** The fault menu, with the weight of each; one is drawn at every fault event. */
  private readonly faults: [weight: number, inject: () => void][] = [
    [15, () => this.partition()],
    [10, () => this.isolate()],
    [10, () => this.oneWay()],
    [15, () => this.healLinks()],
    [5, () => this.stallDisk()],
    [7, () => this.degradeNetwork()],
    [23, () => this.crashOne(this.faultRng.chance(0.5))],
    [15, () => this.restartOne()],
    [8, () => this.pauseOne()],
    [2, () => this.wipeOne()],
  ];

  private onFault(): void {
    this.trace('fault');
    if (this.phase !== 'faults') return;
    this.schedule(this.now + this.faultRng.int(...this.knobs.faultGap), { kind: 'fault' });
    if (this.now < this.quietUntil) return;
    let roll = this.faultRng.float() * this.faults.reduce((n, [w]) => n + w, 0);
    for (const [weight, inject] of this.faults) {
      roll -= weight;
      if (roll < 0) return inject();
    }
  }

  /** partition splits the group into two sides that cannot reach each other. */
  private partition(): void {
    const f = this.faultRng;
    this.blocked.clear();
    const side = new Set(this.ids.filter(() => f.chance(0.5)));
    for (const a of this.ids) for (const b of this.ids) if (side.has(a) !== side.has(b)) this.blocked.add(`${a}>${b}`);
    this.trace(`partition [${[...side]}]`);
  }

  /** isolate cuts one node off, most often a leader, so that leadership moves on. */
  private isolate(): void {
    const f = this.faultRng;
    const a = f.chance(0.7) ? (this.someLeader() ?? f.pick(this.present())) : f.pick(this.present());
    this.cutOff(a);
    this.trace(`isolate ${a}`);
  }

  /** oneWay is an asymmetric fault: a can no longer reach b, but b still reaches a. */
  private oneWay(): void {
    const ids = this.present();
    if (ids.length < 2) return;
    const a = this.faultRng.pick(ids);
    const b = this.faultRng.pick(ids.filter((x) => x !== a));
    this.blocked.add(`${a}>${b}`);
    this.trace(`oneway ${a}>${b}`);
  }

  private healLinks(): void {
    this.blocked.clear();
    this.trace('heal links');
  }

  /** stallDisk slows (or restores) one disk: its node keeps stepping messages while a save waits. */
  private stallDisk(): void {
    const s = this.slot(this.faultRng.pick(this.ids));
    s.fsyncMax = this.faultRng.pick([6, 6, 60, 300]);
    this.trace(`disk ${s.id} fsync max ${s.fsyncMax}`);
  }

  /** degradeNetwork sets how often messages are dropped or duplicated, and how late (and so how reordered) they arrive. */
  private degradeNetwork(): void {
    const f = this.faultRng;
    this.dropRate = f.pick([0, 0.02, 0.1, 0.3]);
    this.dupRate = f.pick([0, 0.05, 0.2]);
    this.maxDelay = f.pick([8, 8, 30, 100]);
    this.trace(`net drop ${this.dropRate} dup ${this.dupRate} delay ${this.maxDelay}`);
  }

  /**
   * wipeOne loses a member's disk while it is down (once per run): its restart must be
   * refused, or it would forget its vote and the entries it acknowledged.
   */
  private wipeOne(): void {
    if (this.counts.wipes > 0) return;
    const s = this.slot(this.faultRng.pick(this.present()));
    if (s.node !== null) this.crash(s);
    s.lostDisk = s.disk;
    s.disk = new MemoryLogStore();
    this.counts.wipes++;
    this.trace(`wipe ${s.id}`);
    this.schedule(this.now + this.faultRng.int(30, 300), { kind: 'restart', id: s.id, gen: s.gen });
  }

  /** pauseOne stops a process (SIGSTOP) for longer than an election timeout, then resumes it. */
  private pauseOne(): void {
    const up = Array.from(this.slots.values()).filter((s) => s.node !== null && s.pausedUntil <= this.now);
    if (up.length === 0) return;
    // Most often the leader: it resumes believing it still leads, the deposed leader reads must not trust.
    const s = this.faultRng.chance(0.8) ? this.slot(this.someLeader() ?? this.faultRng.pick(up).id) : this.faultRng.pick(up);
    if (s.node === null || s.pausedUntil > this.now) return;
    this.pause(s);
  }

  private pause(s: Slot): void {
    const ticks = this.faultRng.int(2 * this.knobs.electionTicks, 5 * this.knobs.electionTicks);
    s.pausedUntil = this.now + ticks * TICK;
    this.counts.pauses++;
    // The classic stale leader: while the old one is stopped the others are healthy, elect
    // a successor and commit; then it resumes believing it still leads. No other fault
    // strikes meanwhile, so that the successor really gets elected.
    if (s.node?.raft.role === 'leader') {
      this.quietUntil = s.pausedUntil;
      this.blocked.clear();
      this.dropRate = 0;
    }
    this.trace(`pause ${s.id} ${ticks} ticks`);
    this.schedule(s.pausedUntil, { kind: 'resume', id: s.id, gen: s.gen });
  }

  private restartOne(): void {
    const down = Array.from(this.slots.values()).filter((s) => s.node === null && s.joined && !s.gone);
    if (down.length === 0) return;
    const s = this.faultRng.pick(down);
    this.onRestart(s.id, s.gen);
  }

  private cutOff(a: NodeId): void {
    for (const b of this.ids) if (b !== a) this.blocked.add(`${a}>${b}`).add(`${b}>${a}`);
  }

  /**
   * onNewLeader: sometimes cut a new leader off a few units after it wins, once it has
   * sent part of its log. Leaders that vanish mid-replication are what Figure 8 is made of.
   */
  private onNewLeader(id: NodeId): void {
    if (this.phase !== 'faults') return;
    const s = this.slot(id);
    if (this.knobs.confGap !== null) {
      // A leader cut off with its change, which this leader lacks: the setting of the
      // 2015 correction, played out at once, with no other fault meanwhile.
      if (this.takingOver(s) && this.memberRng.chance(0.8)) {
        this.schedule(this.now, { kind: 'takeover', id, gen: s.gen });
        return;
      }
      // Sometimes the operator's next change reaches a leader that has just won, before
      // its first commit, when a change of the previous leader may still sit
      // uncommitted in some logs: the library must refuse it.
      if (this.memberRng.chance(0.3)) this.schedule(this.now + this.memberRng.int(0, 5), { kind: 'member', eager: id, gen: s.gen });
    }
    if (!(this.opts.faults ?? true)) return;
    // Sometimes the new leader is stopped once it serves: the stale leader of the pause fault.
    if (this.faultRng.chance(0.6)) this.schedule(this.now + this.faultRng.int(2 * TICK, 8 * TICK), { kind: 'stale', id, gen: s.gen, term: s.node?.raft.term ?? 0 });
    if (!this.faultRng.chance(this.knobs.leaderCutRate)) return;
    this.schedule(this.now + this.faultRng.int(1, 60), { kind: 'cut', id });
  }

  /** Pauses a leader that still serves the term it won (see pauseOne). */
  private onStale(id: NodeId, gen: number, term: number): void {
    const s = this.slot(id);
    if (this.phase !== 'faults' || s.gen !== gen || s.node?.raft.role !== 'leader' || s.node.raft.term !== term || s.pausedUntil > this.now) return;
    this.pause(s);
  }

  /**
   * A second client that only reads, at every node that believes it leads: a deposed
   * leader that has not heard of its successor is where a read may go back in time.
   */
  private onReader(): void {
    if (this.phase !== 'faults') return;
    this.schedule(this.now + this.clientRng.int(3, 30), { kind: 'reader' });
    for (const s of this.slots.values()) {
      if (s.node?.raft.role !== 'leader' || s.pausedUntil > this.now) continue;
      this.read(s);
      this.pump(s);
    }
  }

  private onCut(id: NodeId): void {
    if (this.phase !== 'faults') return;
    this.cutOff(id);
    this.trace(`cut ${id}`);
  }

  /** crashOne crashes a node, preferring one with a write in flight when `midWrite`. */
  private crashOne(midWrite: boolean): void {
    const up = Array.from(this.slots.values()).filter((s) => s.node !== null);
    if (up.length === 0) return;
    const writing = up.filter((s) => s.saving !== null);
    const leaders = up.filter((s) => s.node?.raft.role === 'leader');
    let pool = up;
    if (midWrite && writing.length > 0) pool = writing;
    else if (leaders.length > 0 && this.faultRng.chance(0.5)) pool = leaders;
    const s = this.faultRng.pick(pool);
    this.crash(s);
    this.schedule(this.now + this.faultRng.int(30, 600), { kind: 'restart', id: s.id, gen: s.gen });
  }

  private onRestart(id: NodeId, gen: number): void {
    this.trace(`restart ${id}`);
    const s = this.slot(id);
    if (s.node !== null || s.gen !== gen || s.retired || s.gone) return;
    this.start(s);
  }

  private onHeal(): void {
    this.phase = 'healed';
    this.healedAt = this.now;
    this.blocked.clear();
    this.dropRate = 0;
    this.dupRate = 0;
    this.maxDelay = 8;
    for (const s of this.slots.values()) {
      s.fsyncMax = 6;
      s.pausedUntil = 0;
    }
    this.trace('heal all');
    // A member whose removal is committed is stopped for good now if it was not yet.
    for (const id of this.removed) this.decommission(id, false);
    for (const s of this.slots.values()) if (s.node === null && s.joined && !s.gone && !s.retired) this.start(s);
    this.schedule(this.now + TICK, { kind: 'probe' });
  }

  /** onProbe checks liveness after healing: a stable leader, then a new entry applied everywhere. */
  private onProbe(): void {
    this.trace('probe');
    const st = (): string => this.views().map((v) => `${v.id}:${v.node?.raft.role}/${v.node?.raft.term}/${v.node?.raft.log.committed}`).join(' ');
    if (this.leaderAt < 0 && this.now > this.leaderDeadline) {
      throw new Violation('liveness', `no stable leader within ${(this.leaderDeadline - this.healedAt) / TICK} ticks of healing [${st()}]`);
    }
    if (this.now > this.deadline) {
      throw new Violation('liveness', `no new entry applied on every node within ${(this.deadline - this.healedAt) / TICK} ticks of healing [${st()}]`);
    }
    // Replication counts as progress: after a change of leader nothing commits until its
    // own entry reaches a quorum, however long the backlog of earlier terms before it.
    const progress = this.views().reduce((n, v) => {
      const log = v.node?.raft.log;
      return log === undefined ? n : n + log.persisted + log.committed + log.applied;
    }, 0);
    // A snapshot on its way is work too: a large one takes long.
    if (progress > this.progress || this.progressAt < this.healedAt || this.transfers.size > 0) {
      this.progress = progress;
      this.progressAt = this.now;
    } else if (this.now - this.progressAt > this.stall) {
      throw new Violation('liveness', `nothing replicated, committed or applied for ${this.stall / TICK} ticks after healing [${st()}]`);
    }
    this.schedule(this.now + TICK, { kind: 'probe' });
    const m = this.marker;
    // Every member of the configuration committed with the marker must apply it; a spare
    // never added, or one whose addition was undone, is not waited for.
    const everywhere = (index: number): boolean => members(this.checker.conf).every((id) => this.slot(id).retired || this.slot(id).applied >= index);
    if (m !== null && this.checker.appliedKey(m.index) === m.key && everywhere(m.index)) {
      this.phase = 'done';
      this.doneAt = this.now;
      this.trace(`live ${m.index}`);
      return;
    }
    const leader = this.stableLeader();
    if (leader === null) return;
    if (this.leaderAt < 0) this.leaderAt = this.now;
    const log = leader.raft.log;
    if (m !== null && log.term(m.index) === m.term) return;
    const data = payload(`m${++this.nextPayload}`);
    const r = leader.propose([data]);
    this.trace(`marker ${leader.raft.id} ${r.ok ? r.firstIndex : r.code}`);
    if (r.ok) this.marker = { index: r.firstIndex, term: r.term, key: entryKey({ index: 0, term: r.term, data }) };
    this.pump(this.slot(leader.raft.id));
  }

  /** someLeader is a node that believes it leads, or null. */
  private someLeader(): NodeId | null {
    const leaders = Array.from(this.slots.values()).filter((s) => s.node?.raft.role === 'leader');
    return leaders.length === 0 ? null : this.faultRng.pick(leaders).id;
  }

  /** stableLeader is the leader every member of its configuration follows in the same term, or null. */
  private stableLeader(): RawNode | null {
    let leader: RawNode | null = null;
    for (const s of this.slots.values()) if (s.node?.raft.role === 'leader') leader = s.node;
    if (leader === null) return null;
    const { id, term } = leader.raft;
    for (const member of members(leader.raft.conf)) {
      const s = this.slot(member);
      if (s.retired) continue;
      if (s.node === null || s.node.raft.leader !== id || s.node.raft.term !== term) return null;
    }
    return leader;
  }

  /** present lists the ids whose process has been started and not stopped for good. */
  private present(): NodeId[] {
    return this.ids.filter((id) => this.slot(id).joined && !this.slot(id).gone);
  }

  // ------------------------------------------------------------ plumbing

  private slot(id: NodeId): Slot {
    return this.slots.get(id) as Slot;
  }

  /** guard turns a failed invariant inside the library into a violation. */
  private guard<T>(f: () => T): T {
    try {
      return f();
    } catch (err) {
      if (err instanceof RaftInvariantError) throw new Violation('assertion', err.message);
      throw err;
    }
  }

  private schedule(at: number, ev: Event): void {
    const item = { at, seq: this.seq++, ev };
    const q = this.queue;
    q.push(item);
    let k = q.length - 1;
    while (k > 0) {
      const parent = (k - 1) >> 1;
      if (!before(item, q[parent] as typeof item)) break;
      q[k] = q[parent] as typeof item;
      k = parent;
    }
    q[k] = item;
  }

  private pop(): { at: number; seq: number; ev: Event } | undefined {
    const q = this.queue;
    const top = q[0];
    const last = q.pop();
    if (top === undefined || last === undefined || q.length === 0) return top;
    let k = 0;
    for (;;) {
      const l = 2 * k + 1;
      if (l >= q.length) break;
      const r = l + 1;
      const child = r < q.length && before(q[r] as typeof last, q[l] as typeof last) ? r : l;
      if (!before(q[child] as typeof last, last)) break;
      q[k] = q[child] as typeof last;
      k = child;
    }
    q[k] = last;
    return top;
  }

  private trace(line: string): void {
    const full = `${this.now} ${line}`;
    this.traced += `${full}\n`;
    if (this.traced.length >= TRACE_HASHED_CHARS) this.hashTrace();
    this.opts.onTrace?.(full);
  }

  private traceHash(): string {
    this.hashTrace();
    return this.hash.digest('hex');
  }

  /** Hands the trace lines gathered so far to the hash (a call per line costs more than the hashing). */
  private hashTrace(): void {
    this.hash.update(this.traced);
    this.traced = '';
  }
}

/** Trace lines are hashed in pieces of about this many characters. */
const TRACE_HASHED_CHARS = 1 << 16;

function before(a: { at: number; seq: number }, b: { at: number; seq: number }): boolean {
  return a.at < b.at || (a.at === b.at && a.seq < b.seq);
}

function payload(s: string): Uint8Array {
  const out = new Uint8Array(s.length);
  for (let k = 0; k < s.length; k++) out[k] = s.charCodeAt(k);
  return out;
}

/** mix extends the state's hash chain with an applied entry (FNV-1a over term and data). */
function mix(state: number, e: Entry): number {
  let h = (state ^ 0x811c9dc5) >>> 0;
  h = Math.imul(h ^ e.term, 0x01000193);
  for (const b of e.data) h = Math.imul(h ^ b, 0x01000193);
  return h >>> 0;
}

/** A snapshot's data: the applied index and the state, padded to `bytes` (a large state to transfer). */
function encodeState(applied: number, state: number, bytes = 0): Uint8Array {
  const text = `${applied}:${state}:`;
  return payload(text.padEnd(Math.max(bytes, text.length), '.'));
}

function decodeState(data: Uint8Array): [number, number] {
  const text = new TextDecoder().decode(data);
  const [a, s] = text.split(':');
  return [Number(a), Number(s)];
}

function describe(m: Message): string {
  const rej = m.reject ? ` rej${m.rejectHint}` : '';
  return `${m.type} ${m.from}>${m.to} t${m.term} i${m.index} lt${m.logTerm} n${m.entries.length} c${m.commit}${rej}`;
}

function describeReady(rd: Ready): string {
  const hs = rd.hardState === null ? '-' : `${rd.hardState.term}/${rd.hardState.vote}/${rd.hardState.commit}`;
  const first = rd.entries[0]?.index ?? 0;
  const last = rd.entries[rd.entries.length - 1]?.index ?? 0;
  const ss = rd.softState === null ? '' : ` ss=${rd.softState.role}/${rd.softState.leader}`;
  return `hs=${hs} e=${first}-${last} snap=${rd.snapshot?.meta.index ?? '-'} m=${rd.messages.length} c=${rd.committedEntries.length}${ss}`;
}
