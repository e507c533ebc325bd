// Proves, over 500 seeded runs with faults (seeds 1001..1500), that no safety
// checker fires after any step (election safety, log matching, leader completeness,
// state-machine safety, durability of acknowledged proposals, linearizable reads) and that
// every group elects a leader and commits again once the faults heal. The seed ranges are
// split across files so that tap runs them in parallel.
import t from 'tap';
import { describeResult, runSeeds } from './main.js';

// The codec round trip of every message makes a seed slower; a loaded machine more so.
t.setTimeout(180_000);

const FROM = 1001;
const COUNT = 500;

t.test(`seeds ${FROM}..${FROM + COUNT - 1} with faults: every checker holds and the group recovers`, async (t) => {
  const { failed, events, counts } = runSeeds(FROM, COUNT);
  t.same(failed.map(describeResult), [], 'failing seeds (replay one with: npm run sim -- --seed S)');
  t.ok(events > COUNT * 1000, `the runs did real work (${events} events)`);
  // No checker may pass on runs where nothing happened: each kind of event it judges
  // must have occurred many times over the seeds (figures of 500 seeds, about a tenth).
  t.ok(counts.readsAnswered >= 5 * COUNT, `reads answered: ${counts.readsAnswered}`);
  t.ok(counts.acked >= 50 * COUNT, `proposals acknowledged: ${counts.acked}`);
  t.ok(counts.crashes >= 5 * COUNT, `crashes: ${counts.crashes}`);
  t.ok(counts.snapshotInstalls >= COUNT / 2, `snapshots installed from a leader: ${counts.snapshotInstalls}`);
  t.ok(counts.snapshotTransfersFailed >= COUNT / 10, `snapshot transfers failed: ${counts.snapshotTransfersFailed}`);
  t.ok(counts.pauses >= COUNT, `pauses: ${counts.pauses}`);
  t.ok(counts.writeFailures >= COUNT / 20, `failed writes: ${counts.writeFailures}`);
  t.ok(counts.compactionCrashes >= COUNT / 20, `crashes between compaction and its write: ${counts.compactionCrashes}`);
  t.ok(counts.wipeRefusals >= COUNT / 20, `starts refused on a wiped disk: ${counts.wipeRefusals}`);
});
