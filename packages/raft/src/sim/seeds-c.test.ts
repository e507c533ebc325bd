// Proves, over 500 seeded runs with faults (seeds 1001..1500), that no safety
// checker fires after any step (election safety, log matching, leader completeness,
// state-machine safety, durability of acknowledged proposals, linearizable reads) and that
// every group elects a leader and commits again once the faults heal. The seed ranges are
// split across files so that tap runs them in parallel.
import t from 'tap';
import { describeResult, runSeeds } from './main.js';

const FROM = 1001;
const COUNT = 500;

t.test(`seeds ${FROM}..${FROM + COUNT - 1} with faults: every checker holds and the group recovers`, async (t) => {
  const { failed, events } = runSeeds(FROM, COUNT);
  t.same(failed.map(describeResult), [], 'failing seeds (replay one with: npm run sim -- --seed S)');
  t.ok(events > COUNT * 1000, `the runs did real work (${events} events)`);
});
