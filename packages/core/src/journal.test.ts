// Proves the conservative law: legs balance per currency, legs post only to the
// acting party's own accounts and to house accounts (and the refusal is not an
// existence oracle), totals stay within 128 bits, and a refused intent posts nothing.
import t from 'tap';
import { accountView, totalsOf } from './journal.js';
import { AGENT_B, Harness, intent, verdictOf } from './testing.js';

const leg = (account: string, side: string, minor: bigint, currency = 'USD') => ({ account, side, amount: { minor, currency } });

function refusal(h: Harness, entries: unknown[], agent?: string): string {
  const before = h.stateHash;
  const a = h.run(intent({ entries, ...(agent === undefined ? {} : { agent }) }));
  if (a.result.ok) throw new Error('expected a refusal');
  if (h.stateHash !== before) throw new Error('a refused intent changed the state');
  return a.result.error.message;
}

t.test('debits equal credits per currency, not in total', async (t) => {
  const h = Harness.bootstrap();
  t.equal(refusal(h, [leg('acc_cash_a', 'Debit', 100n), leg('acc_books_a', 'Credit', 90n)]),
    'Debits and credits do not balance in USD: 100 debited, 90 credited.');
  t.equal(refusal(h, [leg('acc_cash_a', 'Debit', 100n, 'EUR'), leg('acc_books_a', 'Credit', 100n, 'USD')]),
    'Debits and credits do not balance in EUR: 100 debited, 0 credited; in USD: 0 debited, 100 credited.', 'every currency that does not balance is named');
  const multi = [leg('acc_cash_a', 'Debit', 100n, 'EUR'), leg('acc_books_a', 'Credit', 100n, 'EUR'), leg('acc_cash_a', 'Debit', 7n), leg('acc_books_a', 'Credit', 3n), leg('acc_books_a', 'Credit', 4n)];
  t.equal(verdictOf(h.run(intent({ entries: multi }))), 'Permitted');
  t.same(accountView(h.state.accounts.get('acc_cash_a')!).balances, [
    { currency: 'EUR', debits: 100n, credits: 0n, net: 100n },
    { currency: 'USD', debits: 7n, credits: 0n, net: 7n },
  ]);
});

t.test('an intent may move no money', async (t) => {
  const h = Harness.bootstrap();
  t.equal(verdictOf(h.run(intent({ entries: [] }))), 'Permitted');
});

t.test("another party's account and a missing one are refused in the same words", async (t) => {
  const h = Harness.bootstrap();
  for (const account of ['acc_cash_b', 'acc_missing']) {
    t.equal(refusal(h, [leg('acc_cash_a', 'Debit', 5n), leg(account, 'Credit', 5n)]), `Account ${account} cannot be posted to by this agent.`);
  }
});

t.test('a house account (no owner) takes legs from any party, as a merchant or clearing account', async (t) => {
  const h = Harness.bootstrap();
  t.equal(verdictOf(h.run(intent({ entries: [leg('acc_cash_a', 'Debit', 5n), leg('acc_house', 'Credit', 5n)] }))), 'Permitted');
  t.equal(verdictOf(h.run(intent({ agent: AGENT_B, entries: [leg('acc_house', 'Debit', 5n), leg('acc_cash_b', 'Credit', 5n)] }))), 'Permitted');
  t.same(accountView(h.state.accounts.get('acc_house')!).balances, [{ currency: 'USD', debits: 5n, credits: 5n, net: 0n }]);
});

t.test('account totals stop at 2^128-1, counting every leg of the intent', async (t) => {
  const h = Harness.bootstrap();
  const max = (1n << 127n) - 1n;
  h.ok(intent({ entries: [leg('acc_cash_a', 'Debit', max), leg('acc_books_a', 'Credit', max)] }));
  h.ok(intent({ entries: [leg('acc_cash_a', 'Debit', max), leg('acc_books_a', 'Credit', max)] }));
  t.equal(refusal(h, [leg('acc_cash_a', 'Debit', 1n), leg('acc_cash_a', 'Debit', 1n), leg('acc_books_a', 'Credit', 2n)]),
    'Posting 1 USD would bring the debit total of account acc_cash_a to 340282366920938463463374607431768211456, above the limit of 340282366920938463463374607431768211455.');
  h.ok(intent({ entries: [leg('acc_cash_a', 'Debit', 1n), leg('acc_books_a', 'Credit', 1n)] }));
  t.equal(totalsOf(h.state.accounts.get('acc_cash_a')!, 'USD').debits, (1n << 128n) - 1n);
});

t.test('a house account\'s totals, which no agent reads, are not told in the refusal at its limit', async (t) => {
  const h = Harness.bootstrap();
  const max = (1n << 127n) - 1n;
  h.ok(intent({ entries: [leg('acc_cash_a', 'Debit', max), leg('acc_house', 'Credit', max)] }));
  h.ok(intent({ entries: [leg('acc_cash_a', 'Debit', max), leg('acc_house', 'Credit', max)] }));
  const said = refusal(h, [leg('acc_cash_b', 'Debit', 2n), leg('acc_house', 'Credit', 2n)], AGENT_B);
  t.equal(said, 'Posting 2 USD would bring the credit total of account acc_house above the limit of 340282366920938463463374607431768211455.');
  t.notMatch(said, /340282366920938463463374607431768211454/, 'the house account\'s total is not in it');
});
