// Micro-benchmark of the Raft core in a simulated three-node group: an in-memory network
// and in-memory disks (MemoryLogStore; each synced save counts as one fsync), so the
// figures are those of the consensus code itself, not of LevelDB or gRPC.
//
// The leader proposes one batch of B entries per round while earlier batches are still
// in flight; a round runs every node's Ready loop once (persist, send, apply, advance)
// and delivers the messages. It prints committed entries per second (entries applied on
// the leader, wall clock) and fsyncs per committed entry, for the group and the leader.
//
// Usage: npm run bench -- raft
import type { Config, Message, MemoryLogStore as LogStore, RawNode as Node } from '@apl/raft';
import { ScriptArgs } from '../support/args.js';

new ScriptArgs('npm run bench -- raft (no options)', {});
const { MemoryLogStore, RawNode } = await import('@apl/raft');

const IDS = ['n1', 'n2', 'n3'];
const PAYLOAD_BYTES = 128;
/** entries committed per measured run, per batch size: enough for a stable figure. */
const RUNS: [batch: number, total: number][] = [
  [1, 30_000],
  [16, 300_000],
  [256, 1_000_000],
];
/** the application compacts every this many applied entries, as a server would. */
const COMPACT_EVERY = 50_000;

interface Member {
  node: Node;
  store: LogStore;
}

interface Figures {
  batch: number;
  entries: number;
  seconds: number;
  groupFsyncs: number;
  leaderFsyncs: number;
  messages: number;
}

function makeGroup(): Map<string, Member> {
  const group = new Map<string, Member>();
  let seed = 1;
  for (const id of IDS) {
    const store = new MemoryLogStore();
    let s = seed++;
    const config: Config = {
      id,
      peers: IDS,
      electionTicks: 10,
      heartbeatTicks: 1,
      preVote: true,
      checkQuorum: true,
      maxInflightMsgs: 256,
      maxSizePerMsg: 1 << 20,
      maxUncommittedEntries: 10_000,
      random: () => ((s = (s * 16807) % 2147483647) - 1) / 2147483646,
    };
    group.set(id, { node: new RawNode(config, store.loadSync()), store });
  }
  return group;
}

/** round runs every member's Ready loop once and delivers what they sent. Returns entries applied on `leader`. */
function round(group: Map<string, Member>, leader: string, sent: { count: number }): number {
  const outbox: Message[] = [];
  let applied = 0;
  for (const [id, m] of group) {
    while (m.node.hasReady()) {
      const rd = m.node.ready();
      m.store.saveSync(rd);
      for (const msg of rd.messages) outbox.push(msg);
      if (id === leader) for (const e of rd.committedEntries) if (e.data.length > 0) applied++;
      m.node.advance(rd);
      const st = m.node.status();
      if (st.applied - st.snapshotIndex >= COMPACT_EVERY) {
        const snap = m.node.compact(st.applied, new Uint8Array(8));
        if (snap !== null) m.store.saveSnapshotSync(snap);
      }
    }
  }
  sent.count += outbox.length;
  for (const msg of outbox) (group.get(msg.to) as Member).node.step(msg);
  return applied;
}

function measure(batch: number, total: number): Figures {
  const group = makeGroup();
  const leaderId = 'n1';
  const leader = group.get(leaderId) as Member;
  leader.node.campaign();
  const sent = { count: 0 };
  for (let k = 0; k < 10; k++) round(group, leaderId, sent);
  if (leader.node.status().role !== 'leader') throw new Error('n1 did not become leader');

  const payloads = Array.from({ length: batch }, (_, k) => new Uint8Array(PAYLOAD_BYTES).fill(k & 0xff));
  const syncsBefore = [...group.values()].map((m) => m.store.syncCount);
  const leaderSyncsBefore = leader.store.syncCount;
  sent.count = 0;
  let proposed = 0;
  let committed = 0;
  const started = process.hrtime.bigint();
  while (committed < total) {
    if (proposed < total && leader.node.propose(payloads).ok) proposed += batch;
    committed += round(group, leaderId, sent);
  }
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  const groupFsyncs = [...group.values()].reduce((n, m, k) => n + m.store.syncCount - (syncsBefore[k] as number), 0);
  return {
    batch,
    entries: committed,
    seconds,
    groupFsyncs,
    leaderFsyncs: leader.store.syncCount - leaderSyncsBefore,
    messages: sent.count,
  };
}

function main(): void {
  // A short warm-up so that the measured runs see optimized code.
  for (const [batch] of RUNS) measure(batch, 2_000);
  console.log(`raft core: 3 nodes, in-memory network and disk, ${PAYLOAD_BYTES}-byte entries, node ${process.version}`);
  console.log('batch  committed/s  fsyncs/entry (group)  fsyncs/entry (leader)  messages/entry  entries  seconds');
  for (const [batch, total] of RUNS) {
    const f = measure(batch, total);
    console.log(
      [
        String(f.batch).padStart(5),
        Math.round(f.entries / f.seconds).toLocaleString('en-US').padStart(11),
        (f.groupFsyncs / f.entries).toFixed(4).padStart(21),
        (f.leaderFsyncs / f.entries).toFixed(4).padStart(22),
        (f.messages / f.entries).toFixed(3).padStart(15),
        String(f.entries).padStart(8),
        f.seconds.toFixed(2).padStart(8),
      ].join('  '),
    );
  }
}

main();
