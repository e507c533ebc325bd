// Proves the dry run: a draft bundle is judged against the facts of recorded
// intents (the node reads a page of them; here the last N), the verdicts it would change
// are reported with the rule and basis that would decide, intents decided by an
// obligation are counted and not re-judged, intents the draft would refuse before
// judgement (single_currency) are listed with that refusal, the report names the
// draft's content hash, and nothing in the ledger changes.
import t from 'tap';
import { dryRun, type DryRunReport } from './dryrun.js';
import { bundleHash } from './policy/bundle.js';
import { EVIDENCE, Harness, intent } from './testing.js';

const POLICY = {
  rules: [
    { id: 'R-cap', modality: 'prohibition', priority: 10, match: { action: 'purchase.*' },
      when: [{ left: 'amount', op: 'gt', right: 1000, currency: 'USD' }], basis: 'cap' },
    { id: 'R-purchase', modality: 'permission', priority: 100, match: { action: 'purchase.*' }, basis: 'buy',
      obligations: [{ id: 'O-receipt', action: 'receipt.attach', deadline_ticks: 1,
        discharge_when: [{ left: 'evidence', op: 'count_gte', right: 1 }],
        repair: [{ id: 'D-refund', action: 'purchase.refund', deadline_ticks: 5, blocks: ['purchase.*'] }] }] },
  ],
};
const TIGHTER = {
  rules: [
    { id: 'R-cap', modality: 'prohibition', priority: 10, match: { action: 'purchase.*' },
      when: [{ left: 'amount', op: 'gt', right: 100, currency: 'USD' }], basis: 'cap' },
    { id: 'R-purchase', modality: 'permission', priority: 100, match: { action: 'purchase.*' }, basis: 'buy' },
  ],
};

function report(h: Harness, bundle: unknown, limit: number): DryRunReport {
  const r = dryRun(h.recorded(limit), bundle);
  if (!r.ok) throw new Error(JSON.stringify(r.issues));
  return r.report;
}

/**
 * Six records: a small purchase and its receipt, a large purchase, a purchase whose
 * receipt never comes, a purchase its refund duty then blocks, an unknown action.
 */
function history(): Harness {
  const h = Harness.bootstrap(POLICY);
  h.ok(intent({ transaction: 'txn_small', minor: 500n }));
  h.ok(intent({ transaction: 'txn_large', minor: 5000n }));
  h.ok(intent({ transaction: 'txn_receipt', entries: [], action: { action: 'receipt.attach', bindings: { obligation: 'obl_txn_small_O-receipt' } }, evidence: [EVIDENCE] }));
  h.ok(intent({ transaction: 'txn_forgot', minor: 60n }));
  h.tick(2);
  h.ok(intent({ transaction: 'txn_blocked', minor: 50n }));
  h.ok(intent({ transaction: 'txn_other', minor: 50n, action: { action: 'other.thing', bindings: {} } }));
  return h;
}

t.test('a dry run reports each verdict the draft would change, with its rule and basis', async (t) => {
  const h = history();
  const recorded = h.recorded(100).map((r) => [r.transaction, r.outcome.verdict]);
  t.same(recorded, [
    ['txn_small', 'Permitted'], ['txn_large', 'ForbiddenRejected'], ['txn_receipt', 'Permitted'], ['txn_forgot', 'Permitted'],
    ['txn_blocked', 'RepairOutstandingRejected'], ['txn_other', 'NotPermittedRejected'],
  ], 'the history is what the test means it to be');
  t.same(report(h, TIGHTER, 10), {
    bundle_hash: bundleHash(TIGHTER),
    evaluated: 4,
    unchanged: 3,
    decided_by_obligations: 2,
    changed: [{ transaction: 'txn_small', party: 'party_acme', recorded: 'Permitted', would_be: 'ForbiddenRejected', winning_rule: 'R-cap',
      basis: 'Purchase of 500 USD minor units exceeds the 100 limit of rule R-cap' }],
    refused: [],
  });
  const loose = { rules: [{ id: 'R-any', modality: 'permission', priority: 1, match: { action: '*' }, basis: 'anything' }] };
  t.same(report(h, loose, 10).changed, [
    { transaction: 'txn_large', party: 'party_acme', recorded: 'ForbiddenRejected', would_be: 'Permitted', winning_rule: 'R-any' },
    { transaction: 'txn_other', party: 'party_acme', recorded: 'NotPermittedRejected', would_be: 'Permitted', winning_rule: 'R-any' },
  ], 'a change to Permitted has no basis');
});

t.test('a dry run changes nothing in the ledger', async (t) => {
  const h = history();
  const before = h.stateHash;
  const head = h.head;
  report(h, TIGHTER, 10);
  t.equal(h.stateHash, before);
  t.equal(h.head, head);
});

t.test('a dry run reads the facts each intent was judged on, its commit tick included', async (t) => {
  const h = Harness.bootstrap();
  h.ok(intent({ transaction: 'txn_early' }));
  h.tick(5);
  h.ok(intent({ transaction: 'txn_late' }));
  const window = { rules: [{ id: 'R-window', modality: 'permission', priority: 1, match: { action: '*' }, when: [{ left: 'tick', op: 'lte', right: 2 }], basis: 'early only' }] };
  t.same(report(h, window, 10).changed.map((c) => [c.transaction, c.would_be]), [['txn_late', 'NotPermittedRejected']]);
});

t.test('a dry run judges exactly the records it is given', async (t) => {
  const h = history();
  const counted = (limit: number) => { const r = report(h, TIGHTER, limit); return r.evaluated + r.decided_by_obligations; };
  t.same([0, 1, 2, 6, 7].map(counted), [0, 1, 2, 6, 6]);
  t.same(report(h, TIGHTER, 2), { bundle_hash: bundleHash(TIGHTER), evaluated: 1, unchanged: 1, decided_by_obligations: 1, changed: [], refused: [] }, 'the last two: the blocked and the other');
});

t.test('a draft that does not compile is answered with its issues', async (t) => {
  const h = history();
  t.same(dryRun(h.recorded(10), { rules: [{ id: 'R', modality: 'permission', priority: 1, match: { action: '*' }, basis: 'b', when: [{ left: 'colour', op: 'eq', right: 'red' }] }] }), {
    ok: false,
    issues: [{ path: 'rules.0.when.0.left', message: 'rule R: the evaluator cannot read "colour" (it reads amount, currency, accounts, evidence, party, agent, action, tick, usage.consume, usage.meter, usage.bill, usage.balance and bindings.<name>)' }],
  });
});

t.test('a basis names the policy dry-run, whatever its state, and (draft) for a bundle that is none', async (t) => {
  const h = history();
  const nothingCovers = { rules: [{ id: 'R-other', modality: 'permission', priority: 1, match: { action: 'refund.*' }, basis: 'refunds' }] };
  const named = dryRun(h.recorded(10), nothingCovers, 'pol_2026_12');
  if (!named.ok) throw new Error('the bundle is valid');
  t.ok(named.report.changed.length > 0);
  for (const c of named.report.changed) t.match(c.basis, /^No permission of policy pol_2026_12 covers /);
  const bare = dryRun(h.recorded(10), nothingCovers);
  if (!bare.ok) throw new Error('the bundle is valid');
  t.match(bare.report.changed[0]!.basis, /^No permission of policy \(draft\) covers /);
});

t.test('an intent in two currencies, of an action the draft marks single_currency, is listed as refused before judgement', async (t) => {
  const h = Harness.bootstrap(POLICY);
  h.ok(intent({ transaction: 'txn_one', minor: 5n }));
  const leg = (account: string, side: string, minor: bigint, currency: string) => ({ account, side, amount: { minor, currency } });
  h.ok(intent({ transaction: 'txn_two', entries: [leg('acc_cash_a', 'Debit', 5n, 'USD'), leg('acc_books_a', 'Credit', 5n, 'USD'), leg('acc_cash_a', 'Debit', 7n, 'EUR'), leg('acc_books_a', 'Credit', 7n, 'EUR')] }));
  t.equal(h.recorded(1)[0]!.outcome.verdict, 'Permitted', 'recorded under a policy with no single_currency rule');
  const single = { rules: TIGHTER.rules.map((r) => (r.id === 'R-purchase' ? { ...r, single_currency: true } : r)) };
  const r = report(h, single, 2);
  t.same(r.refused, [{ transaction: 'txn_two', party: 'party_acme', recorded: 'Permitted', error: 'multi_currency_mandate_charge',
    message: 'Action purchase.book moves one currency (rule R-purchase is single_currency); this intent has legs in EUR and USD.' }]);
  t.same([r.evaluated, r.unchanged, r.changed.length], [2, 1, 0], 'counted in evaluated, not as unchanged');
  t.same(report(h, TIGHTER, 2).refused, [], 'without the flag it is judged as before');
});
