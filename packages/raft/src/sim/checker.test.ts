// Proves that each safety checker fires on a state that breaks its property, built by
// hand from real nodes whose state is then tampered with, and stays quiet on a healthy
// group.
import t from 'tap';
import { confState, encodeConfEntry } from '../membership.js';
import { Network, bytes } from '../testing.js';
import type { Entry } from '../types.js';
import { Checker, Violation, type CheckerName, type NodeView } from './checker.js';

function views(net: Network): NodeView[] {
  return net.ids.map((id) => ({ id, node: net.node(id), disk: net.member(id).store }));
}

/** fired runs `f` and names the checker that threw, or 'none'. */
function fired(f: () => void): CheckerName | 'none' {
  try {
    f();
  } catch (err) {
    if (err instanceof Violation) return err.checker;
    throw err;
  }
  return 'none';
}

/** a healthy three-node group with a committed proposal, and a checker that has seen it. */
function healthy(): { net: Network; checker: Checker } {
  const net = new Network(['a', 'b', 'c']);
  const checker = new Checker(['a', 'b', 'c']);
  net.campaign('a');
  net.propose('a', 'x');
  checker.afterStep(views(net));
  return { net, checker };
}

t.test('a healthy group passes every checker', async (t) => {
  const { net, checker } = healthy();
  net.propose('a', 'y');
  t.doesNotThrow(() => checker.afterStep(views(net)));
});

t.test('election safety: two leaders in one term', async (t) => {
  const { net, checker } = healthy();
  const b = net.node('b').raft;
  b.role = 'leader';
  t.equal(fired(() => checker.afterStep(views(net))), 'electionSafety');
});

t.test('log matching: two different entries with the same index and term', async (t) => {
  const { net, checker } = healthy();
  const c = net.node('c').raft.log;
  const last = c.entries[c.entries.length - 1] as Entry;
  c.entries[c.entries.length - 1] = { ...last, data: bytes('forged') };
  t.equal(fired(() => checker.afterStep(views(net))), 'logMatching');
});

t.test('leader completeness: a later leader without a committed entry', async (t) => {
  const { net, checker } = healthy();
  const c = net.node('c').raft;
  c.log.entries.length = 1;
  c.log.committed = 1;
  c.term = 5;
  c.role = 'leader';
  t.equal(fired(() => checker.afterStep(views(net))), 'leaderCompleteness');
});

t.test('state machine safety: two nodes apply different entries at one index', async (t) => {
  const checker = new Checker(['a', 'b', 'c']);
  checker.onApply('a', { index: 1, term: 1, data: bytes('x') }, 7);
  t.equal(fired(() => checker.onApply('b', { index: 1, term: 1, data: bytes('y') }, 7)), 'stateMachineSafety');
  t.equal(fired(() => checker.onApply('b', { index: 1, term: 1, data: bytes('x') }, 8)), 'stateMachineSafety');
  t.equal(fired(() => checker.onRestore('c', 1, 9)), 'stateMachineSafety');
});

t.test('durability: an acknowledged entry on fewer than a quorum of disks', async (t) => {
  const { net, checker } = healthy();
  const applied = net.member('a').applied;
  checker.onAck(applied[applied.length - 1] as Entry);
  t.doesNotThrow(() => checker.afterStep(views(net)), 'on three disks it is safe');
  for (const id of ['b', 'c']) {
    const store = net.member(id).store;
    (store as unknown as { durable: { entries: Entry[] } }).durable.entries = [];
  }
  t.equal(fired(() => checker.afterStep(views(net))), 'durability');
});

t.test('linearizable read: an answer older than an acknowledged write', async (t) => {
  const checker = new Checker(['a', 'b', 'c']);
  checker.onAck({ index: 5, term: 1, data: bytes('x') });
  checker.onReadAsked('r1');
  t.equal(fired(() => checker.onReadAnswered('a', { index: 4, context: bytes('r1') })), 'linearizableRead');
  checker.onReadAsked('r2');
  t.doesNotThrow(() => checker.onReadAnswered('a', { index: 5, context: bytes('r2') }));
});

t.test('durability is judged by the committed configuration: the disk of a removed member does not count', async (t) => {
  const { net, checker } = healthy();
  net.proposeConf('a', { type: 'remove', node: 'c' });
  const applied = net.member('a').applied;
  checker.onAck(applied.find((e) => e.data.length > 0 && e.type !== 'conf') as Entry);
  t.doesNotThrow(() => checker.afterStep(views(net)), 'a and b hold it');
  for (const id of ['a', 'b']) {
    const store = net.member(id).store;
    (store as unknown as { durable: { entries: Entry[] } }).durable.entries = [];
  }
  t.equal(fired(() => checker.afterStep(views(net))), 'durability', 'only c, no longer a voter, holds it');
});

t.test('membership: a leader holding two changes that are not known committed', async (t) => {
  const { net, checker } = healthy();
  net.join('d');
  net.isolate('b');
  net.isolate('c');
  net.proposeConf('a', { type: 'addLearner', node: 'd' });
  t.doesNotThrow(() => checker.afterStep(views(net)), 'one uncommitted change');
  // A second change appended behind the library's back, as a leader without the
  // one-at-a-time rule would.
  const r = net.node('a').raft;
  const conf = confState(['a', 'b', 'c', 'd'], [], r.conf.context);
  const e: Entry = { index: r.log.lastIndex() + 1, term: r.term, type: 'conf', data: encodeConfEntry({ change: { type: 'promote', node: 'd' }, conf }) };
  r.log.append([e]);
  r.confs.track([e], () => true);
  t.equal(fired(() => checker.afterStep(views(net))), 'membership');
});

t.test('membership: an applied change must make, from the configuration before it, the one it carries', async (t) => {
  const checker = new Checker(['a', 'b', 'c']);
  const change = (index: number, node: string, voters: string[], removed: string[]): Entry => ({
    index,
    term: 1,
    type: 'conf',
    data: encodeConfEntry({ change: { type: 'remove', node }, conf: confState(voters, [], {}, removed) }),
  });
  t.doesNotThrow(() => checker.onApply('a', change(1, 'c', ['a', 'b'], ['c']), 1), 'a valid one-server change');
  t.equal(fired(() => checker.onApply('a', change(2, 'b', ['c'], ['b', 'c']), 2)), 'membership', 'a change that carries another configuration');
  const other = new Checker(['a', 'b', 'c']);
  other.onApply('a', change(1, 'c', ['a', 'b'], ['c']), 1);
  t.equal(fired(() => other.onApply('a', change(2, 'b', ['a'], ['c']), 2)), 'membership', 'a removal that forgets the id it removed');
});
