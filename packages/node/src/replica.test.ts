// Proves the compaction's hold for a member that installs the store: three replicas in
// one process, joined by a transport that delivers Raft messages between them. A
// compaction decided while no member installs anything, whose store sync is still
// running when a member begins to install, does not run once the sync is done; and the
// rule itself, holdsCompaction, holds for a live member installing or behind for
// SNAPSHOT_HOLD_INTERVALS intervals, and for a member behind whose entries the log still
// holds for snapshot_hold_entries past an interval. With the same replicas: a stopping primary hands
// over only to a member that is not stopping, and closing every member at once ends
// after an election timeout (not the commit timeout); a proposal made during a leadership transfer is recorded
// (by the new primary, or here if the transfer fails); a removed member refuses every
// read, and its id is never added back; a MEMBERS file a member cannot write is logged,
// and the change applies all the same; a follower far behind what it knows committed is
// not ready, and one a few entries behind is. A store received while one Raft took
// waits to be swapped in is refused, and one whose snapshot Raft does not take is dropped.
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import t, { type Test } from 'tap';
import { encodeOperation, type Operation } from '@apl/core';
import { ApiError } from './errors.js';
import { confState, type Message, type NodeId, type ProgressStatus } from '@apl/raft';
import { createLogger } from './log.js';
import { Metrics } from './metrics.js';
import { holdsCompaction, Replica, type Transport } from './replica.js';
import type { WrapDb } from './ledger-store.js';

// Three replicas elect a primary (a one-second election timeout) in every test but the first.
t.setTimeout(180_000);

const progress = (state: ProgressStatus['state'], recentActive: boolean, match = 1_000): ProgressStatus =>
  ({ match, next: match + 1, state, voter: true, paused: false, recentActive, inflight: 0 });

t.test('holdsCompaction: a live member installing a store or behind holds for five intervals; without snapshot_hold_entries, nothing else holds', async (t) => {
  const leader = progress('replicate', true);
  const holds = (p: Parameters<typeof holdsCompaction>[0], index: number) => holdsCompaction(p, index, 100, 20, 0);
  t.notOk(holds(null, 200), 'a follower has no progress to read');
  t.notOk(holds({ n1: leader, n2: progress('replicate', true) }, 120), 'no member installs or is behind');
  t.ok(holds({ n1: leader, n2: progress('snapshot', true) }, 120), 'a live member installs');
  t.notOk(holds({ n1: leader, n2: progress('snapshot', false) }, 120), 'a silent one does not hold the log');
  t.ok(holds({ n1: leader, n2: progress('replicate', true, 119) }, 120), 'a live member still needs entries below the index (it has just installed a store)');
  t.notOk(holds({ n1: leader, n2: progress('replicate', true, 120) }, 120), 'one that has them all does not hold');
  t.notOk(holds({ n1: leader, n2: progress('probe', false, 110) }, 120), 'nor does a silent member behind');
  t.ok(holds({ n1: leader, n2: progress('snapshot', true) }, 199), 'held below five intervals');
  t.notOk(holds({ n1: leader, n2: progress('snapshot', true) }, 200), 'released at five intervals');
  t.notOk(holds({ n1: leader, n2: progress('replicate', true, 0) }, 200), 'for a member behind too');
});

t.test('holdsCompaction: a member behind whose entries the log holds keeps them for snapshot_hold_entries past an interval', async (t) => {
  const leader = progress('replicate', true);
  // The last compaction at 100, an interval of 20 entries, a hold of 50: the log may grow to 170.
  const holds = (p: Parameters<typeof holdsCompaction>[0], index: number) => holdsCompaction(p, index, 100, 20, 50);
  t.ok(holds({ n1: leader, n2: progress('probe', false, 110) }, 120), 'a silent member behind (stopped, paused, cut off) holds the log');
  t.ok(holds({ n1: leader, n2: progress('probe', false, 100) }, 169), 'from the last compaction on, until the log has grown by the hold past an interval');
  t.notOk(holds({ n1: leader, n2: progress('probe', false, 100) }, 170), 'and no longer: a member gone for good costs a bounded tail');
  t.notOk(holds({ n1: leader, n2: progress('probe', false, 99) }, 120), 'a member the log no longer serves (it needs the store anyway) holds nothing');
  t.notOk(holds({ n1: leader, n2: progress('probe', false, 0) }, 120), 'nor one the primary has not heard from in its term');
  t.notOk(holdsCompaction({ n1: leader, n2: progress('probe', false, 0) }, 20, 0, 20, 50), 'not even before the first compaction, when the log still holds everything');
  t.ok(holdsCompaction({ n1: leader, n2: progress('probe', false, 3) }, 20, 0, 20, 50), 'where one heard from does hold it');
  t.notOk(holds({ n1: leader, n2: progress('snapshot', false, 110) }, 120), 'nor a silent one the store was being sent to');
  t.notOk(holds({ n1: leader, n2: progress('probe', false, 120) }, 120), 'nor one that has every entry below the index');
  // A member back and catching up is live again: a hold longer than five intervals (100) still holds for it.
  const back = { n1: leader, n2: progress('replicate', true, 110) };
  t.ok(holdsCompaction(back, 219, 100, 20, 100), 'a member back and catching up holds the log as long as while it was silent, past five intervals: compaction does not cut what it is taking');
  t.notOk(holdsCompaction(back, 220, 100, 20, 100), 'up to the same bound');
  t.ok(holdsCompaction({ n1: leader, n2: progress('snapshot', true) }, 150, 100, 20, 10), 'a smaller hold leaves the five intervals of a live member installing as they are');
});

interface Member {
  id: NodeId;
  replica: Replica;
  dir: string;
  events: { event?: string; level?: string; err?: string; index?: number; to?: string | null; done?: boolean; role?: string; leader?: string | null; msg?: string; reason?: string }[];
  /** while held, the store's synced batches wait in `waiting` until the test lets them go. */
  gate: { held: boolean; waiting: (() => void)[]; reached: number };
}

/**
 * Three replicas in this process, joined by a transport that loses what `down` and
 * `noSnapshots` say. With `forwardAnswersLate`, a follower's proposal is forwarded to
 * the primary, and the primary's answer reaches the follower only once the follower
 * has applied the entry itself (or after 5 s, as a refusal).
 */
async function openMembers(t: Test, clusterId: string, opts: { forwardAnswersLate?: boolean; forward?: boolean; commitTimeoutMs?: number; tickIntervalMs?: number; readyLagEntriesMax?: number; delivered?: (to: Replica, id: NodeId) => void } = {}) {
  const ids = ['n1', 'n2', 'n3'];
  const members = new Map<NodeId, Member>();
  /** messages to or from these members are lost. */
  const down = new Set<NodeId>();
  /** 'snap' messages to these members are lost: their store transfer never ends. */
  const noSnapshots = new Set<NodeId>();
  /** a message this says to lose is lost. */
  const lose: { when: (m: Message) => boolean } = { when: () => false };
  const transport: Transport = {
    send(messages: Message[]) {
      for (const m of messages) {
        if (down.has(m.from) || down.has(m.to)) continue;
        if (m.type === 'snap' && noSnapshots.has(m.to)) continue;
        if (lose.when(m)) continue;
        setImmediate(() => {
          const to = members.get(m.to);
          to?.replica.step(m);
          if (to) opts.delivered?.(to.replica, to.id);
        });
      }
    },
  };
  for (const id of ids) {
    const dir = mkdtempSync(join(tmpdir(), `apl-replica-${id}-`));
    const events: Member['events'] = [];
    const gate: Member['gate'] = { held: false, waiting: [], reached: 0 };
    const wrap: WrapDb = (db) => new Proxy(db, {
      get(target, prop, receiver) {
        const v = Reflect.get(target, prop, receiver) as unknown;
        if (typeof v !== 'function') return v;
        const f = (v as (...a: unknown[]) => Promise<unknown>).bind(target);
        if (prop !== 'batch') return f;
        return async (...args: unknown[]) => {
          const synced = (args[1] as { sync?: boolean } | undefined)?.sync === true;
          if (synced && gate.held) {
            gate.reached++;
            await new Promise<void>((r) => gate.waiting.push(r));
          }
          return f(...args);
        };
      },
    });
    const sink = new Writable({
      write(chunk: Buffer, _e, cb) {
        for (const l of chunk.toString().split('\n').filter(Boolean)) events.push(JSON.parse(l) as Member['events'][number]);
        cb();
      },
    });
    // A one-second election timeout (100 ticks of 10 ms): a loaded machine's stalls do not
    // change the primary under these tests, which are about compaction and forwarding.
    const replica = await Replica.open({
      id, peers: ids, peerContext: {}, clusterId, clusterState: 'new', dataDir: dir,
      raft: { tick_ms: 10, election_ticks: 100, heartbeat_ticks: 2, max_inflight_msgs: 64, max_size_per_msg: 1 << 20, max_uncommitted_entries: 10_000, wal_segment_bytes: 1 << 20 },
      tickIntervalMs: opts.tickIntervalMs ?? 3_600_000, commitTimeoutMs: opts.commitTimeoutMs ?? 5_000, proposalsInFlightMax: 1_000,
      snapshotIntervalEntries: 20, snapshotCatchupEntries: 5, snapshotHoldEntries: 0, readyLagEntriesMax: opts.readyLagEntriesMax ?? 1_000,
      cacheEntriesMax: 1_000, writeBufferBytes: 1 << 20, blockBytes: 4096,
      transport, log: createLogger('info', id, sink), metrics: new Metrics(), wrapDb: wrap,
      ...(opts.forwardAnswersLate ? {
        forward: async (leader: NodeId, bytes: Uint8Array) => {
          const at = members.get(leader)!.replica.appendForwarded(bytes);
          const deadline = Date.now() + 5_000;
          while (members.get(id)!.replica.store.position.applied < at.index) {
            if (Date.now() > deadline) throw new Error(`${id} did not apply ${at.index} in 5 s`);
            await new Promise((r) => setTimeout(r, 5));
          }
          return at;
        },
      } : {}),
      ...(opts.forward ? { forward: async (leader: NodeId, bytes: Uint8Array) => members.get(leader)!.replica.appendForwarded(bytes) } : {}),
    });
    members.set(id, { id, replica, dir, events, gate });
  }
  const all = [...members.values()];
  t.teardown(async () => {
    for (const m of all) {
      m.gate.held = false;
      for (const r of m.gate.waiting.splice(0)) r();
    }
    for (const m of all) await m.replica.close();
    for (const m of all) rmSync(m.dir, { recursive: true, force: true });
  });
  for (const m of all) m.replica.start();

  const until = async (what: string, ok: () => boolean, ms = 10_000) => {
    const deadline = Date.now() + ms;
    while (!ok()) {
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
      await new Promise((r) => setTimeout(r, 10));
    }
  };
  return { members, all, down, noSnapshots, lose, until };
}

/** Proposes parties on `leader` one after another, `n` a call, each with a new id. */
function partyWriter(leader: Member): (n: number) => Promise<void> {
  let parties = 0;
  return async (n) => {
    for (let k = 0; k < n; k++) await leader.replica.propose({ type: 'AddParty', v: 1, by: { name: 'ops', roles: ['operator'] }, id: `party-${++parties}` });
  };
}

/**
 * A member fallen behind a compaction: the snapshot message the primary then sends it
 * is kept (`m`), and from then on the member hears nothing, so that the test hands it
 * the stores itself.
 */
async function memberBehind(t: Test, clusterId: string) {
  const { all, down, lose, until } = await openMembers(t, clusterId);
  await until('a primary', () => all.some((m) => m.replica.isLeader()));
  const leader = all.find((m) => m.replica.isLeader())!;
  const behind = all.find((m) => m !== leader)!;
  const entries = partyWriter(leader);
  down.add(behind.id);
  await entries(40);
  await until('a compaction', () => leader.events.some((e) => e.event === 'log_compacted'));
  const snaps: Message[] = [];
  lose.when = (m) => {
    if (m.type === 'snap' && m.to === behind.id) snaps.push(m);
    return snaps.length > 0 && (m.to === behind.id || m.from === behind.id);
  };
  down.delete(behind.id);
  await until('a snapshot for the member', () => snaps.length > 0);
  const m = snaps[0]!;
  return { leader, behind, entries, until, m, index: m.snapshot!.meta.index };
}

t.test('a cluster member\'s data started as a standalone node is refused, saying how to start it, and counts no start', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'apl-replica-alone-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const open = (standalone: boolean) => Replica.open({
    id: 'n3', peers: standalone ? ['n3'] : ['n1', 'n2', 'n3'], peerContext: {}, clusterId: 'apl-alone', clusterState: 'new', dataDir: dir, standalone,
    raft: { tick_ms: 10, election_ticks: 100, heartbeat_ticks: 2, max_inflight_msgs: 64, max_size_per_msg: 1 << 20, max_uncommitted_entries: 10_000, wal_segment_bytes: 1 << 20 },
    tickIntervalMs: 3_600_000, commitTimeoutMs: 5_000, proposalsInFlightMax: 1_000, snapshotIntervalEntries: 20, snapshotCatchupEntries: 5, snapshotHoldEntries: 0,
    readyLagEntriesMax: 1_000, cacheEntriesMax: 1_000, writeBufferBytes: 1 << 20, blockBytes: 4096,
    transport: { send: () => undefined }, log: createLogger('silent', 'n3'), metrics: new Metrics(),
  });
  const member = await open(false);
  t.equal(member.starts, 1);
  await member.close();
  await t.rejects(open(true), {
    name: 'ConfigError',
    message: /^this data directory is n3's, a member of a cluster of 3 \(voters n1, n2, n3\), but its configuration's members name no other member \(a standalone node\)\. Alone it could not commit anything, nor reach the other members: start it with its cluster's members \(members, APL_MEMBERS\) and cluster_id, as the cluster runs it\./,
  }, 'refused at start, not failed at its first message');
  const again = await open(false);
  t.equal(again.starts, 2, 'the refused start was not counted, and the directory opens as the member it is');
  await again.close();
});

t.test('a compaction whose store sync ends after a member began installing is held', async (t) => {
  const { all, down, noSnapshots, until } = await openMembers(t, 'hold-test');
  await until('a primary', () => all.some((m) => m.replica.isLeader()));
  const leader = all.find((m) => m.replica.isLeader())!;
  const behind = all.find((m) => m !== leader)!;
  // Entries that read single records: a Tick's range read would wait for the store's held batches.
  const entries = partyWriter(leader);
  const compactions = () => leader.events.filter((e) => e.event === 'log_compacted').map((e) => e.index!);

  // A member falls behind a compaction.
  down.add(behind.id);
  noSnapshots.add(behind.id);
  await entries(40);
  await until('a first compaction', () => compactions().length >= 1);
  const first = compactions().at(-1)!;

  // The next compaction is decided while no member installs anything; its store sync waits.
  leader.gate.held = true;
  for (let k = 0; leader.gate.reached === 0; k++) {
    if (k === 100) throw new Error(`no second compaction was decided: ${JSON.stringify(compactions())}`);
    await entries(1);
  }
  t.notOk(compactions().some((i) => i > first), 'the second compaction waits for its sync');

  // The member returns and is sent the store: the transfer is under way (never finished here).
  down.delete(behind.id);
  await until('the member installing', () => {
    const p = leader.replica.status().progress?.[behind.id];
    return p?.state === 'snapshot' && p.recentActive;
  });

  // The sync ends: the compaction decided before the install began does not run.
  leader.gate.held = false;
  for (const r of leader.gate.waiting.splice(0)) r();
  await entries(10);
  await new Promise((r) => setTimeout(r, 200));
  t.same(compactions(), [first], `no compaction past ${first} while the member installs`);
  t.equal(leader.replica.status().progress?.[behind.id]?.state, 'snapshot', 'and the member still installs');

  // Once the log has grown by five intervals the hold ends, so that a stalled transfer cannot keep it growing.
  await entries(110);
  await until('a compaction after the hold', () => compactions().length >= 2);
  t.ok(compactions().at(-1)! > first, `compacted to ${compactions().at(-1)} after the hold`);
});

t.test('a store received while one Raft took waits to be swapped in is refused; one Raft does not take is dropped', async (t) => {
  const { leader, behind, entries, until, m, index } = await memberBehind(t, 'receive-test');
  const stores = () => readdirSync(join(behind.dir, 'ledger')).filter((n) => n.startsWith('store-')).sort();

  const first = await leader.replica.openSnapshot();
  const second = await leader.replica.openSnapshot();
  await behind.replica.installSnapshot(m, first.position, first.chunks);
  // Raft took the snapshot; the pump swaps its store in at its next turn. A second store now is refused.
  await t.rejects(behind.replica.installSnapshot(m, second.position, second.chunks), { message: new RegExp(`store received for the snapshot at ${index} is not installed yet`) });
  for await (const _ of second.chunks); // closes the primary's read snapshot
  // The old store is closed and removed after the switch, and that is logged too.
  await until('the store taken is installed', () => behind.events.some((e) => e.event === 'snapshot_installed' && e.index === index));
  await until('the store replaced is removed', () => behind.events.some((e) => e.event === 'store_retired' && e.index === index));
  t.equal(behind.replica.store.position.applied, first.position.applied, `installed at ${index}, at the position it was sent at`);
  t.equal(stores().length, 1, `one store on the disk: ${stores().join(', ')}`);

  // A store for a snapshot at or below what the member has committed: Raft does not take it.
  await entries(5);
  const third = await leader.replica.openSnapshot();
  t.ok(third.position.applied > first.position.applied, 'the primary has applied more since');
  await behind.replica.installSnapshot(m, third.position, third.chunks);
  t.ok(behind.events.some((e) => e.event === 'snapshot_not_taken' && e.index === index), 'dropped, and logged');
  t.equal(behind.replica.store.position.applied, first.position.applied, 'the store in use is the one installed');
  t.equal(stores().length, 1, 'and the received one is gone from the disk');
  // A later transfer is not refused for it.
  const fourth = await leader.replica.openSnapshot();
  await behind.replica.installSnapshot(m, fourth.position, fourth.chunks);
  t.equal(behind.events.filter((e) => e.event === 'snapshot_not_taken').length, 2, 'a later one is received (and dropped the same way)');
});

t.test('a transfer from a primary of a later term takes the place of a stalled one from an earlier term', async (t) => {
  const { leader, behind, until, m, index } = await memberBehind(t, 'later-term-test');

  // The first transfer stalls after its first chunk, as a paused sender's does.
  const first = await leader.replica.openSnapshot();
  let release: (() => void) | null = null;
  const stalled = (async function* () {
    let sent = 0;
    for await (const c of first.chunks) {
      yield c;
      if (++sent === 1) await new Promise<void>((r) => (release = r));
    }
  })();
  const earlier = behind.replica.installSnapshot(m, first.position, stalled);
  earlier.catch(() => undefined);
  await until('the first transfer stalls', () => release !== null);
  t.teardown(() => release?.());

  // Another from the same term is refused, as before.
  const same = await leader.replica.openSnapshot();
  await t.rejects(behind.replica.installSnapshot(m, same.position, same.chunks), { message: /a store is being received already/ });
  for await (const _ of same.chunks); // closes the primary's read snapshot

  // One from a later term (a new primary's) takes the stalled one's place, and is installed.
  const later: Message = { ...m, term: m.term + 1 };
  const second = await leader.replica.openSnapshot();
  await behind.replica.installSnapshot(later, second.position, second.chunks);
  await t.rejects(earlier, { message: new RegExp(`a transfer from ${m.from} in term ${m.term + 1} takes the place of this one, from term ${m.term}`) });
  await until('the later store is installed', () => behind.events.some((e) => e.event === 'snapshot_installed' && e.index === index));
  t.equal(behind.replica.store.position.applied, second.position.applied, 'at the position it was sent at');
  t.equal(behind.replica.status().term, m.term + 1, "and the member follows the later term's primary");
});

t.test('a forward answered after the follower applied its entry is answered from the result it kept; a primary keeps none', async (t) => {
  const { all, until } = await openMembers(t, 'late-forward-test', { forwardAnswersLate: true });
  const party = (id: string): Operation => ({ type: 'AddParty', v: 1, by: { name: 'ops', roles: ['operator'] }, id });
  // The results a member keeps for forwards (private): those applied while it waited on one.
  const kept = (m: Member) => [...(m.replica as unknown as { recent: Map<number, { applied: unknown }> }).recent.values()].filter((r) => r.applied !== null).length;
  await until('a primary', () => all.some((m) => m.replica.isLeader()));
  const primary = all.find((m) => m.replica.isLeader())!;
  const follower = all.find((m) => m !== primary)!;
  // A follower learns who leads from the leader's first message; until then it forwards nowhere.
  await until('the follower knows the primary', () => follower.replica.status().leader === primary.id);

  const answers = await Promise.all([0, 1, 2, 3, 4].map((k) => follower.replica.propose(party(`late-${k}`))));
  t.same(answers.map((a) => a.result.ok), [true, true, true, true, true], 'each forwarded proposal is answered with its own result');
  t.equal(new Set(answers.map((a) => a.index)).size, 5, 'at five indexes');
  t.ok(kept(follower) >= 5, `the follower kept the results applied while it waited (${kept(follower)})`);
  await primary.replica.propose(party('local'));
  t.equal(kept(primary), 0, 'the primary, which forwards nothing, keeps no result past its answer');
});

t.test('a linearizable read whose request to the primary was lost is asked again, not left to time out', async (t) => {
  const { all, lose, until } = await openMembers(t, 'read-again-test', { commitTimeoutMs: 20_000 });
  await until('a primary', () => all.some((m) => m.replica.isLeader()));
  const primary = all.find((m) => m.replica.isLeader())!;
  const follower = all.find((m) => m !== primary)!;
  // Seen, not only known to Raft: a member that sees a new primary asks its waiting reads again at once.
  await until('the follower has seen the primary', () => follower.events.some((e) => e.event === 'role_changed' && e.leader === primary.id));
  // The follower's first request for a read index is lost, as on a link just being made again.
  let lost = 0;
  lose.when = (m) => m.type === 'readIndex' && m.from === follower.id && lost++ === 0;
  const started = Date.now();
  await follower.replica.readBarrier();
  const took = Date.now() - started;
  t.equal(lost, 2, 'the first request was lost, and the read asked again');
  // One election timeout here is 1 s (100 ticks of 10 ms); the commit timeout, 20 s.
  t.ok(took >= 900 && took < 10_000, `answered ${took} ms after it asked: after an election timeout, long before the commit timeout`);
});

t.test('operations forwarded to the primary apply as their bytes say, also where a new primary replaced them', async (t) => {
  const { all, down, until } = await openMembers(t, 'forward-test');
  const party = (id: string): Operation => ({ type: 'AddParty', v: 1, by: { name: 'ops', roles: ['operator'] }, id });
  const appliedEverywhere = (index: number) => until(`every member applied ${index}`, () => all.every((m) => m.replica.store.position.applied >= index));
  const hashes = () => all.map((m) => m.replica.store.position.stateHash);
  // The operations the primary keeps while they wait for their apply (private): none once applied.
  const kept = (m: Member) => (m.replica as unknown as { forwarded: Map<number, unknown> }).forwarded.size;

  await until('a primary', () => all.some((m) => m.replica.isLeader()));
  const first = all.find((m) => m.replica.isLeader())!;
  for (let k = 0; k < 12; k++) {
    if (k % 3 === 2) await first.replica.propose(party(`local-${k}`));
    else first.replica.appendForwarded(encodeOperation(party(`forwarded-${k}`)));
  }
  await first.replica.propose(party('local-last'));
  await appliedEverywhere(first.replica.store.position.applied);
  t.equal(new Set(hashes()).size, 1, 'every member holds the same state');
  t.equal(kept(first), 0, 'the primary keeps no forwarded operation once applied');

  // The primary, cut off, appends forwarded operations no one else receives; another
  // member becomes primary and commits its own entries at those indexes.
  down.add(first.id);
  const stale = [0, 1, 2].map((k) => first.replica.appendForwarded(encodeOperation(party(`stale-${k}`))));
  t.equal(kept(first), 3, 'kept until applied');
  const others = all.filter((m) => m !== first);
  await until('a new primary', () => others.some((m) => m.replica.isLeader()));
  const next = others.find((m) => m.replica.isLeader())!;
  for (let k = 0; k < 4; k++) await next.replica.propose(party(`replacing-${k}`));
  t.ok(next.replica.status().commit > stale[2]!.index, 'the new primary committed past the stale indexes');

  // Back, the old primary takes the new entries: none of its stale operations applies.
  down.delete(first.id);
  const end = next.replica.status().commit;
  await appliedEverywhere(end);
  t.equal(new Set(hashes()).size, 1, 'every member holds the same state, the old primary too');
  t.equal(kept(first), 0, 'and it keeps nothing');
});

/** The primary, once every member follows it. */
async function primaryOf(all: Member[], until: (what: string, ok: () => boolean, ms?: number) => Promise<void>): Promise<Member> {
  await until('a primary every member follows and has answered', () => {
    const leader = all.find((m) => m.replica.isLeader());
    const progress = Object.entries(leader?.replica.status().progress ?? {}).filter(([id]) => id !== leader?.id);
    return leader !== undefined && all.every((m) => m.replica.status().leader === leader.id) && progress.length === 2 && progress.every(([, p]) => p.recentActive);
  });
  return all.find((m) => m.replica.isLeader())!;
}

const catching = (f: () => void): unknown => {
  try {
    f();
    return null;
  } catch (err) {
    return err;
  }
};
const handOvers = (m: Member) => m.events.filter((e) => e.event === 'leadership_handed_over');
const party = (id: string): Operation => ({ type: 'AddParty', v: 1, by: { name: 'ops', roles: ['operator'] }, id });

t.test('a follower far behind what it knows committed is not ready until within readyLagEntriesMax; a few entries behind, it is', async (t) => {
  for (const max of [10, 1_000]) {
    /** the follower's readiness and lag right after each message it took. */
    const seen: { ready: boolean; lag: number }[] = [];
    let watched: NodeId | null = null;
    const { all, down, until } = await openMembers(t, `ready-lag-${max}`, {
      readyLagEntriesMax: max,
      delivered: (r, id) => {
        if (id !== watched) return;
        const s = r.status();
        seen.push({ ready: r.ready(), lag: s.commit - r.store.position.applied });
      },
    });
    const primary = await primaryOf(all, until);
    const follower = all.find((m) => m !== primary)!;
    await until('the follower knows the primary and has applied all', () => follower.replica.ready() && follower.replica.status().leader === primary.id);
    // Cut off for less than an election timeout, while 40 entries commit without it.
    down.add(follower.id);
    for (let k = 0; k < 40; k++) await primary.replica.propose(party(`behind-${max}-${k}`));
    watched = follower.id;
    down.delete(follower.id);
    await until('the follower has applied all again', () => follower.replica.status().commit >= primary.replica.status().commit && follower.replica.store.position.applied >= primary.replica.status().commit);
    const far = seen.filter((x) => x.lag > 10);
    t.ok(far.length > 0, `max ${max}: the follower learned of entries more than 10 behind its store (lags seen: ${seen.map((x) => x.lag).join(', ')})`);
    if (max === 10) t.ok(far.every((x) => !x.ready), 'more than 10 behind: not ready');
    else t.ok(seen.every((x) => x.ready), 'within 1,000: ready all along, as a follower under load is');
    t.ok(follower.replica.ready(), `max ${max}: ready once it has applied them`);
    for (const m of all) await m.replica.close();
  }
});

t.test('a primary that stops alone hands leadership to a follower, and says so', async (t) => {
  const { all, until } = await openMembers(t, 'handover-test');
  const primary = await primaryOf(all, until);
  await primary.replica.close();
  t.match(handOvers(primary), [{ done: true }], 'leadership_handed_over, done');
  const others = all.filter((m) => m !== primary);
  await until('a new primary', () => others.some((m) => m.replica.isLeader()), 2_000);
  t.equal(others.find((m) => m.replica.isLeader())!.id, handOvers(primary)[0]!.to, 'to the member it named');
});

t.test('a primary asked to remove itself hands leadership over first, and says so', async (t) => {
  const { all, until } = await openMembers(t, 'handover-removal-test');
  const primary = await primaryOf(all, until);
  await t.rejects(primary.replica.appendConfChange({ type: 'remove', node: primary.id }), { message: 'not the primary', leader: /^n\d$/ }, 'the change is for the new primary to make');
  const [handed] = handOvers(primary);
  t.match(handed, { level: 'info', done: true, reason: 'removal', msg: new RegExp(`^leadership handed over to n\\d, which is asked to remove ${primary.id}$`) }, 'leadership_handed_over, with why');
  t.equal(handed!.leader, handed!.to, 'to the member it named');
});

t.test('a stopping member takes no leadership: the primary stopping beside it gives up after an election timeout', async (t) => {
  const { all, until } = await openMembers(t, 'handover-stopping-test');
  const primary = await primaryOf(all, until);
  const followers = all.filter((m) => m !== primary);
  // The followers begin to stop (a node does this first, while its planes drain); they still run.
  await Promise.all(followers.map((m) => m.replica.handOver()));
  await primary.replica.close();
  t.match(handOvers(primary), [{ done: false }], 'the hand-over did not complete');
  t.match(handOvers(primary)[0]!.msg, /abandoned after an election timeout/, 'and the log says why');
  t.ok(followers.every((m) => !m.replica.isLeader()), 'no stopping follower took leadership');
  t.same(followers.map((m) => handOvers(m).length), [0, 0], 'a follower has nothing to hand over');
});

t.test('a member is not ready from the moment it begins to stop; a transfer that leaves no primary is not reported done', async (t) => {
  const { all, lose, until } = await openMembers(t, 'handover-nobody-test');
  const primary = await primaryOf(all, until);
  const [to, other] = all.filter((m) => m !== primary) as [Member, Member];
  // `to` is the more up-to-date follower, so the primary picks it: `other`'s acknowledgements are lost a while.
  lose.when = (m) => m.from === other.id && m.type === 'appResp';
  for (let k = 0; k < 3; k++) await primary.replica.propose(party(`ahead-${k}`));
  lose.when = () => false;
  await until('every member applied them', () => all.every((m) => m.replica.ready() && m.replica.store.position.applied >= primary.replica.status().commit));
  t.ok(other.replica.ready(), 'a follower is ready');
  await other.replica.handOver();
  t.notOk(other.replica.ready(), 'and not once it begins to stop, though it still runs');
  // The transferee campaigns, and the primary steps down for its term, but no vote reaches it: nobody leads.
  lose.when = (m) => m.type === 'voteResp';
  const handing = primary.replica.handOver();
  t.notOk(primary.replica.ready(), 'the primary is not ready while it hands over');
  await handing;
  t.equal(primary.replica.status().leader, null, 'no primary is known');
  t.match(handOvers(primary), [{ to: to.id, done: false, leader: null }], 'the hand-over is not reported done');
  t.match(handOvers(primary)[0]!.msg, /ended with no primary known/, 'and the log says so');
});

t.test('closing every member at once ends after an election timeout, not after the commit timeout', async (t) => {
  // The election timeout is 1 s here, and the hand-over waits at most two. The commit
  // timeout, which the hand-over used to wait out, is made a minute, so that the bound
  // below tells the two apart with room for a loaded machine.
  const { all, until } = await openMembers(t, 'stop-all-test', { commitTimeoutMs: 60_000 });
  const primary = await primaryOf(all, until);
  const started = Date.now();
  await Promise.all(all.map((m) => m.replica.close()));
  const ms = Date.now() - started;
  t.match(handOvers(primary), [{ done: false }], 'the primary found no member to take over, and said so');
  t.ok(ms < 20_000, `every close resolved in ${ms} ms`);
});

t.test('a proposal made while the primary transfers leadership is recorded by the new primary', async (t) => {
  const { all, until } = await openMembers(t, 'transfer-propose-test', { forward: true });
  const primary = await primaryOf(all, until);
  const to = all.find((m) => m !== primary)!;
  primary.replica.transferLeadership(to.id);
  // Raft refuses proposals from now until the transfer ends; this one waits for it.
  const answer = await primary.replica.propose(party('during-transfer'));
  t.ok(answer.result.ok, 'recorded');
  t.ok(to.replica.isLeader(), `${to.id} leads`);
  t.equal(primary.replica.status().leader, to.id, 'and the old primary forwarded to it');
});

t.test('a proposal made on the old primary after its hand-over, before the new primary is heard from, waits for it', async (t) => {
  const { all, lose, until } = await openMembers(t, 'after-transfer-test', { forward: true });
  const primary = await primaryOf(all, until);
  const to = all.find((m) => m !== primary)!;
  // The new primary's appends and heartbeats to the old one are lost for now: the old one
  // steps down on the vote request, and then knows no primary.
  lose.when = (m) => m.from === to.id && m.to === primary.id && (m.type === 'app' || m.type === 'heartbeat');
  primary.replica.transferLeadership(to.id);
  await until('the old primary stepped down, knowing no primary', () => primary.events.some((e) => e.event === 'role_changed' && e.role === 'follower' && e.leader === null));
  await until('the new primary leads', () => to.replica.isLeader());
  let settled = false;
  const answering = primary.replica.propose(party('after-hand-over')).finally(() => (settled = true));
  await new Promise((r) => setTimeout(r, 200));
  t.notOk(settled, 'the proposal waits: it is neither refused nor answered while no primary is known');
  lose.when = () => false;
  const answer = await answering;
  t.ok(answer.result.ok, 'recorded once the new primary was heard from');
  t.equal(primary.replica.status().leader, to.id, 'through the new primary');
});

t.test('a ledger tick the primary cannot commit is logged as a warning with its code, and the clock goes on', async (t) => {
  const { all, down, until } = await openMembers(t, 'tick-failed-test', { commitTimeoutMs: 200, tickIntervalMs: 50 });
  const primary = await primaryOf(all, until);
  await until('a tick committed', () => primary.replica.status().commit > 1 && primary.replica.store.position.tick > 0);
  for (const m of all) if (m !== primary) down.add(m.id);
  await until('a tick not committed', () => primary.events.some((e) => e.event === 'tick_failed'));
  const line = primary.events.find((e) => e.event === 'tick_failed')!;
  t.match(line, { level: 'warn', err: 'commit_unavailable', msg: 'ledger tick not committed; the next one carries the clock on' }, 'a warning naming the error code, not the agent-facing message');
  down.clear();
  const before = primary.replica.store.position.tick;
  await until('ticks commit again', () => all.some((m) => m.replica.isLeader() && m.replica.store.position.tick > before));
  t.pass('the clock went on once a quorum was back');
});

t.test('a proposal made while a transfer fails is recorded by the primary, which still leads', async (t) => {
  const { all, down, until } = await openMembers(t, 'transfer-fails-test', { forward: true });
  const primary = await primaryOf(all, until);
  const to = all.find((m) => m !== primary)!;
  down.add(to.id);
  primary.replica.transferLeadership(to.id);
  const answer = await primary.replica.propose(party('failed-transfer'));
  t.ok(answer.result.ok, 'recorded once the transfer was abandoned');
  t.ok(primary.replica.isLeader(), 'by the primary, which still leads');
});

t.test('a removed member refuses every read, and its id is never added back', async (t) => {
  const { all, until } = await openMembers(t, 'removed-test');
  const primary = await primaryOf(all, until);
  const gone = all.find((m) => m !== primary)!;
  const stays = all.find((m) => m !== primary && m !== gone)!;
  // Its role follows the configuration in force, which is the latest in its log: a
  // learner whose removal is there is removed, not the follower Raft calls it.
  const now = gone.replica.status();
  const others = all.filter((m) => m !== gone).map((m) => m.id);
  t.equal(gone.replica.role({ ...now, role: 'follower', conf: confState(others, [gone.id]) }), 'learner', 'a learner, while the configuration has it as one');
  t.equal(gone.replica.role({ ...now, role: 'follower', conf: confState(others, [], {}, [gone.id]) }), 'removed', 'removed, once the configuration has its removal');
  await primary.replica.changeMembership({ type: 'remove', node: gone.id });
  await until('the removed member applied its removal', () => /removed/.test(gone.replica.membership() ?? ''));
  t.same(gone.events.filter((e) => e.event === 'role_changed').map((e) => e.role).slice(-1), ['removed'], 'and it logged its last change of role as its removal');

  const removedRead = { body: { error: 'gateway_error', message: /^This member was removed from the cluster; .*Send to another replica\.$/ } };
  t.match(await gone.replica.readBarrier().then(() => null, (e: unknown) => e), removedRead, 'a linearizable read is refused, saying why');
  t.match(catching(() => gone.replica.refuseRead()), removedRead, 'and so is a local one (the planes ask refuseRead)');
  t.doesNotThrow(() => stays.replica.refuseRead(), 'a member in force serves reads');
  await stays.replica.readBarrier();

  const before = primary.replica.status();
  const err = await primary.replica.changeMembership({ type: 'addLearner', node: gone.id, context: '' }).catch((e: unknown) => e);
  t.ok(err instanceof ApiError, 'adding the removed id back is refused');
  t.equal((err as ApiError).status, 409);
  t.match((err as ApiError).body, { error: 'invalid_transition', message: `The membership change was refused: ${gone.id} was removed from the cluster and ids are never reused: add the member under a new id.` });
  const after = primary.replica.status();
  t.same([after.lastIndex, after.conf], [before.lastIndex, before.conf], 'nothing was appended, the configuration is unchanged');
  t.same(after.conf.removed, [gone.id], 'which remembers the removed id');
});

t.test('a MEMBERS file the member cannot write is logged, and the membership change applies all the same', async (t) => {
  const { all, until } = await openMembers(t, 'members-file-test');
  const primary = await primaryOf(all, until);
  const blocked = all.find((m) => m !== primary)!;
  const gone = all.find((m) => m !== primary && m !== blocked)!;
  const members = (m: Member) => JSON.parse(readFileSync(join(m.dir, 'MEMBERS'), 'utf8')) as { voters: string[]; removed: string[] };
  const before = readFileSync(join(blocked.dir, 'MEMBERS'), 'utf8');
  t.same(members(blocked).voters, ['n1', 'n2', 'n3'], 'the member wrote MEMBERS when it opened');
  // Its temporary file cannot be written: a directory stands in its place.
  mkdirSync(join(blocked.dir, 'MEMBERS.tmp'));

  const { index: removal } = await primary.replica.changeMembership({ type: 'remove', node: gone.id });
  // The MEMBERS file is written once the removal's batch has landed in the store.
  await until('the member applied the removal', () => blocked.events.some((e) => e.event === 'membership_applied' && e.index === removal));
  const warned = blocked.events.filter((e) => e.event === 'members_file_failed');
  t.equal(warned.length, 1, 'the failed write is logged once');
  t.match(warned[0], { level: 'warn', err: /EISDIR/, msg: 'the MEMBERS file of the data directory was not written' });
  t.equal(readFileSync(join(blocked.dir, 'MEMBERS'), 'utf8'), before, 'its MEMBERS is left as it was');
  t.equal(blocked.replica.membership(), null, 'the member goes on as a member');
  await blocked.replica.readBarrier();
  t.pass('and serves a linearizable read');
  await until('the primary wrote its MEMBERS', () => members(primary).voters.length === 2);
  const written = members(primary);
  t.same([[...written.voters].sort(), written.removed], [[primary.id, blocked.id].sort(), [gone.id]], 'a member that can write it has the membership in force');
  t.notOk(primary.events.some((e) => e.event === 'members_file_failed'), 'and logged no failure');
});
