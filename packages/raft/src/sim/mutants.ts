// Deliberately broken variants of the library and of its caller, to show that the
// simulator's checkers can fail. Each is a small override of one rule; the mutation
// table (`npm run sim -- --mutants`, sim/mutants.test.ts) runs them over seeds and
// counts the seeds that catch each one.
import type { Progress } from '../progress.js';
import { Raft } from '../raft.js';
import { RawNode } from '../rawnode.js';
import type { Boot, Config, NodeId } from '../types.js';
import type { SimOptions } from './simulation.js';

/** Commits whatever a quorum holds, whatever its term: the Figure 8 bug (§5.4.2). */
class CountingRaft extends Raft {
  protected override maybeCommit(): boolean {
    const index = this.quorumMatch();
    if (index <= this.log.committed) return false;
    this.log.commitTo(index);
    return true;
  }
}

/** Answers a read at its commit index at once, without the heartbeat round that proves it still leads. */
class NoHeartbeatReadRaft extends Raft {
  protected override handleReadIndex(from: NodeId, context: Uint8Array): void {
    if (!this.committedEntryInCurrentTerm()) return super.handleReadIndex(from, context);
    this.respondRead(from, this.log.committed, context);
  }
}

/** Serves reads before its own term's no-op commits: it may not know the latest commit index (§8). */
class NoNoopGateRaft extends Raft {
  protected override committedEntryInCurrentTerm(): boolean {
    return true;
  }
}

/** Resends a snapshot every election timeout, whatever the transfer in flight: a slow one never finishes. */
class BlindResendRaft extends Raft {
  private readonly waited = new Map<Progress, number>();
  protected override tickSnapshot(pr: Progress): void {
    const n = (this.waited.get(pr) ?? 0) + 1;
    this.waited.set(pr, n);
    if (n < this.cfg.electionTicks) return;
    this.waited.delete(pr);
    pr.pendingSnapshot = 0;
    pr.becomeProbe();
  }
}

function nodeOf(R: new (c: Config, b: Boot) => Raft): SimOptions['factory'] {
  class Node extends RawNode {
    protected override createRaft(config: Config, boot: Boot): Raft {
      return new R(config, boot);
    }
  }
  return (c, b) => new Node(c, b);
}

export interface Mutant {
  name: string;
  /** the checkers expected to catch it. */
  checkers: string[];
  options: Omit<SimOptions, 'seed'>;
}

export const MUTANTS: Mutant[] = [
  { name: 'Figure 8: a previous-term entry committed by counting replicas', checkers: ['leaderCompleteness', 'stateMachineSafety', 'durability'], options: { factory: nodeOf(CountingRaft) } },
  { name: 'messages sent before the Ready is persisted', checkers: ['durability', 'electionSafety', 'stateMachineSafety', 'leaderCompleteness'], options: { sendBeforePersist: true } },
  { name: 'ReadIndex without a heartbeat round', checkers: ['linearizableRead'], options: { factory: nodeOf(NoHeartbeatReadRaft) } },
  { name: 'no-op gate removed (reads before the term\'s first commit)', checkers: ['linearizableRead'], options: { factory: nodeOf(NoNoopGateRaft) } },
  { name: 'snapshot resent blindly every election timeout', checkers: ['snapshotTransfer'], options: { factory: nodeOf(BlindResendRaft) } },
  { name: 'empty store accepted after a wiped disk', checkers: ['durability', 'electionSafety', 'stateMachineSafety', 'leaderCompleteness', 'logMatching'], options: { acceptEmptyStore: true } },
];
