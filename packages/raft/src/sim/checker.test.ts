// Proves that each safety checker fires on a state that breaks its property, built by
// hand from real nodes whose state is then tampered with, and stays quiet on a healthy
// group.
import t from 'tap';
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
