// Proves, over 500 seeded runs with faults (seeds 501..1000), that no safety checker
// fires after any step (election safety, log matching, leader completeness, state-machine
// safety, durability of acknowledged and committed entries, linearizable reads, snapshot
// transfers, membership) and that every group elects a leader and commits again once the
// faults heal, with every kind of fault and membership change counted (seed-range.ts).
import t from 'tap';
import { checkSeedRange } from './seed-range.js';

// The codec round trip of every message makes a seed slower; a loaded machine more so.
t.setTimeout(180_000);

t.test('seeds 501..1000 with faults: every checker holds and the group recovers', async (t) => {
  checkSeedRange(t, 501, 500);
});
