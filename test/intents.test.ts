// Proves the agent plane's writing route end to end over HTTPS on one node: the
// worked example's Permitted posting with its obligation and provenance, a recorded
// refusal with its basis, idempotent replay (header and identical bytes), and the
// pin failures, each body checked against the published contract.
import t from 'tap';
import { createHash } from 'node:crypto';
import { AGENT_A, bootstrap, envelope, startTestNode, type TestNode } from './support/node.js';

let n: TestNode;
let att: string;
t.before(async () => {
  n = await startTestNode();
  await bootstrap(n);
  att = await n.issuer.sign(AGENT_A, { jti: '5f0c' });
});
t.teardown(() => n.close());

t.test('the worked example posts, creates its obligation and states its provenance', async (t) => {
  const env = envelope(att, {
    transaction: 'txn_01JD7Y3K',
    consume_usage: { usage: 'usage_acme_llm', amount: { minor: 18446744073709551621n, currency: 'USD' } },
  });
  const r = await n.api('POST', '/api/v1/intents', { body: env });
  t.equal(r.status, 200);
  t.match(r.body, {
    transaction: 'txn_01JD7Y3K', verdict: 'Permitted', posted: true, policy: 'pol_1',
    obligations_pending: [{ id: 'obl_txn_01JD7Y3K_O-receipt', rule: 'R-purchase', action: 'receipt.attach', state: 'open' }],
    justification_hash: createHash('sha256').update('Buying the reference book the user asked for').digest('hex'),
    provenance: {
      authority: { issuer: 'acme-agents', token_id: '5f0c', capability: 'purchase.*' },
      prohibitions_checked: ['R-cap-large'], winning_rule: 'R-purchase',
      obligations_discharged: [], obligations_created: ['obl_txn_01JD7Y3K_O-receipt'],
    },
  });
  t.equal(r.body.obligations_pending[0].deadline_tick, r.body.provenance.tick + 5);
  t.equal(r.headers['idempotent-replayed'], undefined);
  const u = await n.api('GET', '/api/v1/usages/usage_acme_llm', { token: att });
  t.equal(u.body.consumed, 18446744073709551621n, 'a counter beyond 2^64 comes back exact');
});

t.test('a prohibited intent is recorded and answered 200 ForbiddenRejected with its basis', async (t) => {
  const r = await n.api('POST', '/api/v1/intents', { body: envelope(att, { transaction: 'txn_01JD7Y4Q', minor: 700000 }) });
  t.equal(r.status, 200);
  t.match(r.body, { verdict: 'ForbiddenRejected', posted: false, provenance: { winning_rule: 'R-cap-large', basis: 'Purchase of 700000 USD minor units exceeds the 500000 limit of rule R-cap-large' } });
  const read = await n.api('GET', '/api/v1/transactions/txn_01JD7Y4Q', { token: att });
  t.equal(read.status, 200, 'the refusal has a record');
  t.equal(read.body.verdict, 'ForbiddenRejected');
});

t.test('resubmitting a committed transaction id replays the recorded outcome byte for byte', async (t) => {
  const env = envelope(att, { transaction: 'txn_replay' });
  const first = await n.api('POST', '/api/v1/intents', { body: env });
  const again = await n.api('POST', '/api/v1/intents', { body: { ...env, entries: [] } });
  t.equal(again.status, 200);
  t.equal(again.headers['idempotent-replayed'], 'true');
  t.equal(again.text, first.text);
  const bal = await n.api('GET', '/api/v1/accounts/acc_acme_cash/balance', { token: att });
  t.ok(bal.body.balances[0].debits >= 129900n);
});

t.test('a stale pin is refused with the pinned and the active policy; nothing is written', async (t) => {
  const r = await n.api('POST', '/api/v1/intents', { body: envelope(att, { transaction: 'txn_stale', policy: 'pol_0' }) });
  t.equal(r.status, 409);
  t.same(r.body, { error: 'stale_policy', message: 'The pinned policy pol_0 is not the policy in force (pol_1).', pinned: 'pol_0', active: 'pol_1' });
  const read = await n.api('GET', '/api/v1/transactions/txn_stale', { token: att });
  t.equal(read.status, 404);
});
