// Proves the commit point's order of checks and its bookkeeping: idempotent replay,
// binding, trust and capability checks, the policy pin, the hash chain over every
// applied operation, and that refusals before judgement record nothing.
import t from 'tap';
import { chainLink, GENESIS_HASH } from './apply.js';
import { canonicalJson } from './canonical.js';
import { totalsOf } from './journal.js';
import { MemoryStore } from './memory-store.js';
import { LIMITS } from './schema.js';
import { AGENT_A, AGENT_B, Harness, intent, ISSUER, KEY_ID, OPERATOR, PARTY_A, PARTY_B, PUBLIC_KEY, verdictOf } from './testing.js';
import { outcomeView } from './views.js';

t.test('a committed transaction id replays its recorded outcome; nothing posts twice', async (t) => {
  const h = Harness.bootstrap();
  const op = intent({ transaction: 'txn_once', minor: 250n });
  h.ok(op);
  const first = outcomeView(h.txn('txn_once')!);
  const before = h.stateHash;
  const again = h.run({ ...op, entries: [] });
  t.same(again.result, { ok: true, value: { kind: 'replayed', transaction: 'txn_once' } });
  t.equal(h.stateHash, before, 'replay changes nothing');
  t.same(outcomeView(h.txn('txn_once')!), first);
  t.equal(totalsOf(h.state.accounts.get('acc_cash_a')!, 'USD').debits, 250n);
});

t.test("transaction ids are scoped per party: another party's use of an id is its own transaction", async (t) => {
  const h = Harness.bootstrap();
  h.ok(intent({ transaction: 'txn_shared' }));
  const b = h.run(intent({ transaction: 'txn_shared', agent: AGENT_B, entries: [
    { account: 'acc_cash_b', side: 'Debit', amount: { minor: 7n, currency: 'USD' } },
    { account: 'acc_books_b', side: 'Credit', amount: { minor: 7n, currency: 'USD' } },
  ] }));
  t.equal(verdictOf(b), 'Permitted', 'recorded for party B, not a replay of A');
  t.equal(h.txn('txn_shared', PARTY_A)!.party, PARTY_A);
  t.equal(h.txn('txn_shared', PARTY_B)!.party, PARTY_B);
  t.equal(totalsOf(h.state.accounts.get('acc_cash_b')!, 'USD').debits, 7n);
  t.equal(verdictOf(h.run(intent({ transaction: 'txn_shared', agent: AGENT_B, entries: [] }))), 'replayed', "and B's own resubmission replays B's outcome");
});

t.test('a replay wins over a stale pin: the recorded outcome is final', async (t) => {
  const h = Harness.bootstrap();
  const op = intent({ transaction: 'txn_pin' });
  h.ok(op);
  h.activate('pol_2', { rules: [{ id: 'R', modality: 'permission', priority: 1, match: { action: '*' }, basis: 'b' }] });
  t.equal(verdictOf(h.run(op)), 'replayed');
});

t.test('refusals before judgement record nothing and leave the transaction id free', async (t) => {
  const h = Harness.bootstrap();
  const cases: [Record<string, unknown>, string][] = [
    [{ agent: 'agent://nobody.example/agent/x' }, 'unknown_agent'],
    [{ authority: { issuer: 'other', key_id: KEY_ID, token_id: 't', capabilities: ['*'] } }, 'attestation'],
    [{ authority: { issuer: ISSUER, key_id: `k4.pid.${'C'.repeat(44)}`, token_id: 't', capabilities: ['*'] } }, 'attestation'],
    [{ authority: { issuer: ISSUER, key_id: KEY_ID, token_id: 't', capabilities: ['receipt.*'] } }, 'capability_mapping'],
    [{ policy: 'pol_0' }, 'policy_pin_mismatch'],
  ];
  for (const [over, code] of cases) {
    const before = h.stateHash;
    const a = h.run(intent({ transaction: 'txn_free', ...over }));
    t.equal(verdictOf(a), code);
    t.equal(h.stateHash, before, `${code} changes nothing`);
  }
  t.equal(verdictOf(h.run(intent({ transaction: 'txn_free' }))), 'Permitted', 'the id was still free');
});

t.test('a pin mismatch names the pinned and the active policy', async (t) => {
  const h = Harness.bootstrap();
  const a = h.run(intent({ policy: 'pol_old' }));
  t.same(a.result, { ok: false, error: { error: 'policy_pin_mismatch', message: 'The pinned policy pol_old is not the policy in force (pol_1).', pinned: 'pol_old', active: 'pol_1' } });
});

t.test('with no policy in force every intent is refused with no_active_policy', async (t) => {
  const h = new Harness();
  h.ok({ type: 'AddTrustRoot', v: 1, by: OPERATOR, issuer: ISSUER, public_key: PUBLIC_KEY, key_id: KEY_ID });
  h.ok({ type: 'AddParty', v: 1, by: OPERATOR, id: 'party_acme' });
  h.ok({ type: 'BindAgent', v: 1, by: OPERATOR, agent: AGENT_A, party: 'party_acme' });
  const a = h.run(intent({ policy: 'pol_1', entries: [] }));
  t.same(a.result, { ok: false, error: { error: 'no_active_policy', message: 'No policy is in force; the intent pinned pol_1.', pinned: 'pol_1', active: null } });
});

t.test('a capability grants by exact name or by prefix, the most specific one is cited', async (t) => {
  const h = Harness.bootstrap();
  const caps = (capabilities: string[]) => ({ authority: { issuer: ISSUER, key_id: KEY_ID, token_id: 'jti-9', capabilities } });
  h.ok(intent({ transaction: 'txn_cap', ...caps(['*', 'purchase.*', 'purchase.book']) }));
  t.same(h.txn('txn_cap')!.outcome.provenance.authority, { issuer: ISSUER, token_id: 'jti-9', capability: 'purchase.book' });
  t.equal(verdictOf(h.run(intent(caps(['purchase'])))), 'capability_mapping', 'purchase does not grant purchase.book');
  t.equal(verdictOf(h.run(intent(caps(['purchase.book.*'])))), 'capability_mapping');
});

t.test('what took effect extends the hash chain, judged refusals included; errors and replays do not', async (t) => {
  const h = Harness.bootstrap();
  const head = h.head;
  const refused = intent({ transaction: 'txn_refused', action: { action: 'other.thing', bindings: {} } });
  const a = h.run(refused);
  t.equal(verdictOf(a), 'Permitted', 'PERMIT_ALL permits it');
  t.equal(a.entry_hash, chainLink(head, canonicalJson(refused), a.result));
  t.equal(h.head, a.entry_hash);
  const b = h.run(intent({ transaction: 'txn_chain' }));
  t.equal(h.txn('txn_chain')!.entry_hash, b.entry_hash, 'the record keeps its link');
  t.equal(outcomeView(h.txn('txn_chain')!).provenance.entry_hash, b.entry_hash);

  const before = h.head;
  for (const op of [intent({ policy: 'pol_wrong' }), intent({ transaction: 'txn_chain' }), intent({ minor: 0n, entries: [{ account: 'acc_cash_a', side: 'Debit', amount: { minor: 1n, currency: 'USD' } }] })]) {
    const e = h.run(op);
    t.equal(e.entry_hash, null, `${verdictOf(e)} leaves no link`);
  }
  t.equal(h.head, before, 'the digest is unchanged by errors and replays');
  t.equal(h.store.meta.applied, h.log.length, 'the applied index still advances');
});

t.test('a judged refusal is recorded and chained like a posting', async (t) => {
  const h = Harness.bootstrap({ rules: [{ id: 'R-no', modality: 'prohibition', priority: 1, match: { action: '*' }, basis: 'Nothing today' }] });
  const head = h.head;
  const a = h.run(intent({ transaction: 'txn_no' }));
  t.equal(verdictOf(a), 'ForbiddenRejected');
  t.not(a.entry_hash, null);
  t.not(h.head, head);
});

t.test('the chain starts at the genesis hash and log indexes must increase', async (t) => {
  const s = new MemoryStore();
  t.equal(s.meta.head, GENESIS_HASH);
  s.apply(5, { type: 'Tick', v: 1 });
  t.equal(s.meta.applied, 5);
  t.throws(() => s.apply(5, { type: 'Tick', v: 1 }), /invariant/);
  s.skip(6);
  t.equal(s.meta.applied, 6, 'a no-op entry moves the applied index');
  t.throws(() => s.skip(6), /invariant/);
});

t.test('Tick advances the tick by one; an intent commits at the current tick', async (t) => {
  const h = Harness.bootstrap();
  const t0 = h.state.tick;
  h.tick(3);
  t.equal(h.state.tick, t0 + 3);
  h.ok(intent({ transaction: 'txn_at' }));
  t.equal(h.txn('txn_at')!.outcome.provenance.tick, t0 + 3);
});

t.test('admin operations refuse duplicates, unknown references and missing roles', async (t) => {
  const h = Harness.bootstrap();
  const code = (type: string, f: Record<string, unknown>, by = OPERATOR) => {
    const a = h.admin(type, f, by);
    return a.result.ok ? 'ok' : a.result.error.error;
  };
  t.equal(code('AddParty', { id: 'party_acme' }), 'already_exists');
  t.equal(code('AddTrustRoot', { issuer: ISSUER, public_key: PUBLIC_KEY, key_id: KEY_ID }), 'already_exists');
  t.equal(code('BindAgent', { agent: AGENT_A, party: 'party_acme' }), 'already_exists');
  t.equal(code('BindAgent', { agent: 'agent://x.example/agent/y', party: 'party_none' }), 'unknown_party');
  t.equal(code('OpenAccount', { id: 'acc_cash_a' }), 'already_exists');
  t.equal(code('OpenAccount', { id: 'acc_new', party: 'party_none' }), 'unknown_party');
  t.equal(code('OpenUsage', { id: 'usage_llm_a', currency: 'USD' }), 'already_exists');
  t.equal(code('UnbindAgent', { agent: 'agent://x.example/agent/y' }), 'unknown_binding');
  t.equal(code('RemoveTrustRoot', { issuer: 'nobody' }), 'unknown_trust_root');
  t.equal(code('AddParty', { id: 'party_new' }, { name: 'alice', roles: ['author'] }), 'forbidden');
  const dup = h.admin('AddParty', { id: 'party_acme' });
  t.same(dup.result, { ok: false, error: { error: 'already_exists', message: 'Party party_acme already exists.', id: 'party_acme' } });
});

t.test('an intent of version 2 counts an obligation with repair duties as its duties: no breach takes the party past the limit', async (t) => {
  const repairs = Array.from({ length: 8 }, (_, k) => ({ id: `D-r${k}`, action: 'purchase.refund', deadline_ticks: 1000 }));
  const bundle = { rules: [{ id: 'R-buy', modality: 'permission', priority: 1, match: { action: 'purchase.*' }, basis: 'b',
    obligations: [{ id: 'O-r', action: 'receipt.attach', deadline_ticks: 2, repair: repairs }] }] };
  const pending = (a: unknown) => ((a as { result: { value: { outcome: { obligations_pending: unknown[] } } } }).result.value.outcome.obligations_pending.length);
  const h = Harness.bootstrap(bundle);
  const per = LIMITS.obligationsOwedMax / 8;
  for (let i = 0; i < per; i++) h.ok(intent({ v: 2, transaction: `txn_r${i}`, entries: [] }));
  const over = h.run(intent({ v: 2, transaction: 'txn_r_over', entries: [] }));
  t.same(over.result, { ok: false, error: { error: 'substrate_rejected', kind: 'validation',
    message: `The party's obligations count ${LIMITS.obligationsOwedMax} against its limit of ${LIMITS.obligationsOwedMax} (an obligation with repair duties counts as the duties its breach would create); this intent would add 8. Discharge some first.` } });
  h.tick(3);
  const after = h.run(intent({ v: 2, transaction: 'txn_r_look', entries: [], action: { action: 'refund.look', bindings: {} } }));
  t.equal(pending(after), LIMITS.obligationsOwedMax, `every one breached: ${per} obligations became ${LIMITS.obligationsOwedMax} repair duties, none beyond the limit`);

  // A log written by version 1 is judged as it was, so that it replays and verifies the same.
  const old = Harness.bootstrap(bundle);
  for (let i = 0; i < per + 8; i++) old.ok(intent({ v: 1, transaction: `txn_r${i}`, entries: [] }));
  old.tick(3);
  t.equal(pending(old.run(intent({ v: 1, transaction: 'txn_r_look', entries: [], action: { action: 'refund.look', bindings: {} } }))), (per + 8) * 8, 'version 1 counted each obligation once');
});

t.test('unbinding an agent or removing its trust root stops its intents at the commit point', async (t) => {
  const h = Harness.bootstrap();
  h.admin('RemoveTrustRoot', { issuer: ISSUER });
  t.equal(verdictOf(h.run(intent())), 'attestation');
  h.admin('UnbindAgent', { agent: AGENT_A });
  t.equal(verdictOf(h.run(intent())), 'unknown_agent');
});

t.test('a party owes at most LIMITS.obligationsOwedMax obligations; beyond it nothing is recorded', async (t) => {
  const h = Harness.bootstrap({ rules: [{ id: 'R-buy', modality: 'permission', priority: 1, match: { action: 'purchase.*' }, basis: 'b',
    obligations: [{ id: 'O-receipt', action: 'receipt.attach', deadline_ticks: 5 }] }] });
  for (let i = 0; i < LIMITS.obligationsOwedMax; i++) h.ok(intent({ transaction: `txn_o${i}`, entries: [] }));
  const before = h.stateHash;
  const a = h.run(intent({ transaction: 'txn_over', entries: [] }));
  t.same(a.result, { ok: false, error: { error: 'substrate_rejected', kind: 'validation',
    message: `The party already owes ${LIMITS.obligationsOwedMax} obligations; this intent would add 1, beyond the limit of ${LIMITS.obligationsOwedMax}. Discharge some first.` } });
  t.equal(h.stateHash, before);
  h.ok(intent({ transaction: 'txn_discharge', entries: [], action: { action: 'receipt.attach', bindings: { obligation: 'obl_txn_o0_O-receipt' } } }));
  t.equal(verdictOf(h.run(intent({ transaction: 'txn_over', entries: [] }))), 'Permitted', 'a discharge makes room');
});
