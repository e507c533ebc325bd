// Helpers for the unit tests: a seeded random source, a Raft built from a given log, and
// a synchronous in-memory network of RawNodes that honours the caller's duties (persist
// to a MemoryLogStore, then send, then apply, then advance) and delivers messages in
// order until the group is quiet. Partitions and drop filters let a test cut links.
import { Raft } from './raft.js';
import { RawNode } from './rawnode.js';
import { seededRandom } from './random.js';
import { MemoryLogStore } from './storage.js';
import type { Boot, ConfChange, Config, Entry, HardState, Message, NodeId, ReadState, Snapshot } from './types.js';

/** seeded is the deterministic random source of the unit tests. */
export const seeded = seededRandom;

export function config(id: NodeId, peers: NodeId[], over: Partial<Config> = {}): Config {
  return {
    id,
    peers,
    electionTicks: 10,
    heartbeatTicks: 1,
    preVote: false,
    checkQuorum: false,
    maxInflightMsgs: 256,
    maxSizePerMsg: 1 << 20,
    maxUncommittedEntries: 10_000,
    random: seeded(id.split('').reduce((h, c) => h * 31 + c.charCodeAt(0), 7)),
    ...over,
  };
}

export function bytes(s: string): Uint8Array {
  return new TextEncoder().encode(s);
}

export function text(b: Uint8Array): string {
  return new TextDecoder().decode(b);
}

/** ents builds entries with the given terms at indexes from `first`. */
export function ents(terms: number[], first = 1): Entry[] {
  return terms.map((term, k) => ({ index: first + k, term, data: bytes(`e${first + k}t${term}`) }));
}

export function boot(entries: Entry[] = [], hardState: Partial<HardState> = {}, snapshot: Snapshot | null = null): Boot {
  return { hardState: { term: 0, vote: null, commit: 0, ...hardState }, snapshot, entries };
}

/** newRaft builds a bare state machine whose log holds `entries` (all durable). */
export function newRaft(id: NodeId, peers: NodeId[], b: Boot = boot(), over: Partial<Config> = {}): Raft {
  return new Raft(config(id, peers, over), b);
}

/** takeMsgs drains the outgoing messages of a bare Raft. */
export function takeMsgs(r: Raft): Message[] {
  const out = r.msgs;
  r.msgs = [];
  return out;
}

export function msg(m: Partial<Message> & Pick<Message, 'type' | 'from' | 'to'>): Message {
  return { term: 0, logTerm: 0, index: 0, entries: [], commit: 0, reject: false, rejectHint: 0, ...m };
}

export interface TestMember {
  node: RawNode;
  store: MemoryLogStore;
  /** entries applied, in order (no-ops included), and the snapshots restored. */
  applied: Entry[];
  restored: Snapshot[];
  readStates: ReadState[];
}

export type NodeFactory = (cfg: Config, b: Boot) => RawNode;

/**
 * Network is a group of RawNodes joined by a synchronous, in-order network. `drain()`
 * runs every node's Ready loop and delivers messages until nothing moves.
 */
export class Network {
  readonly members = new Map<NodeId, TestMember>();
  /** links that drop everything: "a->b" */
  private readonly cut = new Set<string>();
  /** filter returns false to drop a message. */
  filter: (m: Message) => boolean = () => true;
  /** rewrite may change a message in flight (after filter). */
  rewrite: (m: Message) => Message = (m) => m;
  /** every message delivered, for assertions on traffic. */
  readonly delivered: Message[] = [];
  /** the members the group was bootstrapped with; `ids` also holds those that joined later. */
  private readonly initial: NodeId[];

  constructor(
    readonly ids: NodeId[],
    private readonly over: Partial<Config> = {},
    private readonly factory: NodeFactory = (c, b) => new RawNode(c, b),
  ) {
    this.initial = ids.slice();
    for (const id of ids) this.start(id, new MemoryLogStore());
  }

  /** join starts a member with an empty store that knows no configuration: it waits to be added. */
  join(id: NodeId): void {
    this.ids.push(id);
    this.start(id, new MemoryLogStore());
  }

  /** proposeConf proposes a membership change at `id` and runs the group until quiet. */
  proposeConf(id: NodeId, change: ConfChange): ReturnType<RawNode['proposeConfChange']> {
    const r = this.node(id).proposeConfChange(change);
    this.drain();
    return r;
  }

  member(id: NodeId): TestMember {
    const m = this.members.get(id);
    if (m === undefined) throw new Error(`no member ${id}`);
    return m;
  }

  node(id: NodeId): RawNode {
    return this.member(id).node;
  }

  /** start (re)starts a member from what its store holds. */
  start(id: NodeId, store: MemoryLogStore, over: Partial<Config> = {}): void {
    const b = store.loadSync();
    const peers = this.initial.includes(id) ? this.initial : [];
    const node = this.factory(config(id, peers, { ...this.over, ...over }), b);
    this.members.set(id, { node, store, applied: [], restored: b.snapshot === null ? [] : [b.snapshot], readStates: [] });
  }

  /** restart models a crash and restart: unsynced writes are lost, memory is rebuilt from the store. */
  restart(id: NodeId): void {
    const store = this.member(id).store;
    store.crash();
    this.start(id, store);
  }

  isolate(id: NodeId): void {
    for (const other of this.ids) {
      if (other === id) continue;
      this.cut.add(`${id}->${other}`);
      this.cut.add(`${other}->${id}`);
    }
  }

  cutLink(from: NodeId, to: NodeId): void {
    this.cut.add(`${from}->${to}`);
  }

  heal(): void {
    this.cut.clear();
    this.filter = () => true;
    this.rewrite = (m) => m;
  }

  tick(id: NodeId, n = 1): void {
    for (let k = 0; k < n; k++) this.node(id).tick();
  }

  /** tickAll ticks every running member `n` times, running the group after each round of ticks. */
  tickAll(n = 1, ids: NodeId[] = this.ids): void {
    for (let k = 0; k < n; k++) {
      for (const id of ids) this.node(id).tick();
      this.drain();
    }
  }

  /** compact snapshots a member at its applied index and stores the snapshot. */
  compact(id: NodeId): Snapshot | null {
    const mem = this.member(id);
    const applied = mem.node.status().applied;
    const snap = mem.node.compact(applied, bytes(`state@${applied}`));
    if (snap !== null) mem.store.saveSnapshotSync(snap);
    return snap;
  }

  /** campaign makes `id` start an election and runs the group until quiet. */
  campaign(id: NodeId): void {
    this.node(id).campaign();
    this.drain();
  }

  propose(id: NodeId, ...data: string[]): ReturnType<RawNode['propose']> {
    const r = this.node(id).propose(data.map(bytes));
    this.drain();
    return r;
  }

  /** drain runs Ready loops and delivers messages until the group is quiet. */
  drain(maxRounds = 10_000): void {
    for (let round = 0; round < maxRounds; round++) {
      const out: Message[] = [];
      for (const id of this.ids) out.push(...this.process(id));
      if (out.length === 0) return;
      for (const m of out) this.deliver(m);
    }
    throw new Error('network did not quiesce');
  }

  /** process runs one member's Ready loop once and returns the messages it would send. */
  process(id: NodeId): Message[] {
    const mem = this.member(id);
    const out: Message[] = [];
    while (mem.node.hasReady()) {
      const rd = mem.node.ready();
      mem.store.saveSync(rd);
      out.push(...rd.messages);
      if (rd.snapshot !== null) mem.restored.push(rd.snapshot);
      mem.applied.push(...rd.committedEntries);
      mem.readStates.push(...rd.readStates);
      mem.node.advance(rd);
    }
    return out;
  }

  deliver(sent: Message): void {
    if (this.cut.has(`${sent.from}->${sent.to}`) || !this.filter(sent)) return;
    const m = this.rewrite(sent);
    const target = this.members.get(m.to);
    if (target === undefined) return;
    this.delivered.push(m);
    const r = target.node.step(m);
    if (!r.ok) throw new Error(`step rejected: ${r.message}`);
  }

  /** leader is the leader of the highest term among the members, or null. */
  leader(): NodeId | null {
    let best: { id: NodeId; term: number } | null = null;
    for (const id of this.ids) {
      const st = this.node(id).status();
      if (st.role === 'leader' && (best === null || st.term > best.term)) best = { id, term: st.term };
    }
    return best?.id ?? null;
  }

  /** appliedData lists the non-empty applied entries of a member as text. */
  appliedData(id: NodeId): string[] {
    return this.member(id)
      .applied.filter((e) => e.data.length > 0 && e.type !== 'conf')
      .map((e) => text(e.data));
  }
}
