// Proves RawNode's contract with its caller: the Ready/advance cycle (including steps
// that arrive while a Ready is being persisted), the flow-control and backpressure
// limits, batching of proposals into one fsync, a one-member group, fast backtracking of
// a divergent follower, restart after a crash, and the errors for malformed input.
import t from 'tap';
import { RawNode, emptyBoot, splitMessages } from './rawnode.js';
import { MemoryLogStore } from './storage.js';
import { boot, bytes, config, ents, msg, Network } from './testing.js';
import type { Message } from './types.js';

const ABC = ['a', 'b', 'c'];

function code(r: { ok: true } | { ok: false; code: string }): string {
  return r.ok ? 'ok' : r.code;
}

t.test('the Ready cycle', async (t) => {
  t.test('ready() twice without advance() throws, and hasReady() is false meanwhile', async (t) => {
    const n = new RawNode(config('solo', ['solo']), emptyBoot());
    n.campaign();
    t.ok(n.hasReady());
    const rd = n.ready();
    t.notOk(n.hasReady(), 'no second Ready while one is outstanding');
    t.throws(() => n.ready(), /before advance/);
    t.throws(() => n.advance({ ...rd }), /not the outstanding one/);
    n.advance(rd);
    t.ok(n.hasReady(), 'the commit of the no-op is next');
  });

  t.test('pendingSnapshotIndex names a snapshot taken from the leader until a Ready hands it out', async (t) => {
    const conf = { voters: ABC, learners: [], context: {}, removed: [] };
    const b = new RawNode(config('b', ABC), emptyBoot());
    t.equal(b.pendingSnapshotIndex(), null, 'none at first');
    b.step(msg({ type: 'snap', from: 'a', to: 'b', term: 1, snapshot: { meta: { index: 5, term: 1, conf }, data: bytes('s') } }));
    t.equal(b.pendingSnapshotIndex(), 5, 'taken');
    const rd = b.ready();
    t.equal(rd.snapshot?.meta.index, 5);
    t.equal(b.pendingSnapshotIndex(), null, 'handed out');
    b.advance(rd);
    b.step(msg({ type: 'snap', from: 'a', to: 'b', term: 1, snapshot: { meta: { index: 4, term: 1, conf }, data: bytes('s') } }));
    t.equal(b.pendingSnapshotIndex(), null, 'one at or below the commit is not taken');
    b.step(msg({ type: 'heartbeat', from: 'c', to: 'b', term: 2, commit: 5 }));
    t.equal(b.status().term, 2);
    b.step(msg({ type: 'snap', from: 'a', to: 'b', term: 1, snapshot: { meta: { index: 9, term: 1, conf }, data: bytes('s') } }));
    t.equal(b.pendingSnapshotIndex(), null, 'nor one from an earlier term');
  });

  t.test('a conflicting append that arrives while a Ready is being saved goes into the next Ready', async (t) => {
    const store = new MemoryLogStore();
    const b = new RawNode(config('b', ABC), emptyBoot());
    b.step(msg({ type: 'app', from: 'a', to: 'b', term: 1, entries: ents([1, 1, 1]) }));
    const rd1 = b.ready();
    t.same(rd1.entries.map((e) => e.index), [1, 2, 3]);
    // While rd1 is being written, a new leader of term 2 replaces entries 2 and 3.
    b.step(msg({ type: 'app', from: 'c', to: 'b', term: 2, index: 1, logTerm: 1, entries: ents([2], 2) }));
    store.saveSync(rd1);
    b.advance(rd1);
    t.equal(b.status().persisted, 1, 'entries 2 and 3 were replaced in memory: not counted durable');
    const rd2 = b.ready();
    t.same(rd2.entries.map((e) => [e.index, e.term]), [[2, 2]]);
    t.same(rd2.hardState, { term: 2, vote: null, commit: 0 });
    t.same(rd2.messages.map((m) => `${m.type}->${m.to}:${m.index}`), ['appResp->c:2'], 'the answer to c waits for the new entries');
    store.saveSync(rd2);
    b.advance(rd2);
    t.same(store.loadSync().entries.map((e) => [e.index, e.term]), [[1, 1], [2, 2]], 'the stored suffix was truncated');
    t.equal(b.status().persisted, 2);
  });

  t.test('a leader\'s appends may leave before its write; nothing leaves early from a Ready that changes the term or the vote', async (t) => {
    // The only voter, with a learner, wins its election in the Ready that starts it. Its
    // appends there carry a term not yet on its disk: sent early, a crash before the write
    // would let it win that term again with other entries at the same indexes.
    const conf = { voters: ['solo'], learners: ['l'], context: {}, removed: [] };
    const snap = { meta: { index: 1, term: 1, conf }, data: bytes('s') };
    const n = new RawNode(config('solo', ['solo']), boot([], { term: 1, commit: 1 }, snap));
    n.campaign();
    const rd1 = n.ready();
    t.equal(rd1.softState?.role, 'leader');
    t.notOk(rd1.termDurable, 'the Ready records the new term and the vote');
    t.ok(rd1.messages.some((m) => m.type === 'app' && m.to === 'l'), 'the learner is sent the no-op');
    t.same(splitMessages(rd1), { early: [], late: rd1.messages }, 'all of them wait for the write');

    // Three voters: the campaign's Ready holds the new term and the vote requests, which
    // wait for the write; the won election's appends leave before the no-op is written.
    const a = new RawNode(config('a', ABC), emptyBoot());
    a.campaign();
    const c1 = a.ready();
    t.notOk(c1.termDurable);
    t.same(splitMessages(c1).early, [], 'the vote requests wait for the vote on disk');
    a.advance(c1);
    a.step(msg({ type: 'voteResp', from: 'b', to: 'a', term: 1 }));
    const c2 = a.ready();
    t.equal(c2.softState?.role, 'leader');
    t.ok(c2.termDurable);
    t.equal(c2.entries.length, 1, 'the no-op, not yet on disk');
    const { early, late } = splitMessages(c2);
    t.same(early.map((m) => `${m.type}->${m.to}`), ['app->b', 'app->c'], 'the appends leave before the write');
    t.notOk(late.some((m) => m.type === 'app'));
  });

  t.test('status reports the node and, on the leader, each member\'s progress', async (t) => {
    const net = new Network(ABC);
    net.campaign('a');
    net.propose('a', 'x');
    const st = net.node('a').status();
    t.match(st, { id: 'a', term: 1, role: 'leader', leader: 'a', commit: 2, applied: 2, lastIndex: 2, firstIndex: 1, snapshotIndex: 0 });
    t.match(st.progress?.b, { match: 2, next: 3, state: 'replicate' });
    t.equal(net.node('b').status().progress, null);
  });
});

t.test('flow control and backpressure', async (t) => {
  t.test('at most maxInflightMsgs appends are in flight to one follower', async (t) => {
    const net = new Network(ABC, { maxInflightMsgs: 2 });
    net.campaign('a');
    net.cutLink('b', 'a');
    const start = net.delivered.length;
    for (let k = 0; k < 5; k++) net.propose('a', `x${k}`);
    const apps = (to: string): Message[] => net.delivered.slice(start).filter((m) => m.type === 'app' && m.to === to && m.entries.length > 0);
    t.equal(apps('b').length, 2, 'b, which never answers, gets two');
    t.equal(apps('c').length, 5, 'c, which answers, gets all five');
    t.equal(net.node('a').status().progress?.b?.paused, true);
  });

  t.test('an append carries at most maxSizePerMsg bytes, but always at least one entry', async (t) => {
    const net = new Network(ABC, { maxSizePerMsg: 120 });
    net.campaign('a');
    const start = net.delivered.length;
    net.propose('a', ...Array.from({ length: 6 }, (_, k) => `entry-${k}-${'.'.repeat(20)}`));
    const sizes = net.delivered.slice(start).filter((m) => m.type === 'app' && m.to === 'b' && m.entries.length > 0).map((m) => m.entries.length);
    t.same(sizes, [2, 2, 2], 'two 54-byte entries fit in 120 bytes');
    const big = net.delivered.length;
    net.propose('a', 'y'.repeat(1000));
    const one = net.delivered.slice(big).filter((m) => m.type === 'app' && m.to === 'b' && m.entries.length > 0);
    t.same(one.map((m) => m.entries.length), [1], 'an entry larger than the limit still goes, alone');
  });

  t.test('the leader refuses proposals beyond maxUncommittedEntries and accepts again once they commit', async (t) => {
    const net = new Network(ABC, { maxUncommittedEntries: 4 });
    net.campaign('a');
    net.isolate('a');
    const a = net.node('a');
    t.equal(code(a.propose([bytes('1'), bytes('2'), bytes('3')])), 'ok');
    t.equal(code(a.propose([bytes('4'), bytes('5')])), 'uncommitted_limit');
    t.equal(code(a.propose([bytes('4')])), 'ok');
    t.equal(code(a.propose([bytes('5')])), 'uncommitted_limit');
    t.equal(code(a.propose([bytes('1'), bytes('2'), bytes('3'), bytes('4'), bytes('5')])), 'invalid_proposal', 'a batch that could never fit');
    net.heal();
    net.tickAll(2);
    t.equal(a.status().commit, 5);
    t.equal(code(a.propose([bytes('5'), bytes('6'), bytes('7'), bytes('8')])), 'ok');
  });

  t.test('many proposals in one call make one Ready, one fsync and one append per follower', async (t) => {
    const net = new Network(ABC);
    net.campaign('a');
    const a = net.member('a');
    const syncs = a.store.syncCount;
    t.ok(a.node.propose(Array.from({ length: 256 }, (_, k) => bytes(`p${k}`))).ok);
    const rd = a.node.ready();
    t.equal(rd.entries.length, 256);
    t.ok(rd.mustSync);
    t.same(rd.messages.map((m) => `${m.type}->${m.to}:${m.entries.length}`), ['app->b:256', 'app->c:256']);
    a.store.saveSync(rd);
    a.node.advance(rd);
    t.equal(a.store.syncCount - syncs, 1);
  });

  t.test('proposals are refused with a reason a caller can act on', async (t) => {
    const net = new Network(ABC);
    net.campaign('a');
    const b = net.node('b').propose([bytes('x')]);
    t.match(b, { ok: false, code: 'not_leader', leader: 'a' });
    t.equal(code(net.node('a').propose([])), 'invalid_proposal');
    t.equal(code(net.node('a').propose([bytes('x'), new Uint8Array(0)])), 'invalid_proposal', 'empty data is reserved for no-ops');
  });
});

t.test('a one-member group', async (t) => {
  t.test('elects itself on campaign() and commits on its own fsync', async (t) => {
    const net = new Network(['solo']);
    net.campaign('solo');
    t.equal(net.leader(), 'solo');
    const store = net.member('solo').store;
    const syncs = store.syncCount;
    net.propose('solo', 'x', 'y');
    t.same(net.appliedData('solo'), ['x', 'y']);
    t.equal(store.syncCount - syncs, 1, 'one fsync for the batch; the commit index needs none');
  });

  t.test('elects itself within the first election timeout without being asked', async (t) => {
    const net = new Network(['solo'], { preVote: true, checkQuorum: true });
    net.tickAll(20);
    t.equal(net.leader(), 'solo');
  });
});

t.test('a divergent follower is repaired in round trips bounded by its terms, not its entries', async (t) => {
  const seed = (terms: number[]): MemoryLogStore => {
    const s = new MemoryLogStore();
    s.saveSync({ hardState: { term: 3, vote: null, commit: 1 }, snapshot: null, entries: ents(terms), mustSync: true });
    return s;
  };
  const net = new Network(['l', 'f', 'x']);
  const leaderLog = [1, ...Array.from({ length: 100 }, () => 3)];
  net.start('l', seed(leaderLog));
  net.start('x', seed(leaderLog));
  net.start('f', seed([1, ...Array.from({ length: 100 }, () => 2)]));
  net.campaign('l');
  const rejects = net.delivered.filter((m) => m.type === 'appResp' && m.from === 'f' && m.reject);
  t.equal(rejects.length, 1, 'one rejection skips all 100 entries of term 2');
  t.same(net.node('f').raft.log.entries.map((e) => e.term), net.node('l').raft.log.entries.map((e) => e.term));
});

t.test('a crash that loses the unsynced commit index: the node relearns it', async (t) => {
  const net = new Network(ABC);
  net.campaign('a');
  net.propose('a', 'x');
  net.propose('a', 'y');
  const before = net.node('b').status().commit;
  net.restart('b');
  t.ok(net.node('b').status().commit < before, 'the commit-only write was not synced');
  net.tickAll(1);
  t.equal(net.node('b').status().commit, before);
  t.same(net.appliedData('b'), ['x', 'y'], 'b applies again from its store');
});

t.test('malformed input', async (t) => {
  t.test('step answers a malformed message with invalid_message and changes nothing', async (t) => {
    const n = new RawNode(config('b', ABC), boot(ents([1]), { term: 1 }));
    const good = msg({ type: 'app', from: 'a', to: 'b', term: 1, index: 1, logTerm: 1, entries: ents([1], 2) });
    const bad: [string, Message][] = [
      ['unknown type', { ...good, type: 'bogus' as Message['type'] }],
      ['wrong recipient', { ...good, to: 'c' }],
      ['an empty sender', { ...good, from: '' }],
      ['from itself', { ...good, from: 'b' }],
      ['term 0 on an append', { ...good, term: 0 }],
      ['a forwarded read with a term', msg({ type: 'readIndex', from: 'a', to: 'b', term: 1 })],
      ['a negative index', { ...good, index: -1 }],
      ['a fractional commit', { ...good, commit: 1.5 }],
      ['entries with a gap', { ...good, entries: ents([1], 3) }],
      ['an entry of a later term', { ...good, entries: ents([2], 2) }],
      ['entries on a heartbeat', { ...good, type: 'heartbeat' }],
      ['a snapshot without a voter', msg({ type: 'snap', from: 'a', to: 'b', term: 1, snapshot: { meta: { index: 5, term: 1, conf: { voters: [], learners: ['a'], context: {}, removed: [] } }, data: bytes('s') } })],
      ['a conf entry that is not one', { ...good, entries: [{ index: 2, term: 1, data: bytes('{}'), type: 'conf' }] }],
      ['a snap without a snapshot', msg({ type: 'snap', from: 'a', to: 'b', term: 1 })],
    ];
    for (const [what, m] of bad) t.equal(code(n.step(m)), 'invalid_message', what);
    t.equal(n.status().lastIndex, 1, 'nothing was appended');
    t.equal(code(n.step(good)), 'ok', 'the well-formed message is accepted');
  });

  t.test('a bad configuration is refused with the field named', async (t) => {
    t.throws(() => new RawNode(config('a', ['b', 'c']), emptyBoot()), /peers must include id a/);
    t.throws(() => new RawNode(config('a', ['a', 'a']), emptyBoot()), /unique/);
    t.throws(() => new RawNode(config('a', ABC, { heartbeatTicks: 10 }), emptyBoot()), /heartbeatTicks/);
    t.throws(() => new RawNode(config('a', ABC, { maxInflightMsgs: 0 }), emptyBoot()), /maxInflightMsgs/);
    t.throws(() => new RawNode(config('a', ABC, { electionTicks: 0 }), emptyBoot()), /electionTicks/);
  });

  t.test('an applied index from the application may exceed the stored commit, but not the stored log', async (t) => {
    const b = boot(ents([1, 1, 1]), { term: 1, commit: 1 });
    const n = new RawNode(config('a', ABC, { applied: 3 }), b);
    t.match(n.status(), { commit: 3, applied: 3 });
    t.notOk(n.hasReady() && n.ready().committedEntries.length > 0, 'nothing is applied twice');
    t.throws(() => new RawNode(config('a', ABC, { applied: 4 }), b), /applied 4/);
  });

  t.test('compact beyond the applied index is a caller bug and throws', async (t) => {
    const net = new Network(['solo']);
    net.campaign('solo');
    t.throws(() => net.node('solo').compact(5, bytes('s')), RangeError);
    t.equal(net.node('solo').compact(0, bytes('s')), null, 'nothing to compact');
  });
});
