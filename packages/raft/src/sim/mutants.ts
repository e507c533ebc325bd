// Deliberately broken variants of the library and of its caller, to show that the
// simulator's checkers can fail. Each is a small override of one rule; the mutation
// table (`npm run sim -- --mutants`, sim/mutants.test.ts) runs them over seeds and
// counts the seeds that catch each one.
import type { Progress } from '../progress.js';
import { Raft } from '../raft.js';
import { RawNode } from '../rawnode.js';
import type { Boot, ConfChange, Config, NodeId } from '../types.js';
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

/**
 * Counts its own copy of every entry in its log toward a quorum, written or not. With
 * appends sent before the write, the followers' answers can then commit an entry the
 * leader has only in memory: one follower and a leader that crashes hold it on two of
 * three disks in name, one in fact.
 */
class UnwrittenSelfRaft extends Raft {
  protected override quorumMatch(): number {
    const matches = this.conf.voters.map((p) => (p === this.id ? this.log.lastIndex() : (this.prs.get(p) as Progress).match)).sort((a, b) => b - a);
    return matches[this.quorum - 1] as number;
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

/**
 * Proposes a change while another is uncommitted. Two changes in flight may move the
 * voters by two, and a majority of the configuration after both need not overlap a
 * majority of the one before them (dissertation §4.1).
 */
class TwoChangesRaft extends Raft {
  protected override confChangeRefusal(change: ConfChange): string | null {
    if (!this.committedEntryInCurrentTerm()) return 'the leader has not yet committed an entry of its term';
    if (change.type === 'remove' && change.node === this.id) return 'the leader is not removed';
    return null;
  }
}

/**
 * Proposes a change before committing an entry of its own term: the dissertation's
 * §4.1 as first published. A change of the previous leader may sit uncommitted in a few
 * logs; a change of the new leader on top of another base can commit with a majority
 * that does not overlap the majority of the other one, which may then elect its leader
 * and overwrite committed entries (the bug reported and corrected in 2015).
 */
class EarlyChangeRaft extends Raft {
  protected override confChangeRefusal(change: ConfChange): string | null {
    if (this.confs.lastIndex() > this.log.committed) return 'one change at a time';
    if (change.type === 'remove' && change.node === this.id) return 'the leader is not removed';
    return null;
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

/** The checkers that judge what members hold and apply, whatever the membership rules. */
const SAFETY = ['electionSafety', 'logMatching', 'leaderCompleteness', 'stateMachineSafety', 'durability'];

export interface Mutant {
  name: string;
  /** the checkers expected to catch it. */
  checkers: string[];
  options: Omit<SimOptions, 'seed'>;
}

export const MUTANTS: Mutant[] = [
  { name: 'Figure 8: a previous-term entry committed by counting replicas', checkers: ['leaderCompleteness', 'stateMachineSafety', 'durability'], options: { factory: nodeOf(CountingRaft) } },
  { name: 'messages sent before the Ready is persisted', checkers: ['durability', 'electionSafety', 'stateMachineSafety', 'leaderCompleteness'], options: { sendBeforePersist: true } },
  { name: 'appends sent before the write, the leader counting its unwritten copy', checkers: SAFETY, options: { factory: nodeOf(UnwrittenSelfRaft), pipeline: true } },
  { name: 'ReadIndex without a heartbeat round', checkers: ['linearizableRead'], options: { factory: nodeOf(NoHeartbeatReadRaft) } },
  { name: 'no-op gate removed (reads before the term\'s first commit)', checkers: ['linearizableRead'], options: { factory: nodeOf(NoNoopGateRaft) } },
  { name: 'snapshot resent blindly every election timeout', checkers: ['snapshotTransfer'], options: { factory: nodeOf(BlindResendRaft) } },
  { name: 'empty store accepted after a wiped disk', checkers: ['durability', 'electionSafety', 'stateMachineSafety', 'leaderCompleteness', 'logMatching'], options: { acceptEmptyStore: true } },
  { name: 'two changes in flight', checkers: ['membership', ...SAFETY], options: { factory: nodeOf(TwoChangesRaft) } },
  {
    name: 'two changes in flight, the one-at-a-time check off',
    checkers: SAFETY,
    options: { factory: nodeOf(TwoChangesRaft), checkOneAtATime: false },
  },
  { name: "change before the leader's own-term commit (the 2015 bug)", checkers: [...SAFETY, 'membership'], options: { factory: nodeOf(EarlyChangeRaft) } },
];
