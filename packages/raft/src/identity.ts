// The identity a member's log store records at bootstrap, and the check every start
// runs against it. A member that lost its disk must not come back under its old id
// with an empty store: it would forget the vote it cast and the entries it
// acknowledged, and a quorum that counted on them would silently no longer exist.
import type { Boot, NodeId } from './types.js';

/**
 * Identity is written once, when a member's store is first used. `members` are the
 * voters the group was bootstrapped with (empty for a member that joined a running
 * group); the configuration in force afterwards is in the log, not here.
 */
export interface Identity {
  clusterId: string;
  nodeId: NodeId;
  members: NodeId[];
}

/**
 * `new`: the members start together for the first time; `existing`: the group already
 * runs, so a member with an empty store is one that lost its disk; `join`: a new member
 * of a running group, which waits with an empty store until a leader adds it (as a
 * learner) and sends it the log or a snapshot.
 */
export type ClusterState = 'new' | 'existing' | 'join';

export type StartCheck = { ok: true; bootstrap: boolean } | { ok: false; message: string };

/** Whether a Boot is that of a store never written to. */
export function isEmptyBoot(boot: Boot): boolean {
  return boot.snapshot === null && boot.entries.length === 0 && boot.hardState.term === 0 && boot.hardState.vote === null;
}

/**
 * checkStart decides whether a member may start on its store: `stored` is the identity
 * the store holds (null if none), `configured` what the configuration says. `bootstrap`
 * says the caller must write `configured` before it starts.
 */
export function checkStart(o: { stored: Identity | null; configured: Identity; clusterState: ClusterState; empty: boolean }): StartCheck {
  const { stored, configured: c } = o;
  if (stored !== null) {
    if (stored.clusterId !== c.clusterId) {
      return { ok: false, message: `this store belongs to cluster "${stored.clusterId}", but the configuration names "${c.clusterId}": refusing to mix the two (point data_dir at this cluster's store)` };
    }
    if (stored.nodeId !== c.nodeId) {
      return { ok: false, message: `this store belongs to member ${stored.nodeId}, but the configuration says this is ${c.nodeId}: a store never changes hands (point data_dir at ${c.nodeId}'s store)` };
    }
    return { ok: true, bootstrap: false };
  }
  if (o.empty && o.clusterState === 'existing') {
    return {
      ok: false,
      message: `member ${c.nodeId} has an empty store, but its configuration says cluster "${c.clusterId}" already runs (cluster_state: existing). ` +
        'A member that lost its disk must not rejoin under its old id: it would forget its vote and the entries it acknowledged. ' +
        'Do not start it on an empty store: add a new member in its place (cluster_state: join), then remove this one; see docs/operations.md, "Replacing a dead replica".',
    };
  }
  // A store written before identities existed keeps its data and gets its identity now.
  return { ok: true, bootstrap: true };
}
