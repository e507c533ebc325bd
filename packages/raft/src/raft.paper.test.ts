// Proves the rules of the Raft paper (§5: terms, election, replication, safety), one test
// per rule, in the manner of etcd's raft paper tests. Most tests drive a bare state
// machine message by message; the Figure 8 story runs through a five-node network.
import t from 'tap';
import type { Raft } from './raft.js';
import { MemoryLogStore } from './storage.js';
import { boot, bytes, ents, msg, Network, newRaft, seeded, takeMsgs, text } from './testing.js';
import type { Message, NodeId } from './types.js';

const ABC = ['a', 'b', 'c'];

/** persist marks everything in the log durable, as advance() would after a save. */
function persist(r: Raft): void {
  r.log.handed = r.log.lastIndex();
  r.log.stableTo(r.log.entries);
  r.onPersisted();
}

/** elect makes `r` leader by handing it a granted vote from a majority of `peers`. */
function elect(r: Raft, peers: NodeId[]): void {
  r.hup();
  for (const p of peers) {
    if (p === r.id || r.role === 'leader') continue;
    r.step(msg({ type: 'voteResp', from: p, to: r.id, term: r.term }));
  }
  persist(r);
  takeMsgs(r);
}

function types(ms: Message[]): string[] {
  return ms.map((m) => `${m.type}->${m.to}`);
}

t.test('servers start up as followers (§5.2)', async (t) => {
  const r = newRaft('a', ABC);
  t.equal(r.role, 'follower');
  t.equal(r.term, 0);
  t.equal(r.leader, null);
});

t.test('a server that sees a larger term adopts it and reverts to follower (§5.1)', async (t) => {
  for (const start of ['follower', 'candidate', 'leader'] as const) {
    const r = newRaft('a', ABC);
    if (start === 'candidate') r.hup();
    if (start === 'leader') elect(r, ABC);
    t.equal(r.role, start);
    r.step(msg({ type: 'app', from: 'b', to: 'a', term: 5 }));
    t.equal(r.term, 5, `${start} adopts term 5`);
    t.equal(r.role, 'follower', `${start} becomes follower`);
    t.equal(r.leader, 'b', `${start} learns the leader`);
    t.equal(r.vote, null, `${start} has not voted in term 5`);
  }
});

t.test('a server rejects a request with a stale term (§5.1)', async (t) => {
  const r = newRaft('a', ABC, boot([], { term: 2 }));
  r.step(msg({ type: 'app', from: 'b', to: 'a', term: 1, index: 0, logTerm: 0, entries: ents([1]) }));
  t.equal(r.log.lastIndex(), 0, 'the stale append is not applied');
  t.equal(r.term, 2);
  t.same(takeMsgs(r), [], 'without pre-vote or check-quorum the stale request gets no answer');
  // "Reply false if term < currentTerm" (Figure 2): a stale vote request is refused with
  // the current term, so that the candidate learns the term it must exceed.
  r.step(msg({ type: 'vote', from: 'c', to: 'a', term: 1, index: 5, logTerm: 1 }));
  const answers = takeMsgs(r);
  t.same(answers.map((m) => [m.type, m.to, m.term, m.reject]), [['voteResp', 'c', 2, true]]);
  t.equal(r.vote, null, 'and no vote is cast');
});

t.test('a leader sends heartbeats to every follower each heartbeat timeout (§5.2)', async (t) => {
  const r = newRaft('a', ABC, boot(), { heartbeatTicks: 1 });
  elect(r, ABC);
  r.tick();
  t.same(types(takeMsgs(r)).sort(), ['heartbeat->b', 'heartbeat->c']);
});

t.test('a follower that hears nothing for an election timeout starts an election (§5.2)', async (t) => {
  const r = newRaft('a', ABC);
  for (let k = 0; k < 20 && r.role === 'follower'; k++) r.tick();
  t.equal(r.role, 'candidate');
  t.equal(r.term, 1, 'it increments its term');
  t.equal(r.vote, 'a', 'it votes for itself');
  const sent = takeMsgs(r);
  t.same(types(sent).sort(), ['vote->b', 'vote->c'], 'it asks every other server for a vote');
  t.ok(sent.every((m) => m.term === 1));
});

t.test('a candidate whose election times out starts a new election in the next term (§5.2)', async (t) => {
  const r = newRaft('a', ABC);
  r.hup();
  takeMsgs(r);
  for (let k = 0; k < 20 && r.term === 1; k++) r.tick();
  t.equal(r.role, 'candidate');
  t.equal(r.term, 2);
  t.same(types(takeMsgs(r)).sort(), ['vote->b', 'vote->c']);
});

t.test('a candidate wins with votes from a majority, loses to a majority of rejections, else waits (§5.2)', async (t) => {
  const cases: { size: number; votes: Record<string, boolean>; role: string }[] = [
    { size: 1, votes: {}, role: 'leader' },
    { size: 3, votes: { n2: true, n3: true }, role: 'leader' },
    { size: 3, votes: { n2: true }, role: 'leader' },
    { size: 5, votes: { n2: true, n3: true, n4: true, n5: true }, role: 'leader' },
    { size: 5, votes: { n2: true, n3: true }, role: 'leader' },
    { size: 3, votes: {}, role: 'candidate' },
    { size: 5, votes: { n2: true }, role: 'candidate' },
    { size: 5, votes: { n2: false, n3: false }, role: 'candidate' },
    { size: 3, votes: { n2: false, n3: false }, role: 'follower' },
    { size: 5, votes: { n2: false, n3: false, n4: false }, role: 'follower' },
    { size: 5, votes: { n2: true, n3: false, n4: false, n5: false }, role: 'follower' },
  ];
  for (const c of cases) {
    const peers = Array.from({ length: c.size }, (_, k) => `n${k + 1}`);
    const r = newRaft('n1', peers);
    r.hup();
    for (const [from, granted] of Object.entries(c.votes)) {
      r.step(msg({ type: 'voteResp', from, to: 'n1', term: 1, reject: !granted }));
    }
    t.equal(r.role, c.role, `size ${c.size}, votes ${JSON.stringify(c.votes)}`);
    t.equal(r.term, 1);
  }
});

t.test('each server votes for at most one candidate per term, first come first served (§5.2)', async (t) => {
  const cases: { vote: NodeId | null; from: NodeId; granted: boolean }[] = [
    { vote: null, from: 'b', granted: true },
    { vote: null, from: 'c', granted: true },
    { vote: 'b', from: 'b', granted: true },
    { vote: 'c', from: 'c', granted: true },
    { vote: 'b', from: 'c', granted: false },
    { vote: 'c', from: 'b', granted: false },
  ];
  for (const c of cases) {
    const r = newRaft('a', ABC, boot([], { term: 1, vote: c.vote }));
    r.step(msg({ type: 'vote', from: c.from, to: 'a', term: 1 }));
    const [answer] = takeMsgs(r);
    t.equal(answer?.type, 'voteResp');
    t.equal(answer?.reject, !c.granted, `voted ${c.vote}, asked by ${c.from}`);
  }
});

t.test('a follower restarts its election timer only when it grants a vote or hears from the leader (Figure 2)', async (t) => {
  // Its log ends (2, 2): a candidate of term 3 whose log ends (1, 1) is refused.
  const r = newRaft('a', ABC, boot(ents([1, 2]), { term: 2 }));
  for (let k = 0; k < 5; k++) r.tick();
  r.step(msg({ type: 'vote', from: 'b', to: 'a', term: 3, index: 1, logTerm: 1 }));
  t.equal(r.term, 3, 'the new term is adopted');
  t.ok(r.electionElapsed >= 5, 'but refusing the vote does not restart the timer');
  r.step(msg({ type: 'vote', from: 'c', to: 'a', term: 4, index: 2, logTerm: 2 }));
  t.equal(r.vote, 'c');
  t.equal(r.electionElapsed, 0, 'granting a vote restarts it');
  for (let k = 0; k < 3; k++) r.tick();
  r.step(msg({ type: 'heartbeat', from: 'c', to: 'a', term: 4 }));
  t.equal(r.electionElapsed, 0, 'hearing from the leader restarts it');
});

t.test('without pre-vote, candidates with stale logs do not hold back those that can win (§5.2, §5.4.1)', async (t) => {
  // Logs strictly ordered s1 > s2 > s3 > s4 > s5: s4 and s5 can never win, yet they time
  // out and campaign in higher terms as often as the others.
  const logs: Record<string, number[]> = { s1: [1, 2, 2, 2], s2: [1, 2, 2], s3: [1, 2], s4: [1, 1], s5: [1] };
  let worst = 0;
  for (let seed = 1; seed <= 30; seed++) {
    const net = new Network(Object.keys(logs), { preVote: false });
    for (const [id, terms] of Object.entries(logs)) {
      const store = new MemoryLogStore();
      store.saveSync({ hardState: { term: 2, vote: null, commit: 1 }, snapshot: null, entries: ents(terms), mustSync: true });
      net.start(id, store, { random: seeded(seed * 10 + Number(id.slice(1))) });
    }
    let ticks = 0;
    while (net.leader() === null && ticks < 1000) {
      net.tickAll(1);
      ticks++;
    }
    t.ok(['s1', 's2', 's3'].includes(net.leader() ?? ''), `seed ${seed}: ${net.leader()} leads after ${ticks} ticks`);
    worst = Math.max(worst, ticks);
  }
  t.ok(worst <= 30, `every election ended within ${worst} ticks, three election timeouts`);
});

t.test('a member that refuses a candidate whose log is behind its own campaigns within half an election timeout', async (t) => {
  const behind = (r: ReturnType<typeof newRaft>, term: number) => r.step(msg({ type: 'vote', from: 'b', to: 'a', term, index: 1, logTerm: 1 }));
  const r = newRaft('a', ABC, boot(ents([1, 2]), { term: 2 }));
  r.tick();
  behind(r, 3);
  const soon = r.randomizedElectionTimeout - r.electionElapsed;
  t.ok(soon >= 1 && soon <= 5, `its timer now expires within half an election timeout (${soon} ticks)`);
  for (let k = 0; k < soon; k++) r.tick();
  t.equal(r.role, 'candidate', 'it campaigns then rather than at the end of its whole timeout');
  t.equal(r.term, 4);

  // Refused for another reason (its vote is given), it keeps its own timer.
  const given = newRaft('a', ABC, boot(ents([1, 2]), { term: 3, vote: 'c' }));
  given.tick();
  given.step(msg({ type: 'vote', from: 'b', to: 'a', term: 3, index: 2, logTerm: 2 }));
  given.tick();
  t.equal(given.role, 'follower', 'a vote already given is no reason to campaign');
  t.equal(given.electionElapsed, 2);

  // Following a live leader, it does not: the candidate of its term is stale, not a sign of a lost leader.
  const led = newRaft('a', ABC, boot(ents([1, 2]), { term: 3 }));
  led.step(msg({ type: 'heartbeat', from: 'c', to: 'a', term: 3 }));
  behind(led, 3);
  led.tick();
  t.equal(led.role, 'follower', 'a member that hears from its leader stays a follower');
  t.equal(led.electionElapsed, 1);
});

t.test('with pre-vote and check-quorum, the member with the best log leads within half an election timeout of the first timer', async (t) => {
  // n1 leads; n3 misses the last entry, so only n2 can win once n1 is lost. Whichever of
  // n2 and n3 times out first, n2 is elected within half an election timeout of it.
  let worstDelay = 0;
  let sumDelay = 0;
  for (let seed = 1; seed <= 40; seed++) {
    const net = new Network(['n1', 'n2', 'n3'], { preVote: true, checkQuorum: true });
    for (const id of ['n2', 'n3']) net.start(id, new MemoryLogStore(), { preVote: true, checkQuorum: true, random: seeded(seed * 7 + Number(id.slice(1))) });
    net.campaign('n1');
    net.propose('n1', 'both');
    net.cutLink('n1', 'n3');
    net.propose('n1', 'only n2');
    net.heal();
    net.isolate('n1');
    const timers = () => ['n2', 'n3'].map((id) => net.member(id).node.raft).map((r) => r.randomizedElectionTimeout - r.electionElapsed);
    const first = Math.min(...timers());
    let ticks = 0;
    while (net.leader() === 'n1' || net.leader() === null) {
      net.tickAll(1, ['n2', 'n3']);
      ticks++;
      if (ticks > 100) break;
    }
    t.equal(net.leader(), 'n2', `seed ${seed}: n2 leads after ${ticks} ticks (first timer ${first})`);
    worstDelay = Math.max(worstDelay, ticks - first);
    sumDelay += ticks - first;
  }
  t.ok(worstDelay <= 5, `elected at most ${worstDelay} ticks (mean ${(sumDelay / 40).toFixed(2)}) after the first timer expired`);
});

t.test('a candidate that hears from a leader of its term or later reverts to follower (§5.2)', async (t) => {
  for (const term of [1, 2]) {
    const r = newRaft('a', ABC);
    r.hup();
    r.step(msg({ type: 'app', from: 'b', to: 'a', term }));
    t.equal(r.role, 'follower', `append in term ${term}`);
    t.equal(r.term, term);
    t.equal(r.leader, 'b');
  }
});

t.test('election timeouts are randomized within [electionTicks, 2 * electionTicks) (§5.2)', async (t) => {
  const seen = new Set<number>();
  for (let seed = 0; seed < 200; seed++) {
    const r = newRaft('a', ABC, boot(), { random: seeded(seed) });
    let ticks = 0;
    while (r.role === 'follower') {
      r.tick();
      ticks++;
    }
    t.ok(ticks >= 10 && ticks < 20, `timeout ${ticks} in [10, 20)`);
    seen.add(ticks);
  }
  t.ok(seen.size > 5, 'the timeouts are spread out');
});

t.test('randomized election timeouts rarely collide: usually one server times out first (§5.2)', async (t) => {
  let collisions = 0;
  const rounds = 500;
  for (let k = 0; k < rounds; k++) {
    const rs = ABC.map((id, j) => newRaft(id, ABC, boot(), { random: seeded(k * 3 + j + 1) }));
    let firsts = 0;
    while (firsts === 0) {
      for (const r of rs) r.tick();
      firsts = rs.filter((r) => r.role === 'candidate').length;
    }
    if (firsts > 1) collisions++;
  }
  t.ok(collisions / rounds < 0.3, `collision rate ${collisions / rounds} is low`);
});

t.test('the leader appends a proposal to its log and sends it to every follower (§5.3)', async (t) => {
  const r = newRaft('a', ABC);
  elect(r, ABC);
  // Followers answer the no-op so that the leader streams to them.
  for (const p of ['b', 'c']) r.step(msg({ type: 'appResp', from: p, to: 'a', term: 1, index: 1 }));
  takeMsgs(r);
  const res = r.propose([bytes('x')]);
  t.ok(res.ok);
  t.same(r.log.entry(2)?.data, bytes('x'));
  const sent = takeMsgs(r);
  t.same(types(sent).sort(), ['app->b', 'app->c']);
  for (const m of sent) {
    t.equal(m.index, 1, 'prev index');
    t.equal(m.logTerm, 1, 'prev term');
    t.same(m.entries.map((e) => e.index), [2]);
  }
});

t.test('the leader commits an entry once a majority holds it, and tells the followers (§5.3)', async (t) => {
  const r = newRaft('a', ABC);
  elect(r, ABC);
  r.step(msg({ type: 'appResp', from: 'b', to: 'a', term: 1, index: 1 }));
  t.equal(r.log.committed, 1, 'the no-op commits with one follower and the durable leader');
  takeMsgs(r);
  r.propose([bytes('x')]);
  persist(r);
  t.equal(r.log.committed, 1, 'the leader alone is no majority');
  takeMsgs(r);
  r.step(msg({ type: 'appResp', from: 'b', to: 'a', term: 1, index: 2 }));
  t.equal(r.log.committed, 2);
  const sent = takeMsgs(r).filter((m) => m.type === 'app');
  t.ok(sent.length > 0 && sent.every((m) => m.commit === 2), 'the new commit index goes out');
});

t.test('an entry commits once a majority of the group acknowledges it (§5.3)', async (t) => {
  const cases: { size: number; acks: number; committed: boolean }[] = [
    { size: 1, acks: 0, committed: true },
    { size: 3, acks: 0, committed: false },
    { size: 3, acks: 1, committed: true },
    { size: 3, acks: 2, committed: true },
    { size: 5, acks: 1, committed: false },
    { size: 5, acks: 2, committed: true },
    { size: 5, acks: 4, committed: true },
  ];
  for (const c of cases) {
    const peers = Array.from({ length: c.size }, (_, k) => `n${k + 1}`);
    const r = newRaft('n1', peers);
    elect(r, peers);
    for (let k = 2; k <= c.acks + 1; k++) r.step(msg({ type: 'appResp', from: `n${k}`, to: 'n1', term: 1, index: 1 }));
    t.equal(r.log.committed === 1, c.committed, `size ${c.size}, ${c.acks} acks`);
  }
});

t.test('committing an entry commits every entry before it, earlier terms included (§5.3)', async (t) => {
  const r = newRaft('a', ABC, boot(ents([1, 1, 2]), { term: 2 }));
  elect(r, ABC);
  t.equal(r.term, 3);
  t.equal(r.log.committed, 0);
  r.step(msg({ type: 'appResp', from: 'b', to: 'a', term: 3, index: 4 }));
  t.equal(r.log.committed, 4, 'the no-op at 4 and entries 1..3 of terms 1 and 2 commit together');
});

t.test('a follower applies entries once it learns that they are committed (§5.3)', async (t) => {
  const net = new Network(ABC);
  net.campaign('a');
  net.isolate('c');
  net.node('a').propose([bytes('x')]);
  for (const m of net.process('a')) net.deliver(m);
  for (const m of net.process('b')) net.deliver(m);
  t.equal(net.node('a').status().commit, 2, 'x commits at the leader');
  // The commit index goes out in the leader's next Ready; b has not heard it yet.
  t.same(net.appliedData('b'), [], 'b holds x but has not applied it');
  net.heal();
  net.drain();
  t.same(net.appliedData('b'), ['x'], 'b applies x after the commit index reaches it');
});

t.test('a follower rejects an append whose previous entry it does not hold (§5.3)', async (t) => {
  // Follower log: terms [1, 2] at indexes 1, 2.
  const cases: { index: number; logTerm: number; reject: boolean; hint: number; hintTerm: number }[] = [
    { index: 0, logTerm: 0, reject: false, hint: 0, hintTerm: 0 },
    { index: 2, logTerm: 2, reject: false, hint: 0, hintTerm: 0 },
    { index: 1, logTerm: 1, reject: false, hint: 0, hintTerm: 0 },
    { index: 2, logTerm: 3, reject: true, hint: 2, hintTerm: 2 },
    { index: 3, logTerm: 3, reject: true, hint: 2, hintTerm: 2 },
    { index: 2, logTerm: 1, reject: true, hint: 1, hintTerm: 1 },
  ];
  for (const c of cases) {
    const r = newRaft('a', ABC, boot(ents([1, 2]), { term: 3 }));
    r.step(msg({ type: 'app', from: 'b', to: 'a', term: 3, index: c.index, logTerm: c.logTerm }));
    const [answer] = takeMsgs(r);
    t.equal(answer?.reject, c.reject, `prev (${c.index}, ${c.logTerm})`);
    if (c.reject) {
      t.equal(answer?.rejectHint, c.hint, 'hint: the last index that may agree');
      t.equal(answer?.logTerm, c.hintTerm, 'and its term');
    }
  }
});

t.test('a follower deletes a conflicting entry and all that follow it, and appends new ones (§5.3)', async (t) => {
  const cases: { index: number; logTerm: number; entries: number[]; want: number[]; persisted: number }[] = [
    { index: 2, logTerm: 2, entries: [3], want: [1, 2, 3], persisted: 2 },
    { index: 1, logTerm: 1, entries: [3, 4], want: [1, 3, 4], persisted: 1 },
    { index: 0, logTerm: 0, entries: [1], want: [1, 2], persisted: 2 },
    { index: 0, logTerm: 0, entries: [3], want: [3], persisted: 0 },
  ];
  for (const c of cases) {
    const r = newRaft('a', ABC, boot(ents([1, 2]), { term: 2 }));
    r.step(msg({ type: 'app', from: 'b', to: 'a', term: 4, index: c.index, logTerm: c.logTerm, entries: ents(c.entries, c.index + 1) }));
    const what = `append ${JSON.stringify(c.entries)} after (${c.index}, ${c.logTerm})`;
    t.same(r.log.entries.map((e) => e.term), c.want, what);
    t.equal(r.log.persisted, c.persisted, 'entries replaced in memory are no longer counted durable');
  }
});

t.test('the leader brings every follower log into agreement with its own (§5.3, Figure 7)', async (t) => {
  // The leader's log (Figure 7): terms 1 1 1 4 4 5 5 6 6 6; it leads in term 8.
  const lead = [1, 1, 1, 4, 4, 5, 5, 6, 6, 6];
  const followers = [
    [1, 1, 1, 4, 4, 5, 5, 6, 6], // (a) missing one entry
    [1, 1, 1, 4], // (b) missing many
    [1, 1, 1, 4, 4, 5, 5, 6, 6, 6, 6], // (c) one extra uncommitted entry
    [1, 1, 1, 4, 4, 5, 5, 6, 6, 6, 7, 7], // (d) extra entries of a later term
    [1, 1, 1, 4, 4, 4, 4], // (e) conflicting term-4 entries
    [1, 1, 1, 2, 2, 2, 3, 3, 3, 3, 3], // (f) a whole history of other terms
  ];
  for (const [k, f] of followers.entries()) {
    const net = new Network(['l', 'f', 'x']);
    net.members.clear();
    const seed = (terms: number[], term: number, vote: NodeId | null) => {
      const s = new MemoryLogStore();
      s.saveSync({ hardState: { term, vote, commit: 0 }, snapshot: null, entries: ents(terms), mustSync: true });
      return s;
    };
    net.start('l', seed(lead, 7, null));
    net.start('f', seed(f, 7, null));
    net.start('x', seed(lead, 7, null));
    net.campaign('l');
    t.equal(net.leader(), 'l', `(${'abcdef'[k]}) the leader is elected`);
    const want = net.node('l').raft.log.entries.map((e) => e.term);
    t.same(net.node('f').raft.log.entries.map((e) => e.term), want, `(${'abcdef'[k]}) the follower's log equals the leader's`);
  }
});

t.test('a candidate asks for votes with its last log index and term (§5.4.1)', async (t) => {
  const r = newRaft('a', ABC, boot(ents([1, 1, 2]), { term: 2 }));
  r.hup();
  for (const m of takeMsgs(r)) {
    t.equal(m.type, 'vote');
    t.equal(m.index, 3);
    t.equal(m.logTerm, 2);
    t.equal(m.term, 3);
  }
});

t.test('a candidate with a stale log loses the election (§5.4.1)', async (t) => {
  // Voter's log ends (index 2, term 2). "If the logs have last entries with different
  // terms, the later term is more up to date; with the same term, the longer log is."
  const cases: { index: number; logTerm: number; granted: boolean }[] = [
    { index: 1, logTerm: 1, granted: false },
    { index: 3, logTerm: 1, granted: false },
    { index: 1, logTerm: 2, granted: false },
    { index: 2, logTerm: 2, granted: true },
    { index: 3, logTerm: 2, granted: true },
    { index: 1, logTerm: 3, granted: true },
  ];
  for (const c of cases) {
    const r = newRaft('a', ABC, boot(ents([1, 2]), { term: 2 }));
    r.step(msg({ type: 'vote', from: 'b', to: 'a', term: 3, index: c.index, logTerm: c.logTerm }));
    const [answer] = takeMsgs(r);
    t.equal(answer?.reject, !c.granted, `candidate's last entry (${c.index}, ${c.logTerm})`);
  }
  // And through a whole election: the stale candidate cannot win.
  const net = new Network(ABC);
  net.campaign('a');
  net.isolate('c');
  net.propose('a', 'x');
  net.heal();
  net.campaign('c');
  t.not(net.leader(), 'c', 'c, which lacks x, is not elected');
});

t.test('the leader only commits entries from its current term (Figure 8)', async (t) => {
  // The leader of term 3 holds an entry of term 2 at index 2 that only it had.
  const r = newRaft('a', ['a', 'b', 'c', 'd', 'e'], boot(ents([1, 2]), { term: 2 }));
  elect(r, ['a', 'b', 'c', 'd', 'e']);
  t.equal(r.term, 3);
  // Followers b and c now hold index 2 (term 2): a majority of five with the leader.
  for (const p of ['b', 'c']) r.step(msg({ type: 'appResp', from: p, to: 'a', term: 3, index: 2 }));
  t.equal(r.log.committed, 0, 'an entry of an earlier term on a majority is not committed');
  for (const p of ['b', 'c']) r.step(msg({ type: 'appResp', from: p, to: 'a', term: 3, index: 3 }));
  t.equal(r.log.committed, 3, 'it commits with the current term no-op after it');
});

t.test('Figure 8: an entry of an earlier term on a majority can still be overwritten, so it must not commit', async (t) => {
  const S = ['s1', 's2', 's3', 's4', 's5'];
  const net = new Network(S);
  net.campaign('s1'); // term 1, no-op at index 1 everywhere

  // (a) s1 replicates A at index 2 to s2 only.
  for (const p of ['s3', 's4', 's5']) net.cutLink('s1', p);
  net.propose('s1', 'A');
  t.equal(net.node('s2').raft.log.lastIndex(), 2);

  // (b) s1 crashes; s5 wins term 2 with s3 and s4, appends B but replicates nothing.
  net.heal();
  net.isolate('s1');
  net.filter = (m) => !(m.from === 's5' && m.type === 'app');
  net.campaign('s5');
  t.equal(net.leader(), 's5');
  net.propose('s5', 'B');

  // (c) s5 crashes; s1 restarts and wins term 3; it replicates A to the others, but not
  // its own no-op. A is now on a majority.
  net.heal();
  net.isolate('s5');
  net.restart('s1');
  net.rewrite = (m) => (m.from === 's1' && m.type === 'app' ? { ...m, entries: m.entries.filter((e) => e.index <= 2) } : m);
  for (let k = 0; k < 5 && net.leader() !== 's1'; k++) net.campaign('s1');
  t.equal(net.leader(), 's1');
  t.ok(['s1', 's2', 's3'].every((s) => net.node(s).raft.log.term(2) === 1), 'A is on a majority');
  t.equal(net.node('s1').status().commit, 1, 'yet s1 does not commit A: it is of an earlier term');

  // (d) s1 crashes again; s5 restarts, wins with s2, s3 and s4, and overwrites A.
  net.heal();
  net.isolate('s1');
  net.restart('s5');
  for (let k = 0; k < 5 && net.leader() !== 's5'; k++) net.campaign('s5');
  t.equal(net.leader(), 's5');
  net.heal();
  net.tick('s5'); // a heartbeat reaches s1, which then catches up
  net.drain();
  net.propose('s5', 'C');
  for (const s of S) {
    t.same(net.appliedData(s), ['B', 'C'], `${s} never applied A`);
  }
});

t.test('a node persists its vote in the same Ready that carries the vote', async (t) => {
  const net = new Network(ABC);
  const b = net.node('b');
  b.step(msg({ type: 'vote', from: 'a', to: 'b', term: 1, index: 0, logTerm: 0 }));
  const rd = b.ready();
  t.same(rd.hardState, { term: 1, vote: 'a', commit: 0 });
  t.ok(rd.mustSync, 'the vote must be synced before the answer leaves');
  t.same(types(rd.messages), ['voteResp->a']);
});

t.test('the leader counts its own copy of an entry only once it is durable', async (t) => {
  const net = new Network(['solo']);
  const n = net.node('solo');
  n.campaign();
  let rd = n.ready();
  t.equal(rd.entries.length, 1, 'the no-op is to be persisted');
  t.same(rd.committedEntries, [], 'and is not committed before that');
  n.advance(rd);
  t.ok(n.hasReady());
  rd = n.ready();
  t.same(rd.committedEntries.map((e) => e.index), [1], 'it commits after advance');
  t.notOk(rd.mustSync, 'a commit-only change needs no fsync');
  n.advance(rd);
});

t.test('a follower replies to the leader only in a Ready that also persists the entries', async (t) => {
  const net = new Network(ABC);
  const b = net.node('b');
  b.step(msg({ type: 'app', from: 'a', to: 'b', term: 1, index: 0, logTerm: 0, entries: ents([1]) }));
  const rd = b.ready();
  t.same(rd.entries.map((e) => e.index), [1]);
  t.ok(rd.mustSync);
  t.same(types(rd.messages), ['appResp->a']);
});

t.test('log entries survive a restart: term, vote and log come back from the store', async (t) => {
  const net = new Network(ABC);
  net.campaign('a');
  net.propose('a', 'x', 'y');
  net.restart('b');
  const st = net.node('b').status();
  t.equal(st.term, 1);
  t.equal(st.vote, 'a');
  t.equal(st.lastIndex, 3);
  net.drain();
  net.propose('a', 'z');
  t.same(net.appliedData('b'), ['x', 'y', 'z'], 'b re-applies its committed entries after restart, then new ones');
  t.same(text(net.member('b').applied.at(-1)?.data ?? new Uint8Array()), 'z');
});

t.test('a member whose log lost what it acknowledged stops at the leader\'s next heartbeat, as etcd\'s raft does', async (t) => {
  const r = newRaft('a', ABC, boot(ents([1, 1]), { term: 1 }));
  r.step(msg({ type: 'heartbeat', from: 'b', to: 'a', term: 1, commit: 2 }));
  t.equal(r.log.committed, 2, 'a commit within its log is taken');
  // The leader commits no further than this member acknowledged (min of its match and
  // the commit): a higher one means the member's storage lost acknowledged entries.
  t.throws(() => r.step(msg({ type: 'heartbeat', from: 'b', to: 'a', term: 1, commit: 5 })),
    { name: 'LostLogError', acknowledged: 5, lastIndex: 2, leader: 'b' });
  t.equal(r.log.committed, 2, 'and nothing beyond its log is taken as committed');
});
