// Proves the behaviour of whole groups in the scenarios the server depends on: pre-vote
// with check-quorum, leadership transfer (never to a member that is stopping), a
// lagging follower caught up by snapshot, a partitioned old leader that must not
// commit, and linearizable reads (ReadIndex).
import t from 'tap';
import { bytes, msg, Network, text } from './testing.js';
import type { NodeId } from './types.js';

const ABC = ['a', 'b', 'c'];
const FIVE = ['s1', 's2', 's3', 's4', 's5'];
const GUARDED = { preVote: true, checkQuorum: true };

/** split cuts every link between `side` and the rest of the group. */
function split(net: Network, side: NodeId[]): void {
  for (const a of net.ids) {
    for (const b of net.ids) if (side.includes(a) !== side.includes(b)) net.cutLink(a, b);
  }
}

t.test('pre-vote with check-quorum', async (t) => {
  t.test('a partitioned follower does not raise its term, and rejoining does not disrupt the leader', async (t) => {
    const net = new Network(ABC, GUARDED);
    net.campaign('a');
    t.equal(net.leader(), 'a');
    net.isolate('c');
    net.tickAll(60);
    t.equal(net.node('c').status().term, 1, 'pre-votes never win, so the term stays');
    t.equal(net.node('a').status().role, 'leader', 'a keeps its quorum with b');
    net.heal();
    net.tickAll(3);
    t.equal(net.leader(), 'a', 'the same leader');
    t.equal(net.node('a').status().term, 1, 'in the same term');
    t.equal(net.node('c').status().leader, 'a', 'c follows it again');
  });

  t.test('a leader that cannot reach a quorum steps down within two election timeouts', async (t) => {
    const net = new Network(ABC, GUARDED);
    net.campaign('a');
    net.isolate('a');
    net.tickAll(20, ['a']);
    t.equal(net.node('a').status().role, 'follower');
    t.equal(net.node('a').status().leader, null);
  });

  t.test('a follower that heard from its leader within the election timeout ignores a vote request', async (t) => {
    const net = new Network(ABC, GUARDED);
    net.campaign('a');
    const b = net.node('b');
    b.step(msg({ type: 'vote', from: 'c', to: 'b', term: 9, index: 99, logTerm: 9 }));
    t.equal(b.status().term, 1, 'the term does not move');
    t.same(net.process('b'), [], 'and no vote is granted or refused');
  });

  t.test('when the leader really fails the others still elect a new one', async (t) => {
    const net = new Network(ABC, GUARDED);
    net.campaign('a');
    net.propose('a', 'x');
    net.isolate('a');
    net.tickAll(40, ['b', 'c']);
    const leader = net.leader();
    t.ok(leader === 'b' || leader === 'c', `a new leader: ${leader}`);
    t.ok(net.node(leader ?? 'b').status().term >= 2);
  });

  t.test('without pre-vote, a node rejoining with a higher term makes the stale-term leader step down', async (t) => {
    const net = new Network(ABC, { preVote: false, checkQuorum: true });
    net.campaign('a');
    net.isolate('c');
    net.tickAll(40, ['c']);
    const cTerm = net.node('c').status().term;
    t.ok(cTerm > 1, `c campaigned alone up to term ${cTerm}`);
    net.heal();
    net.tickAll(60);
    const leader = net.leader();
    t.not(leader, null);
    t.ok(net.node(leader ?? 'a').status().term > cTerm, 'the group moved past c\'s term instead of stalling');
  });
});

t.test('leadership transfer', async (t) => {
  t.test('to an up-to-date follower: it becomes leader at once', async (t) => {
    const net = new Network(ABC);
    net.campaign('a');
    net.propose('a', 'x');
    t.ok(net.node('a').transferLeadership('b').ok);
    net.drain();
    t.equal(net.leader(), 'b');
    t.equal(net.node('b').status().term, 2);
    t.equal(net.node('a').status().role, 'follower');
    net.propose('b', 'y');
    t.same(net.appliedData('a'), ['x', 'y']);
  });

  t.test('to a lagging follower: it is caught up first, and proposals are refused meanwhile', async (t) => {
    const net = new Network(ABC);
    net.campaign('a');
    net.isolate('c');
    net.propose('a', 'x', 'y');
    net.heal();
    const a = net.node('a');
    t.ok(a.transferLeadership('c').ok);
    t.equal(a.status().leadTransferee, 'c');
    const refused = a.propose([bytes('z')]);
    t.equal(refused.ok ? 'ok' : refused.code, 'transfer_in_progress');
    net.tickAll(1);
    t.equal(net.leader(), 'c');
    t.same(net.appliedData('c'), ['x', 'y'], 'c holds everything a had committed');
  });

  t.test('to an unreachable member: abandoned after an election timeout, then proposals resume', async (t) => {
    const net = new Network(ABC);
    net.campaign('a');
    net.isolate('c');
    const a = net.node('a');
    a.transferLeadership('c');
    net.drain();
    t.equal(a.status().leadTransferee, 'c');
    net.tickAll(10, ['a']);
    t.equal(a.status().leadTransferee, null);
    t.equal(a.status().role, 'leader');
    t.ok(a.propose([bytes('z')]).ok);
  });

  t.test('to a member that is stopping: it does not take over, the transfer is abandoned after an election timeout, and it still votes', async (t) => {
    const net = new Network(ABC);
    net.campaign('a');
    net.propose('a', 'x');
    net.node('b').stopCampaigning();
    const a = net.node('a');
    t.ok(a.transferLeadership('b').ok);
    net.drain();
    t.equal(net.leader(), 'a', 'b ignored the timeoutNow: a still leads');
    t.ok(net.delivered.some((m) => m.type === 'timeoutNow' && m.to === 'b'), 'although it was asked');
    net.tickAll(10, ['a']);
    t.equal(a.status().leadTransferee, null, 'abandoned after an election timeout');
    t.equal(a.status().role, 'leader', 'the leader leads on');
    // Without a leader, the stopping member never campaigns, but votes for the one that does.
    net.isolate('a');
    net.tickAll(40, ['b']);
    t.equal(net.node('b').status().role, 'follower', 'b never campaigns on its timeout');
    net.heal();
    net.isolate('a');
    net.campaign('c');
    t.equal(net.leader(), 'c', 'c is elected with the stopping member\'s vote');
  });

  t.test('a follower forwards the request to the leader', async (t) => {
    const net = new Network(ABC);
    net.campaign('a');
    t.ok(net.node('b').transferLeadership('c').ok);
    net.drain();
    t.equal(net.leader(), 'c');
  });

  t.test('an unknown member or an unknown leader is answered with an error', async (t) => {
    const net = new Network(ABC);
    const r1 = net.node('b').transferLeadership('zz');
    t.equal(r1.ok ? 'ok' : r1.code, 'unknown_peer');
    const r2 = net.node('b').transferLeadership('c');
    t.equal(r2.ok ? 'ok' : r2.code, 'not_leader');
  });
});

t.test('a lagging follower is caught up by snapshot', async (t) => {
  t.test('InstallSnapshot replaces its log, then appends follow', async (t) => {
    const net = new Network(ABC);
    net.campaign('a');
    net.isolate('c');
    net.propose('a', 'x1', 'x2', 'x3', 'x4', 'x5');
    const snap = net.compact('a');
    net.compact('b');
    t.equal(snap?.meta.index, 6);
    t.equal(net.node('a').status().firstIndex, 7, 'the leader no longer holds what c needs');
    net.heal();
    net.tickAll(2);
    const c = net.member('c');
    t.equal(c.restored.at(-1)?.meta.index, 6, 'c received and restored the snapshot');
    t.equal(text(c.restored.at(-1)?.data ?? new Uint8Array()), 'state@6');
    t.equal(c.store.loadSync().snapshot?.meta.index, 6, 'c persisted it');
    net.propose('a', 'y');
    t.same(net.appliedData('c'), ['y'], 'c applies what follows the snapshot');
    t.equal(c.node.status().applied, 7);
    t.equal(net.node('a').status().progress?.c?.state, 'replicate', 'the leader streams to c again');
  });

  t.test('a lost snapshot is not resent on a timer: the transport reports the failure, then it is sent again', async (t) => {
    const net = new Network(ABC);
    net.campaign('a');
    net.isolate('c');
    net.propose('a', 'x1', 'x2');
    net.compact('a');
    net.heal();
    let sent = 0;
    net.filter = (m) => m.type !== 'snap' || ++sent > 1;
    net.tickAll(1);
    t.equal(sent, 1, 'the first snapshot is lost');
    t.equal(net.node('a').status().progress?.c?.state, 'snapshot', 'the leader waits for it');
    net.tickAll(30);
    t.equal(sent, 1, 'three election timeouts later it has not been resent: a slow transfer is never restarted');
    t.equal(net.node('a').status().progress?.c?.state, 'snapshot');
    net.node('a').reportSnapshot('c', false);
    net.tickAll(2);
    t.ok(sent >= 2, 'after the transport reported the failure, the leader sent it again');
    t.equal(net.member('c').restored.at(-1)?.meta.index, 3);
  });

  t.test('a finished transfer returns the member to probing, and its answer to replication', async (t) => {
    const net = new Network(ABC);
    net.campaign('a');
    net.isolate('c');
    net.propose('a', 'x1', 'x2');
    net.compact('a');
    net.heal();
    net.filter = (m) => m.type !== 'snap';
    net.tickAll(1);
    t.equal(net.node('a').status().progress?.c?.state, 'snapshot');
    net.node('a').reportSnapshot('c', true);
    t.equal(net.node('a').status().progress?.c?.state, 'probe', 'finish: probe from the snapshot on');
    t.equal(net.node('a').status().progress?.c?.next, 4, 'next is past the snapshot');
  });

  t.test('an unreachable member that was being streamed to is probed instead', async (t) => {
    const net = new Network(ABC);
    net.campaign('a');
    net.propose('a', 'x1');
    t.equal(net.node('a').status().progress?.b?.state, 'replicate');
    net.node('a').reportUnreachable('b');
    t.equal(net.node('a').status().progress?.b?.state, 'probe');
  });
});

t.test('a partitioned old leader must not commit', async (t) => {
  t.test('its new entries stay uncommitted, and are replaced once the partition heals', async (t) => {
    const net = new Network(FIVE);
    net.campaign('s1');
    net.propose('s1', 'before');
    split(net, ['s1', 's2']);
    const stale = net.node('s1').propose([bytes('lost')]);
    t.ok(stale.ok, 'the old leader still appends');
    net.drain();
    const commitBefore = net.node('s1').status().commit;
    t.ok(stale.ok && commitBefore < stale.firstIndex, 'but it cannot commit with two of five');
    net.campaign('s3');
    t.equal(net.leader(), 's3');
    net.propose('s3', 'kept');
    t.equal(net.node('s1').status().role, 'leader', 's1 still believes it leads');
    t.equal(net.node('s1').status().commit, commitBefore, 'and still has not committed');
    net.heal();
    net.tickAll(2);
    t.equal(net.leader(), 's3');
    for (const id of FIVE) t.same(net.appliedData(id), ['before', 'kept'], `${id} never applied the lost entry`);
  });

  t.test('with check-quorum it steps down on its own', async (t) => {
    const net = new Network(FIVE, GUARDED);
    net.campaign('s1');
    split(net, ['s1', 's2']);
    net.tickAll(20, ['s1', 's2']);
    t.equal(net.node('s1').status().role, 'follower');
  });
});

t.test('ReadIndex', async (t) => {
  t.test('the leader answers a read only after a quorum confirms it still leads', async (t) => {
    const net = new Network(ABC);
    net.campaign('a');
    net.propose('a', 'x');
    const a = net.member('a');
    t.ok(a.node.readIndex(bytes('r1')).ok);
    const beats = net.process('a');
    t.same(beats.map((m) => m.type), ['heartbeat', 'heartbeat'], 'a heartbeat round goes out');
    t.same(a.readStates, [], 'no answer before the round');
    for (const m of beats.filter((m) => m.to === 'b')) net.deliver(m);
    for (const m of net.process('b')) net.deliver(m);
    net.process('a');
    t.same(a.readStates.map((r) => [r.index, text(r.context)]), [[2, 'r1']], 'answered at the commit index with one follower');
  });

  t.test('a follower\'s read is forwarded to the leader and answered back', async (t) => {
    const net = new Network(ABC);
    net.campaign('a');
    net.propose('a', 'x');
    t.ok(net.node('b').readIndex(bytes('r2')).ok);
    net.drain();
    t.same(net.member('b').readStates.map((r) => [r.index, text(r.context)]), [[2, 'r2']]);
  });

  t.test('a new leader holds reads until it commits an entry of its own term', async (t) => {
    const net = new Network(ABC);
    net.campaign('a');
    net.propose('a', 'x');
    net.filter = (m) => !(m.from === 'b' && m.type === 'app');
    net.campaign('b');
    t.equal(net.leader(), 'b');
    t.ok(net.node('b').readIndex(bytes('r3')).ok);
    net.drain();
    t.same(net.member('b').readStates, [], 'held: b does not yet know the latest commit');
    net.heal();
    net.tickAll(1, ['b']);
    t.same(net.member('b').readStates.map((r) => [r.index, text(r.context)]), [[3, 'r3']], 'answered after its no-op commits');
  });

  t.test('a partitioned leader cannot answer a read', async (t) => {
    const net = new Network(ABC);
    net.campaign('a');
    net.isolate('a');
    net.node('a').readIndex(bytes('r4'));
    net.tickAll(5, ['a']);
    t.same(net.member('a').readStates, []);
  });

  t.test('reads waiting for confirmation are bounded by maxPendingReads', async (t) => {
    const net = new Network(ABC, { maxPendingReads: 2 });
    net.campaign('a');
    net.isolate('a');
    const a = net.node('a');
    t.ok(a.readIndex(bytes('r1')).ok);
    t.ok(a.readIndex(bytes('r2')).ok);
    const r = a.readIndex(bytes('r3'));
    t.equal(r.ok ? 'ok' : r.code, 'read_limit');
    net.heal();
    net.tickAll(1);
    t.equal(net.member('a').readStates.length, 2, 'the two admitted reads are answered');
    t.ok(a.readIndex(bytes('r4')).ok, 'and reads are admitted again');
  });

  t.test('a one-member group answers at once, and a node without a leader says not_leader', async (t) => {
    const solo = new Network(['solo']);
    solo.campaign('solo');
    solo.node('solo').readIndex(bytes('r5'));
    solo.drain();
    t.same(solo.member('solo').readStates.map((r) => text(r.context)), ['r5']);
    const net = new Network(ABC);
    const r = net.node('a').readIndex(bytes('r6'));
    t.equal(r.ok ? 'ok' : r.code, 'not_leader');
  });
});
