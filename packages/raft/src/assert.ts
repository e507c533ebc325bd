// Invariant checks. A failed assertion is a bug in this library (or a corrupted store),
// never a bad input: it throws at once so that the node crashes loudly instead of
// replicating a wrong log.

export class RaftInvariantError extends Error {
  override name = 'RaftInvariantError';
}

export function assert(cond: boolean, what: string): asserts cond {
  if (!cond) throw new RaftInvariantError(`raft invariant violated: ${what}`);
}
