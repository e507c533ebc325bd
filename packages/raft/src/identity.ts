// The identity a member's log store records at bootstrap, and the check every start
// runs against it. A member that lost its disk must not come back under its old id
// with an empty store: it would forget the vote it cast and the entries it
// acknowledged, and a quorum that counted on them would silently no longer exist.
import type { Boot, NodeId } from './types.js';

/** Identity is written once, when a member's store is first used. */
export interface Identity {
  clusterId: string;
  nodeId: NodeId;
  members: NodeId[];
}

/**
 * `new`: the members start together for the first time; `existing`: the group already
 * runs, so a member with an empty store is one that lost its disk (or a new member,
 * which static membership does not admit).
 */
export type ClusterState = 'new' | 'existing';

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
    if ([...stored.members].sort().join(',') !== [...c.members].sort().join(',')) {
      return { ok: false, message: `this store was bootstrapped with members [${stored.members.join(', ')}], the configuration lists [${c.members.join(', ')}]: membership is static, the member list cannot change by configuration` };
    }
    return { ok: true, bootstrap: false };
  }
  if (o.empty && o.clusterState === 'existing') {
    return {
      ok: false,
      message: `member ${c.nodeId} has an empty store, but its configuration says cluster "${c.clusterId}" already runs (cluster_state: existing). ` +
        'A member that lost its disk must not rejoin under its old id: it would forget its vote and the entries it acknowledged. ' +
        'Do not start it on an empty store; see docs/operations.md, "Replacing a member".',
    };
  }
  // A store written before identities existed keeps its data and gets its identity now.
  return { ok: true, bootstrap: true };
}
