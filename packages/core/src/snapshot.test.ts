// Proves a snapshot restores the ledger exactly: same state hash, same digest, and
// running on from the restored copy matches running straight through.
import t from 'tap';
import { apply } from './apply.js';
import { decodeSnapshot, encodeSnapshot, stateHash } from './snapshot.js';
import { Harness, intent, EVIDENCE } from './testing.js';

const OBLIGING = {
  rules: [{
    id: 'R-purchase', modality: 'permission', priority: 100, match: { action: '*' }, basis: 'ok',
    obligations: [{ id: 'O-receipt', action: 'receipt.attach', deadline_ticks: 2,
      discharge_when: [{ left: 'evidence', op: 'count_gte', right: 1 }],
      repair: [{ id: 'D-refund', action: 'purchase.refund', deadline_ticks: 3, blocks: ['purchase.*'] }] }],
  }],
};

t.test('snapshot, restore and continue equals running straight through', async (t) => {
  const h = Harness.bootstrap(OBLIGING);
  const move = (minor: bigint) => ({ usage: 'usage_llm_a', amount: { minor, currency: 'USD' } });
  h.ok(intent({ transaction: 'txn_s1', minor: 18446744073709551621n, consume_usage: move(18446744073709551621n), action: { action: 'purchase.book', bindings: { n: 5n, ok: true } } }));
  h.ok(intent({ transaction: 'txn_s2', action: { action: 'purchase.book', bindings: {} } }));
  h.tick(3);
  const restored = decodeSnapshot(encodeSnapshot(h.ledger));
  t.equal(stateHash(restored.state), stateHash(h.ledger.state));
  t.equal(restored.head, h.ledger.head);
  t.equal(restored.applied, h.ledger.applied);

  const rest = [
    intent({ transaction: 'txn_s3' }),
    intent({ transaction: 'txn_s4', action: { action: 'receipt.attach', bindings: { obligation: 'obl_txn_s2_O-receipt' } }, evidence: [EVIDENCE] }),
    intent({ transaction: 'txn_s5', action: { action: 'purchase.refund', bindings: { obligation: 'obl_txn_s1_O-receipt/D-refund' } } }),
    { type: 'Tick', v: 1 },
  ];
  let index = h.ledger.applied;
  for (const op of rest) {
    index += 1;
    const a = apply(h.ledger, index, op as never);
    const b = apply(restored, index, op as never);
    t.same(b, a);
  }
  t.equal(stateHash(restored.state), stateHash(h.ledger.state));
  t.equal(restored.head, h.ledger.head);
  t.equal(encodeSnapshot(restored).toString(), encodeSnapshot(h.ledger).toString());
});

t.test('bytes that are not a snapshot are refused', async (t) => {
  t.throws(() => decodeSnapshot(Buffer.from('{"v":2}')), /not a ledger snapshot/);
});
