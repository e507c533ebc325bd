// Proves that the checkers can fail: deliberately broken variants of the library and of
// its caller are run through the simulator, and a fixed seed range catches each one.
//
// - The Figure 8 bug: a leader commits an entry of an earlier term by counting replicas.
//   Leader completeness (or state-machine safety) fires in seeds 1..100.
// - The persist-before-send bug: a caller sends a Ready's messages before its write is
//   durable. Durability fires in seeds 1..10.
import t from 'tap';
import { Raft } from '../raft.js';
import { RawNode } from '../rawnode.js';
import type { Boot, Config } from '../types.js';
import { runSimulation, type SimOptions, type SimResult } from './simulation.js';

/** CountingRaft commits whatever a quorum holds, whatever its term: the Figure 8 bug. */
class CountingRaft extends Raft {
  protected override maybeCommit(): boolean {
    const index = this.quorumMatch();
    if (index <= this.log.committed) return false;
    this.log.commitTo(index);
    return true;
  }
}

class CountingNode extends RawNode {
  protected override createRaft(config: Config, boot: Boot): Raft {
    return new CountingRaft(config, boot);
  }
}

function failures(from: number, count: number, opts: Omit<SimOptions, 'seed'>): SimResult[] {
  const out: SimResult[] = [];
  for (let seed = from; seed < from + count; seed++) {
    const r = runSimulation({ seed, ...opts });
    if (!r.ok) out.push(r);
  }
  return out;
}

t.test('committing a previous-term entry by counting replicas (Figure 8) is caught in seeds 1..100', async (t) => {
  const caught = failures(1, 100, { factory: (c, b) => new CountingNode(c, b) });
  t.ok(caught.length > 0, `caught by seeds ${caught.map((r) => r.seed).join(' ')}`);
  const safety = caught.filter((r) => ['leaderCompleteness', 'stateMachineSafety'].includes(r.violation?.checker ?? ''));
  t.ok(safety.length > 0, `a safety checker fired: ${caught.map((r) => r.violation?.message).join('; ')}`);
});

t.test('sending messages before the Ready is persisted is caught in seeds 1..10', async (t) => {
  const caught = failures(1, 10, { sendBeforePersist: true });
  t.ok(caught.length >= 5, `caught by seeds ${caught.map((r) => r.seed).join(' ')}`);
  t.ok(
    caught.some((r) => r.violation?.checker === 'durability'),
    `an acknowledged entry was found on fewer than a quorum of disks: ${caught.map((r) => r.violation?.message).join('; ')}`,
  );
});
