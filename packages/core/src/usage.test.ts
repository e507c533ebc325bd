// Proves the usage-balance law of the specification: moves of one intent are
// validated together on the combined post-state, negative deltas are admitted
// exactly when the chain holds, ownership is checked before currency, nothing is
// partly applied, and every refusal message states the exact figures.
import t from 'tap';
import { TABLES } from './store.js';
import { COUNTER_MAX } from './int128.js';
import { AGENT_B, Harness, intent, verdictOf } from './testing.js';
import { usageReport } from './usage.js';

const move = (usage: string, minor: bigint, currency = 'USD') => ({ usage, amount: { minor, currency } });

function setup() {
  return Harness.bootstrap();
}

function report(h: Harness, id = 'usage_llm_a') {
  return usageReport(h.state.usages.get(id)!);
}

function refusal(h: Harness, over: Record<string, unknown>): string {
  const before = h.stateHash;
  const a = h.run(intent(over));
  if (a.result.ok) throw new Error('expected a refusal');
  if (h.stateHash !== before) throw new Error('a refused intent changed the state');
  return `${a.result.error.error}/${a.result.error.kind}: ${a.result.error.message}`;
}

t.test('consume, meter and bill of the same amount in one intent is lawful and reconciles', async (t) => {
  const h = setup();
  t.equal(verdictOf(h.run(intent({ consume_usage: move('usage_llm_a', 500n), meter_usage: move('usage_llm_a', 500n), bill_usage: move('usage_llm_a', 500n) }))), 'Permitted');
  const r = report(h);
  t.same([r.consumed, r.metered, r.billed, r.unmetered, r.unbilled, r.reconciled], [500n, 500n, 500n, 0n, 0n, true]);
  t.equal(r.text, 'Usage balance usage_llm_a (USD): 500 consumed, 500 metered, 500 billed. Everything consumed is metered and billed. Reconciled.');
});

t.test('any subset of the moves is lawful; consumption in flight is not a fault', async (t) => {
  const h = setup();
  h.ok(intent({ consume_usage: move('usage_llm_a', 1500n) }));
  h.ok(intent({ meter_usage: move('usage_llm_a', 1000n) }));
  h.ok(intent({ bill_usage: move('usage_llm_a', 400n) }));
  const r = report(h);
  t.same([r.consumed, r.metered, r.billed, r.unmetered, r.unbilled, r.reconciled], [1500n, 1000n, 400n, 500n, 600n, false]);
  t.equal(r.text, 'Usage balance usage_llm_a (USD): 1500 consumed, 1000 metered, 400 billed. 500 consumed but not yet metered; 600 metered but not yet billed. Not reconciled.');
});

t.test('metering above consumption is refused with the worked example message', async (t) => {
  const h = setup();
  h.ok(intent({ consume_usage: move('usage_llm_a', 1500n) }));
  t.equal(refusal(h, { meter_usage: move('usage_llm_a', 2000n) }),
    'substrate_rejected/validation: Metering 2000 would bring the metered total to 2000, above the 1500 consumed; 0 is already metered and 1500 is consumed but not yet metered.');
  h.ok(intent({ meter_usage: move('usage_llm_a', 1200n) }));
  t.equal(refusal(h, { meter_usage: move('usage_llm_a', 400n) }),
    'substrate_rejected/validation: Metering 400 would bring the metered total to 1600, above the 1500 consumed; 1200 is already metered and 300 is consumed but not yet metered.');
});

t.test('billing above metering is refused with the exact figures', async (t) => {
  const h = setup();
  h.ok(intent({ consume_usage: move('usage_llm_a', 1500n), meter_usage: move('usage_llm_a', 1000n), bill_usage: move('usage_llm_a', 700n) }));
  t.equal(refusal(h, { bill_usage: move('usage_llm_a', 500n) }),
    'substrate_rejected/validation: Billing 500 would bring the billed total to 1200, above the 1000 metered; 700 is already billed and 300 is metered but not yet billed.');
});

t.test('the combined post-state is what is judged: a consume in the same intent makes room to meter', async (t) => {
  const h = setup();
  h.ok(intent({ consume_usage: move('usage_llm_a', 100n) }));
  t.equal(verdictOf(h.run(intent({ consume_usage: move('usage_llm_a', 900n), meter_usage: move('usage_llm_a', 1000n) }))), 'Permitted');
  t.equal(refusal(h, { consume_usage: move('usage_llm_a', 10n), meter_usage: move('usage_llm_a', 20n) }),
    'substrate_rejected/validation: Metering 20 would bring the metered total to 1020, above the 1010 consumed; 1000 is already metered and 10 is consumed but not yet metered.');
});

t.test('a negative delta is a correction admitted exactly when the chain still holds', async (t) => {
  const h = setup();
  h.ok(intent({ consume_usage: move('usage_llm_a', 1000n), meter_usage: move('usage_llm_a', 800n), bill_usage: move('usage_llm_a', 300n) }));
  t.equal(verdictOf(h.run(intent({ consume_usage: move('usage_llm_a', -200n) }))), 'Permitted');
  t.equal(refusal(h, { consume_usage: move('usage_llm_a', -1n) }),
    'substrate_rejected/validation: Consuming -1 would bring the consumed total to 799, below the 800 metered; 800 is metered and 800 was consumed.');
  t.equal(refusal(h, { meter_usage: move('usage_llm_a', -600n) }),
    'substrate_rejected/validation: Metering -600 would bring the metered total to 200, below the 300 billed; 300 is billed and 800 was metered.');
  t.equal(refusal(h, { bill_usage: move('usage_llm_a', -301n) }),
    'substrate_rejected/validation: Billing -301 would bring the billed total to -1, below zero; 300 is billed.');
  t.equal(refusal(h, { consume_usage: move('usage_llm_a', -801n), meter_usage: move('usage_llm_a', -800n), bill_usage: move('usage_llm_a', -300n) }),
    'substrate_rejected/validation: Consuming -801 would bring the consumed total to -1, below zero; 800 is consumed.');
  t.equal(refusal(h, { consume_usage: move('usage_llm_a', -800n), meter_usage: move('usage_llm_a', -801n), bill_usage: move('usage_llm_a', -300n) }),
    'substrate_rejected/validation: Metering -801 would bring the metered total to -1, below zero; 800 is metered.');
  t.equal(verdictOf(h.run(intent({ bill_usage: move('usage_llm_a', -300n), meter_usage: move('usage_llm_a', -800n), consume_usage: move('usage_llm_a', -800n) }))), 'Permitted');
  const r = report(h);
  t.same([r.consumed, r.metered, r.billed, r.reconciled], [0n, 0n, 0n, true]);
});

t.test('ownership is checked before currency, and says nothing about the balance', async (t) => {
  const h = setup();
  const other = 'substrate_rejected/validation: Usage balance usage_llm_b cannot be moved by this agent.';
  t.equal(refusal(h, { consume_usage: move('usage_llm_b', 1n, 'EUR') }), other, 'another party: no currency disclosed');
  t.equal(refusal(h, { consume_usage: move('usage_unowned', 1n) }), 'substrate_rejected/validation: Usage balance usage_unowned cannot be moved by this agent.');
  t.equal(refusal(h, { consume_usage: move('usage_never', 1n) }), 'substrate_rejected/validation: Usage balance usage_never cannot be moved by this agent.');
  t.equal(refusal(h, { consume_usage: move('usage_llm_a', 1n, 'EUR') }),
    'substrate_rejected/validation: The consume move is in EUR but usage balance usage_llm_a is kept in USD.');
  t.equal(refusal(h, { agent: AGENT_B, entries: [], consume_usage: move('usage_llm_a', 1n, 'EUR') }),
    'substrate_rejected/validation: Usage balance usage_llm_a cannot be moved by this agent.');
});

t.test('a refused move refuses the whole intent, journal legs included', async (t) => {
  const h = setup();
  const cash = () => h.state.accounts.get('acc_cash_a')!.totals.find(([c]) => c === 'USD')?.[1];
  refusal(h, { minor: 100n, meter_usage: move('usage_llm_a', 1n) });
  t.equal(cash(), undefined, 'nothing posted');
  t.equal(h.store.keysUnder(TABLES.transaction.prefix).length, 0, 'nothing recorded');
});

t.test('counters run beyond 2^64 and stop at 2^128-1 with a clear error', async (t) => {
  const h = setup();
  const big = (1n << 127n) - 1n;
  h.ok(intent({ consume_usage: move('usage_llm_a', 18446744073709551621n) }));
  t.equal(report(h).consumed, 18446744073709551621n);
  h.ok(intent({ consume_usage: move('usage_llm_a', big) }));
  h.ok(intent({ consume_usage: move('usage_llm_a', big - 18446744073709551621n) }));
  t.equal(report(h).consumed, 2n * big);
  h.ok(intent({ consume_usage: move('usage_llm_a', 1n) }));
  t.equal(report(h).consumed, COUNTER_MAX);
  t.equal(refusal(h, { consume_usage: move('usage_llm_a', 1n) }),
    'substrate_rejected/validation: Consuming 1 would bring the consumed total to 340282366920938463463374607431768211456, above the limit of 340282366920938463463374607431768211455.');
  h.ok(intent({ meter_usage: move('usage_llm_a', big), bill_usage: move('usage_llm_a', big) }));
  const r = report(h);
  t.same([r.metered, r.billed, r.unmetered, r.unbilled], [big, big, big + 1n, 0n]);
});
