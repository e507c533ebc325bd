// Proves membership changes one server at a time (Raft dissertation §4.1): a learner
// receives the log but neither votes nor counts toward a quorum; a promoted learner
// counts at once; a removed member stops counting and learns of its removal; a change is
// in force on a member from the moment the member appends it and reverts when the entry
// is truncated; a leader proposes a change only after it committed an entry of its term
// and while no other change is uncommitted; snapshots carry the configuration, so a
// member that catches up by snapshot or restarts knows it; and a removed id is never a
// member again, whichever leader is asked, however the configuration reached it.
import t from 'tap';
import { applyChange, confState, decodeConfEntry, encodeConfEntry } from './membership.js';
import { Network, bytes } from './testing.js';
import { messageCodec } from './wire/codec.js';
import type { ConfChange, RaftResult } from './types.js';

function code(r: RaftResult): string {
  return r.ok ? 'ok' : r.code;
}

/** a group of three with n1 leading and one entry committed. */
function group(over: ConstructorParameters<typeof Network>[1] = {}): Network {
  const net = new Network(['n1', 'n2', 'n3'], over);
  net.campaign('n1');
  net.propose('n1', 'first');
  return net;
}

const addLearner = (node: string): ConfChange => ({ type: 'addLearner', node, context: `addr-${node}` });

t.test('applyChange allows one-server changes only, and says why it refuses', async (t) => {
  const c = confState(['a', 'b', 'c'], ['d']);
  t.same(applyChange(c, { type: 'addLearner', node: 'e', context: 'x' }), confState(['a', 'b', 'c'], ['d', 'e'], { e: 'x' }));
  t.same(applyChange(c, { type: 'promote', node: 'd' }), confState(['a', 'b', 'c', 'd']));
  t.same(applyChange(c, { type: 'remove', node: 'b' }), confState(['a', 'c'], ['d'], {}, ['b']), 'a removal remembers the id');
  t.same(applyChange(c, { type: 'remove', node: 'd' }), confState(['a', 'b', 'c'], [], {}, ['d']), 'a learner\'s too');
  t.match(applyChange(c, { type: 'addLearner', node: 'a' }), /already a voter/);
  t.match(applyChange(c, { type: 'promote', node: 'a' }), /already a voter/);
  t.match(applyChange(c, { type: 'promote', node: 'z' }), /not a learner/);
  t.match(applyChange(c, { type: 'remove', node: 'z' }), /not a member/);
  t.match(applyChange(confState(['a']), { type: 'remove', node: 'a' }), /last voter/);
  const gone = confState(['a', 'c'], [], {}, ['b']);
  t.equal(applyChange(gone, { type: 'addLearner', node: 'b', context: 'x' }), 'b was removed from the cluster and ids are never reused: add the member under a new id');
  t.match(applyChange(gone, { type: 'promote', node: 'b' }), /not a learner/);
  t.match(applyChange(gone, { type: 'remove', node: 'b' }), /not a member/);
  t.same(applyChange(gone, { type: 'addLearner', node: 'e', context: 'x' }), confState(['a', 'c'], ['e'], { e: 'x' }, ['b']), 'a new id is added, the removed one still remembered');
});

t.test('a removed id is never added back: the leader refuses, and nothing changes', async (t) => {
  const net = group();
  net.join('n4');
  t.equal(code(net.proposeConf('n1', { type: 'remove', node: 'n3' })), 'ok');
  net.tickAll(1);
  const before = net.node('n1').status();
  t.same(before.conf.removed, ['n3'], 'the configuration remembers the removed id');
  const r = net.proposeConf('n1', addLearner('n3'));
  t.equal(code(r), 'conf_change_refused');
  t.match(r.ok ? '' : r.message, /n3 was removed from the cluster and ids are never reused: add the member under a new id/);
  const after = net.node('n1').status();
  t.same([after.lastIndex, after.conf], [before.lastIndex, before.conf], 'nothing was appended, the configuration is unchanged');
  t.equal(code(net.proposeConf('n1', addLearner('n4'))), 'ok', 'a new id is added');
  t.same(net.node('n2').status().conf.removed, ['n3'], 'followers hold the removed ids too');
});

t.test('the removed ids outlive compaction, restarts, snapshots sent over the wire and new leaders', async (t) => {
  const net = group();
  const codec = messageCodec('removed-test');
  // Every message crosses the wire codec, so a snapshot's configuration does too.
  net.rewrite = (m) => codec.decode(codec.encode(m));
  net.proposeConf('n1', { type: 'remove', node: 'n3' });
  net.join('n4');
  net.proposeConf('n1', addLearner('n4'));
  net.proposeConf('n1', { type: 'promote', node: 'n4' });
  net.propose('n1', 'more');
  for (const id of ['n1', 'n2', 'n4']) net.compact(id);
  t.same(net.member('n1').store.loadSync().snapshot?.meta.conf.removed, ['n3'], 'the snapshot carries the removed ids');

  // n5 joins after the removal was compacted away: it learns it from the snapshot.
  net.join('n5');
  net.proposeConf('n1', addLearner('n5'));
  net.tickAll(2);
  t.ok(net.member('n5').restored.length > 0, 'n5 caught up by snapshot');
  t.same(net.node('n5').status().conf.removed, ['n3'], 'and knows n3 was removed');

  net.restart('n2');
  t.same(net.node('n2').status().conf.removed, ['n3'], 'a restarted member rebuilds it from its snapshot');

  // Another leader, elected from what it stored, refuses n3 as the first did.
  net.isolate('n1');
  net.campaign('n2');
  net.heal();
  net.isolate('n1');
  net.propose('n2', 'its own entry');
  t.equal(net.node('n2').status().role, 'leader');
  const r = net.proposeConf('n2', addLearner('n3'));
  t.equal(code(r), 'conf_change_refused', 'the new leader refuses the removed id');
  t.match(r.ok ? '' : r.message, /never reused/);
});

t.test('a conf entry or snapshot written before removed ids were remembered reads as none removed', async (t) => {
  const old = bytes(JSON.stringify({ change: { type: 'addLearner', node: 'n4', context: 'a' }, conf: { voters: ['n1', 'n2'], learners: ['n4'], context: { n4: 'a' } } }));
  t.same(decodeConfEntry(old).conf, confState(['n1', 'n2'], ['n4'], { n4: 'a' }, []));
  const now = encodeConfEntry({ change: { type: 'remove', node: 'n3' }, conf: confState(['n1', 'n2'], [], {}, ['n3']) });
  t.same(decodeConfEntry(now).conf.removed, ['n3'], 'an entry written now carries them');
});

t.test('a learner receives the log, never votes and never counts toward a quorum', async (t) => {
  const net = group();
  net.join('n4');
  t.equal(code(net.proposeConf('n1', addLearner('n4'))), 'ok');
  net.propose('n1', 'second');
  t.same(net.appliedData('n4'), ['first', 'second'], 'the learner applied the whole log');
  t.same(net.node('n4').status().conf, confState(['n1', 'n2', 'n3'], ['n4'], { n4: 'addr-n4' }), 'the learner knows the configuration');

  // With two voters cut off, the leader and the learner are no quorum.
  net.isolate('n2');
  net.isolate('n3');
  net.propose('n1', 'stuck');
  t.notOk(net.appliedData('n1').includes('stuck'), 'a learner does not make a quorum');
  net.heal();
  net.tickAll(1);
  t.ok(net.appliedData('n1').includes('stuck'), 'the voters commit it');

  net.tickAll(60, ['n4']);
  t.equal(net.node('n4').status().role, 'follower', 'a learner never campaigns');
  t.equal(code(net.node('n1').transferLeadership('n4')), 'unknown_peer', 'leadership never goes to a learner');
});

t.test('a promoted learner counts toward the quorum at once', async (t) => {
  const net = group();
  net.join('n4');
  net.proposeConf('n1', addLearner('n4'));
  t.equal(code(net.proposeConf('n1', { type: 'promote', node: 'n4' })), 'ok');
  t.same(net.node('n1').status().conf.voters, ['n1', 'n2', 'n3', 'n4']);
  // Four voters: n1 and n4 are two of four, no majority; with n2 they are three.
  net.isolate('n2');
  net.isolate('n3');
  net.propose('n1', 'needs three');
  t.notOk(net.appliedData('n1').includes('needs three'), 'two of four voters do not commit');
  net.heal();
  net.isolate('n3');
  net.tickAll(1);
  t.ok(net.appliedData('n4').includes('needs three'), 'three of four do, the new voter among them');
  net.heal();
  // The new voter can lead.
  net.isolate('n1');
  net.campaign('n4');
  t.equal(net.node('n4').status().role, 'leader', 'the promoted member wins an election');
});

t.test('a removed voter stops counting, learns of its removal, and never campaigns again', async (t) => {
  const net = group();
  t.equal(code(net.proposeConf('n1', { type: 'remove', node: 'n3' })), 'ok');
  t.same(net.node('n1').status().conf.voters, ['n1', 'n2']);
  t.same(net.node('n3').status().conf.voters, ['n1', 'n2'], 'the removed member has its removal');
  net.isolate('n3');
  net.propose('n1', 'two of two');
  t.ok(net.appliedData('n2').includes('two of two'), 'n1 and n2 are the quorum now');
  net.heal();
  net.tickAll(40);
  t.equal(net.node('n3').status().role, 'follower', 'the removed member never campaigns');
  t.equal(net.node('n1').status().progress?.n3, undefined, 'the leader stopped replicating to it after its removal was known');
  t.equal(net.node('n3').status().commit >= net.node('n3').status().confIndex, true, 'it knows its removal is committed');
});

t.test('the leader is not removed: it is asked to transfer first', async (t) => {
  const net = group();
  const r = net.proposeConf('n1', { type: 'remove', node: 'n1' });
  t.equal(code(r), 'conf_change_refused');
  t.match(r.ok ? '' : r.message, /transfer leadership/);
});

t.test('one change at a time: a second change waits until the first commits', async (t) => {
  const net = group();
  net.join('n4');
  net.join('n5');
  net.isolate('n2');
  net.isolate('n3');
  t.equal(code(net.proposeConf('n1', addLearner('n4'))), 'ok', 'appended, not committed');
  const second = net.proposeConf('n1', addLearner('n5'));
  t.equal(code(second), 'conf_change_refused');
  t.match(second.ok ? '' : second.message, /one change at a time/);
  net.heal();
  net.tickAll(1);
  t.equal(code(net.proposeConf('n1', addLearner('n5'))), 'ok', 'accepted once the first committed');
});

t.test('a new leader proposes no change before it commits an entry of its own term (the 2015 correction)', async (t) => {
  const net = group();
  // n2 wins, but its no-op cannot commit: the others do not hear from it.
  net.filter = (m) => !(m.from === 'n2' && m.type === 'app');
  net.campaign('n2');
  t.equal(net.node('n2').status().role, 'leader');
  const r = net.proposeConf('n2', { type: 'remove', node: 'n3' });
  t.equal(code(r), 'conf_change_refused');
  t.match(r.ok ? '' : r.message, /entry of its term/);
  net.heal();
  net.tickAll(1);
  t.equal(code(net.proposeConf('n2', { type: 'remove', node: 'n3' })), 'ok', 'accepted once its no-op committed');
});

t.test('a truncated change is forgotten: the configuration falls back to the previous one', async (t) => {
  // n2 holds an uncommitted change; a leader whose log lacks it overwrites n2's suffix.
  const net = group();
  net.join('n4');
  net.isolate('n3');
  net.cutLink('n1', 'n4');
  // n2's acknowledgement is lost, so the change stays uncommitted.
  net.filter = (m) => !(m.from === 'n2' && m.type === 'appResp');
  net.proposeConf('n1', addLearner('n4'));
  t.same(net.node('n2').status().conf.learners, ['n4'], 'n2 uses the change before it commits');
  t.ok(net.node('n2').status().commit < net.node('n2').status().confIndex, 'it is not committed');
  net.heal();
  net.isolate('n1');
  net.isolate('n4');
  // n3 cannot win with n2's vote (n2's log is longer), so let n3 be elected by rewriting
  // n2's answer: the test is about truncation, which follows whichever leader wins.
  net.rewrite = (m) => (m.type === 'voteResp' && m.from === 'n2' ? { ...m, reject: false } : m);
  net.campaign('n3');
  net.rewrite = (m) => m;
  t.equal(net.node('n3').status().role, 'leader');
  net.propose('n3', 'overwrites');
  t.same(net.node('n2').status().conf, confState(['n1', 'n2', 'n3']), 'the change left with the truncated entry');
  t.same(net.node('n2').status().confIndex, 0);
});

t.test('snapshots carry the configuration: a member that catches up by snapshot, and one that restarts, know it', async (t) => {
  const net = group();
  net.join('n4');
  net.proposeConf('n1', addLearner('n4'));
  net.proposeConf('n1', { type: 'promote', node: 'n4' });
  net.propose('n1', 'more');
  for (const id of ['n1', 'n2', 'n3', 'n4']) net.compact(id);
  const snap = net.member('n1').store.loadSync().snapshot;
  t.same(snap?.meta.conf.voters, ['n1', 'n2', 'n3', 'n4'], 'the snapshot names the voters in force at its index');

  // A fifth member joins after the changes were compacted away: it learns them from the snapshot.
  net.join('n5');
  net.proposeConf('n1', addLearner('n5'));
  net.tickAll(2);
  t.ok(net.member('n5').restored.length > 0, 'n5 caught up by snapshot');
  t.same(net.node('n5').status().conf, confState(['n1', 'n2', 'n3', 'n4'], ['n5'], { n4: 'addr-n4', n5: 'addr-n5' }));

  // A restarted member rebuilds the configuration from its snapshot and log.
  net.restart('n2');
  t.same(net.node('n2').status().conf, net.node('n1').status().conf, 'n2 restarts with the configuration in force');
  net.propose('n1', 'after restart');
  t.ok(net.appliedData('n5').includes('after restart'));
});

t.test('a conf entry names the change and the whole configuration it makes', async (t) => {
  const net = group();
  net.join('n4');
  net.proposeConf('n1', addLearner('n4'));
  const e = net.member('n2').applied.find((x) => x.type === 'conf');
  t.ok(e !== undefined, 'followers apply the conf entry');
  const decoded = decodeConfEntry(e?.data ?? bytes('{}'));
  t.same(decoded.change, addLearner('n4'));
  t.same(decoded.conf, confState(['n1', 'n2', 'n3'], ['n4'], { n4: 'addr-n4' }));
});

t.test('a member that joins knows nothing and does nothing until a leader adds it', async (t) => {
  const net = group();
  net.join('n4');
  net.tickAll(40, ['n4']);
  const st = net.node('n4').status();
  t.same([st.role, st.term, st.conf.voters], ['follower', 0, []], 'it waits, never campaigning');
});

t.test('a learner promoted in entries it has not received still grants the votes the new configuration needs from it', async (t) => {
  const net = group({ checkQuorum: true, preVote: true });
  net.join('n4');
  net.proposeConf('n1', addLearner('n4'));
  net.cutLink('n1', 'n4');
  t.equal(code(net.proposeConf('n1', { type: 'promote', node: 'n4' })), 'ok');
  t.same(net.node('n4').status().conf.learners, ['n4'], 'n4 has not received its promotion');
  net.heal();
  net.isolate('n1');
  // Three of four voters are needed: n2, n3 and n4, which must not sit in n1's lease forever.
  net.tickAll(100, ['n2', 'n3', 'n4']);
  const leader = ['n2', 'n3', 'n4'].find((id) => net.node(id).status().role === 'leader');
  t.ok(leader !== undefined, `a leader was elected without n1 (${leader})`);
});

t.test('a voter whose removal is not yet committed may still be needed: it campaigns, commits the removal, and steps down', async (t) => {
  const net = new Network(['n1', 'n2', 'n3', 'n4']);
  net.campaign('n4');
  net.propose('n4', 'first');
  // The removal of n3 reaches only n3, then the leader is lost.
  net.filter = (m) => !(m.from === 'n4' && m.type === 'app' && m.to !== 'n3');
  t.equal(code(net.proposeConf('n4', { type: 'remove', node: 'n3' })), 'ok');
  net.heal();
  net.isolate('n4');
  // n1 and n2 (four voters, three needed) cannot win without n3, whose log is longer;
  // n3 wins under {n1, n2, n4} with their two votes, commits its own removal and steps down.
  net.tickAll(200, ['n1', 'n2', 'n3']);
  t.same(net.node('n1').status().conf.voters, ['n1', 'n2', 'n4'], 'the removal committed');
  t.ok(net.node('n1').status().commit >= net.node('n1').status().confIndex);
  t.not(net.node('n3').status().role, 'leader', 'n3 no longer leads');
  const leader = ['n1', 'n2'].find((id) => net.node(id).status().role === 'leader');
  t.ok(leader !== undefined, `a voter of the new configuration leads (${leader})`);
  net.propose(leader as string, 'after');
  t.ok(net.appliedData('n1').includes('after'), 'and the group commits');
});

t.test('a member that joined does not compact where it knows no configuration', async (t) => {
  const net = group();
  net.join('n4');
  net.proposeConf('n1', addLearner('n4'));
  net.propose('n1', 'more');
  t.ok(net.node('n4').status().applied >= 3, 'n4 applied the log from the start');
  t.equal(net.node('n4').compact(1, bytes('s')), null, 'below its first conf entry: nothing is compacted');
  t.ok(net.compact('n4') !== null, 'from its first conf entry on, it compacts');
});

t.test('a learner receives only committed entries, so an uncommitted suffix on it never blocks the election a promotion needs', async (t) => {
  const net = group();
  net.join('n4');
  net.proposeConf('n1', addLearner('n4'));
  // n1 appends the promotion of n4, which reaches no one: n1 now needs three of four.
  net.filter = (m) => !(m.from === 'n1' && m.type === 'app');
  t.equal(code(net.proposeConf('n1', { type: 'promote', node: 'n4' })), 'ok');
  net.heal();
  net.isolate('n1');
  // n2 wins under {n1, n2, n3}; its entries reach only the learner n4, then n2 is lost for good.
  net.filter = (m) => !(m.from === 'n2' && m.type === 'app' && m.to !== 'n4');
  net.campaign('n2');
  t.equal(net.node('n2').status().role, 'leader');
  net.propose('n2', 'uncommitted');
  t.notOk(net.appliedData('n2').includes('uncommitted'), 'the learner does not make a quorum');
  t.ok(
    net.delivered.every((m) => !(m.from === 'n2' && m.to === 'n4' && m.type === 'app' && m.entries.some((e) => e.term === net.node('n2').status().term))),
    'the learner received none of the leader\'s uncommitted entries',
  );
  net.heal();
  net.isolate('n2');
  // n1 counts n4 as a voter (its promotion is n1's latest entry) and needs n1, n3 and n4; n3
  // needs n1, whose log is longer. Had n4 received n2's entries, it would refuse n1 forever.
  net.tickAll(200, ['n1', 'n3', 'n4']);
  const leader = ['n1', 'n3', 'n4'].find((id) => net.node(id).status().role === 'leader');
  if (!t.ok(leader !== undefined, `a leader was elected without n2 (${leader})`)) return;
  net.propose(leader as string, 'after');
  t.ok(net.appliedData('n4').includes('after'), 'and the group commits');
});
