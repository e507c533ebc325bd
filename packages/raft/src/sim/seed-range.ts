// What each seed-range test (seeds-{a,b,c,d}.test.ts) proves over its 500 seeds. The
// ranges are split across files so that tap runs them in parallel.
import type { Test } from 'tap';
import { describeResult, runSeeds } from './main.js';

/**
 * Seeds that fail on a defect that is known and still open, each named in docs/raft.md
 * ("What the checkers caught"). A range must fail exactly on its known seeds: a new
 * failure fails the test, and so does a known seed that passes (update this list and
 * the docs when a fix lands). None is open.
 */
export const KNOWN_OPEN: Readonly<Record<number, string>> = {};

/**
 * checkSeedRange runs seeds [from, from + count) with faults: no checker may fire, every
 * group must recover once the faults heal, and every kind of event the checkers judge
 * must have happened many times, so that no checker passes on runs where nothing did.
 * The minimums sit well below what 500 seeds do (docs/raft.md has the figures).
 */
export function checkSeedRange(t: Test, from: number, count: number): void {
  const { failed, events, counts } = runSeeds(from, count);
  const known = Object.keys(KNOWN_OPEN).map(Number).filter((s) => s >= from && s < from + count);
  t.same(failed.filter((r) => !known.includes(r.seed)).map(describeResult), [], 'failing seeds (replay one with: npm run sim -- --seed S)');
  for (const s of known) t.ok(failed.some((r) => r.seed === s && r.violation?.checker === 'liveness'), `seed ${s} still fails on its known open defect: ${KNOWN_OPEN[s]}`);
  t.ok(events > count * 1000, `the runs did real work (${events} events)`);
  t.ok(counts.readsAnswered >= 5 * count, `reads answered: ${counts.readsAnswered}`);
  t.ok(counts.acked >= 50 * count, `proposals acknowledged: ${counts.acked}`);
  t.ok(counts.crashes >= 5 * count, `crashes: ${counts.crashes}`);
  t.ok(counts.snapshotInstalls >= count / 2, `snapshots installed from a leader: ${counts.snapshotInstalls}`);
  t.ok(counts.snapshotTransfersFailed >= count / 10, `snapshot transfers failed: ${counts.snapshotTransfersFailed}`);
  t.ok(counts.pauses >= count, `pauses: ${counts.pauses}`);
  t.ok(counts.writeFailures >= count / 20, `failed writes: ${counts.writeFailures}`);
  t.ok(counts.compactionCrashes >= count / 20, `crashes between compaction and its write: ${counts.compactionCrashes}`);
  t.ok(counts.wipeRefusals >= count / 20, `starts refused on a wiped disk: ${counts.wipeRefusals}`);
  // Membership: every kind of change proposed and committed, refusals, leaders that
  // crashed in the middle of a change, removed members told of their removal, removed
  // ids refused when the operator adds them back.
  t.ok(counts.addsProposed >= count / 4, `learners proposed: ${counts.addsProposed}`);
  t.ok(counts.promotesProposed >= count / 10, `promotions proposed: ${counts.promotesProposed}`);
  t.ok(counts.removesProposed >= count / 4, `removals proposed: ${counts.removesProposed}`);
  t.ok(counts.learnersAdded >= count / 5, `learners added (committed): ${counts.learnersAdded}`);
  t.ok(counts.learnersPromoted >= count / 10, `learners promoted (committed): ${counts.learnersPromoted}`);
  t.ok(counts.membersRemoved >= count / 5, `members removed (committed): ${counts.membersRemoved}`);
  t.ok(counts.confRefused >= count, `changes refused: ${counts.confRefused}`);
  t.ok(counts.confInterrupted >= count / 10, `leaders crashed with a change uncommitted: ${counts.confInterrupted}`);
  t.ok(counts.removedTold >= count / 10, `removed members told of their removal: ${counts.removedTold}`);
  t.ok(counts.reuseRefused >= count / 2, `removed ids refused when added back: ${counts.reuseRefused}`);
}
