// Invariant checks. A failed assertion is a bug in this library (or a corrupted store),
// never a bad input: it throws at once so that the node crashes loudly instead of
// replicating a wrong log.

export class RaftInvariantError extends Error {
  override name = 'RaftInvariantError';
}

export function assert(cond: boolean, what: string): asserts cond {
  if (!cond) throw new RaftInvariantError(`raft invariant violated: ${what}`);
}

/**
 * This member's log ends before an index the leader knows it holds (the leader counted
 * this member's acknowledgement of it): its storage lost writes it had acknowledged,
 * an older copy of it put back or a disk that dropped synced writes. It must not go on
 * as this member (its acknowledgements helped commit what it no longer has); as etcd's
 * raft does, it stops.
 */
export class LostLogError extends RaftInvariantError {
  override name = 'LostLogError';
  constructor(readonly acknowledged: number, readonly lastIndex: number, readonly leader: string) {
    super(`raft invariant violated: the leader ${leader} commits up to index ${acknowledged}, which this member acknowledged, but its log ends at ${lastIndex}`);
  }
}
