// Proves that the checkers can fail: each deliberately broken variant of sim/mutants.ts
// (of the library, or of its caller) is run over a fixed seed range, and some seeds
// catch every one, by one of the checkers expected to. Among them the two membership
// mutants: a leader with two changes in flight (also with the one-at-a-time check off,
// so that only a lost or divergent entry or two leaders of a term can catch it), and a
// change before the leader's own-term commit (the 2015 bug). The full table over 300
// seeds is `npm run sim -- --mutants` (docs/raft.md has its figures).
import t from 'tap';
import { catches } from './main.js';
import { MUTANTS } from './mutants.js';

t.setTimeout(300_000);

/** Seeds per mutant here; the 300-seed figures are in docs/raft.md. */
const SEEDS = 100;

for (const m of MUTANTS) {
  t.test(`${m.name}: caught`, async (t) => {
    // Figure 8 needs a rare interleaving: it is run over more seeds.
    const count = m.name.startsWith('Figure 8') ? 3 * SEEDS : SEEDS;
    const { caught, by } = catches(m, 1, count);
    t.ok(caught > 0, `caught by ${caught} of ${count} seeds (${JSON.stringify(by)})`);
    t.ok(Object.keys(by).some((c) => m.checkers.includes(c)), `by an expected checker (${m.checkers.join(', ')}): ${JSON.stringify(by)}`);
  });
}
