// Proves the view's contract with its store: only prefetched records are read; a
// hashed record written blindly must be new and one deleted must have been read;
// scans see the batch's own writes; a commit encodes each record once and moves the
// set hash by exactly the records it changed; and records decode to what was stored.
import t from 'tap';
import { GENESIS_HASH } from './apply.js';
import { MemoryStore } from './memory-store.js';
import { decodeRecord, encodeRecord } from './records.js';
import { reads } from './reads.js';
import {
  addHash, EMPTY_STATE_HASH, hashHex, isHashed, NotPrefetched, recordHash, subHash, TABLES, View, type LedgerMeta,
} from './store.js';
import { Harness, intent, OPERATOR, PARTY_A } from './testing.js';

const META: LedgerMeta = { applied: 0, head: GENESIS_HASH, stateHash: EMPTY_STATE_HASH };

t.test('a view answers only what was supplied, and says which key was not', async (t) => {
  const v = new View(META, encodeRecord);
  v.supply('party/p1', { value: { id: 'p1' }, hash: 1n });
  v.supply('party/p2', null);
  t.same(v.get('party/p1'), { id: 'p1' });
  t.equal(v.get('party/p2'), undefined, 'a supplied absence is an answer');
  t.throws(() => v.get('party/p3'), NotPrefetched);
  t.throws(() => v.scan('due/000000000001/'), /due\/000000000001\/\* was scanned but not prefetched/);
});

t.test('a hashed record written without being read must be new, and one deleted must have been read', async (t) => {
  const exists = (k: string) => k === 'party/old';
  const v = new View(META, encodeRecord, exists);
  t.doesNotThrow(() => v.put('party/new', { id: 'new' }));
  t.throws(() => v.put('party/old', { id: 'old' }), /party\/old is written blindly but exists/);
  t.throws(() => v.del('party/other'), /deleted without being read/);
  t.doesNotThrow(() => v.del('due/000000000001/p/o'), 'index records may be deleted blindly');
  t.doesNotThrow(() => v.put('txn/p/txn_1', 1), 'index records may be written blindly');
  t.doesNotThrow(() => v.put('rec/0000000000000001', { transaction: 'txn_1' }), 'a new record may be written blindly');
});

t.test("a scan sees the batch's own writes and deletions, in byte order", async (t) => {
  const v = new View(META, encodeRecord);
  v.supplyScan('due/000000000005/', ['due/000000000005/b/o1', 'due/000000000005/a/o2']);
  v.put('due/000000000005/a/o0', '');
  v.del('due/000000000005/b/o1');
  v.put('due/000000000006/a/o9', '');
  t.same(v.scan('due/000000000005/'), ['due/000000000005/a/o0', 'due/000000000005/a/o2']);
});

t.test('a commit moves the set hash by exactly the records it changed', async (t) => {
  const oldText = encodeRecord('party/p1', { id: 'p1' });
  const start = hashHex(addHash(0n, recordHash('party/p1', oldText)));
  const v = new View({ ...META, stateHash: start }, encodeRecord);
  v.supply('party/p1', { value: { id: 'p1' }, hash: recordHash('party/p1', oldText) });
  v.del('party/p1');
  v.put('party/p2', { id: 'p2' });
  v.put('party/p2', { id: 'p2' });
  v.put('owed/p2', []);
  const c = v.commit();
  t.same(c.writes.map((w) => [w.key, w.text]), [['party/p1', null], ['party/p2', '{"id":"p2"}'], ['owed/p2', '[]']], 'each key once, encoded once');
  const expected = hashHex(addHash(subHash(BigInt(`0x${start}`), recordHash('party/p1', oldText)), recordHash('party/p2', '{"id":"p2"}')));
  t.equal(c.meta.stateHash, expected);
  t.equal(recordHash('owed/p2', '[]'), 0n, 'indexes are outside the hash');
  t.ok(isHashed('rec/0000000000000001') && isHashed('obl/000000000001/p/o') && !isHashed('oid/p/o') && !isHashed('due/x') && !isHashed('txn/p/txn_1'));
});

t.test("a record's term is the SHA-256 of its key, a NUL and its text (UTF-8), as a number", async (t) => {
  // Pinned: every stored state hash is a sum of these terms, so they never change.
  t.equal(recordHash('party/p1', '{"id":"p1"}').toString(16).padStart(64, '0'), '8e95effe5a4d49b19a9bc2a65bd12ed0e2911049d7ab9d67fff4df7cd85cf7ac');
  t.equal(recordHash('acct/acc_\u20ac', '{"id":"acc_\u20ac","party":null,"totals":[]}').toString(16).padStart(64, '0'),
    'b6f4e90c6bd312103105a93771f99e6f5e1528a9f2e26ae756198598f7a5b57e');
});

t.test('the set hash is independent of the order records were written in', async (t) => {
  const a = new MemoryStore();
  const b = new MemoryStore();
  const ops = ['party_1', 'party_2', 'party_3'].map((id) => ({ type: 'AddParty' as const, v: 1 as const, by: OPERATOR, id }));
  ops.forEach((op, k) => a.apply(k + 1, op));
  [...ops].reverse().forEach((op, k) => b.apply(k + 1, op));
  t.equal(a.meta.stateHash, b.meta.stateHash);
  t.equal(a.meta.stateHash, a.recomputedStateHash());
  t.not(a.meta.head, b.meta.head, 'the chain, unlike the state, remembers the order');
});

t.test('every table round-trips its records through the stored text, bigints included', async (t) => {
  const h = Harness.bootstrap({ rules: [{ id: 'R', modality: 'permission', priority: 1, match: { action: '*' }, basis: 'b',
    obligations: [{ id: 'O', action: 'receipt.attach', deadline_ticks: 2, discharge_when: [{ left: 'amount', op: 'gt', right: 5, currency: 'USD' }] }] }] });
  h.ok(intent({ transaction: 'txn_big', minor: (1n << 100n) + 7n, action: { action: 'purchase.book', bindings: { n: 3n, b: true, s: 'x' } } }));
  let count = 0;
  for (const prefix of Object.values(TABLES).map((x) => x.prefix)) {
    for (const key of h.store.keysUnder(prefix)) {
      const text = h.store.text(key)!;
      t.equal(encodeRecord(key, decodeRecord(key, text)), text, key);
      count++;
    }
  }
  t.ok(count >= 20, `${count} records round-tripped`);
  t.equal(h.txn('txn_big')!.entries[0]!.amount.minor, (1n << 100n) + 7n);
  t.throws(() => decodeRecord(`${TABLES.account.prefix}acc_x`, '{"id":"acc_x"}'), /stored record acct\/acc_x is not valid/);
});

t.test('reads name what an intent reads in rounds, and nothing once it is loaded', async (t) => {
  const h = Harness.bootstrap();
  const op = intent({ transaction: 'txn_r', action: { action: 'purchase.book', bindings: { obligation: 'obl_x' } } });
  const view = h.store.view();
  const first = reads(view, op);
  t.ok(first.keys.includes(`${TABLES.agent.prefix}${(op as { agent: string }).agent}`));
  t.notOk(first.keys.some((k) => k.startsWith(TABLES.transaction.prefix)), 'the party is not known yet');
  h.store.load(view, first);
  const second = reads(view, op);
  t.same(second.keys.sort(), [
    `${TABLES.account.prefix}acc_books_a`, `${TABLES.account.prefix}acc_cash_a`,
    `${TABLES.obligationTick.prefix}${PARTY_A}/obl_x`, `${TABLES.owed.prefix}${PARTY_A}`, `${TABLES.policy.prefix}pol_1`,
    `${TABLES.transaction.prefix}${PARTY_A}/txn_r`,
  ], 'the party names its records, and the active policy (read in the first round) names the policy');
  h.store.load(view, second);
  t.same(reads(view, op), { keys: [], prefixes: [] });
});

t.test('a record changed in place instead of set anew is caught: loaded records are frozen', async (t) => {
  const h = Harness.bootstrap();
  const view = h.store.view();
  h.store.prefetch(view, { type: 'AddParty', v: 1, by: OPERATOR, id: PARTY_A });
  t.throws(() => {
    (view.get(`${TABLES.party.prefix}${PARTY_A}`) as { id: string }).id = 'changed';
  }, TypeError);
});
