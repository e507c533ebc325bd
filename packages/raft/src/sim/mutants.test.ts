// Proves that the checkers can fail: each deliberately broken variant of sim/mutants.ts
// (of the library, or of its caller) is run over a fixed seed range, and some seed
// catches every one, by one of the checkers expected to (the seeds run in order up to
// the first that does: the seeds after it cannot change the verdict). Among them the
// two membership mutants: a leader with two changes in flight (also with the
// one-at-a-time check off, so that only a lost or divergent entry or two leaders of a
// term can catch it), and a change before the leader's own-term commit (the 2015 bug).
// The full table over 300 seeds is `npm run sim -- --mutants` (docs/raft.md has its
// figures).
import t from 'tap';
import { CHECKERS } from './checker.js';
import { firstCatch } from './main.js';
import { MUTANTS } from './mutants.js';

t.setTimeout(300_000);

/** Seeds per mutant here; the 300-seed figures are in docs/raft.md. */
const SEEDS = 100;

for (const m of MUTANTS) {
  t.test(`${m.name}: caught`, async (t) => {
    // Figure 8 needs a rare interleaving: it is run over more seeds.
    const count = m.name.startsWith('Figure 8') ? 3 * SEEDS : SEEDS;
    const first = firstCatch(m, 1, count);
    t.ok(first !== null, first === null
      ? `no seed of ${count} is caught by an expected checker (${m.checkers.join(', ')})`
      : `seed ${first.seed} is caught by ${first.checker}, an expected checker${Object.keys(first.before).length === 0 ? '' : ` (seeds before it by others: ${JSON.stringify(first.before)})`}`);
  });
}

t.test('the code as it is, run the same way: no seed is caught', async (t) => {
  const first = firstCatch({ name: 'none', checkers: [...CHECKERS], options: {} }, 1, 20);
  t.equal(first, null, 'seeds 1 to 20 pass every checker');
});
