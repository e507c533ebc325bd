// Proves the replica's LevelDB state store against the core's in-memory one: the same
// random operation sequences, applied in random batches (one view per batch, as a
// Ready is), give the same results, chain links and state hash at every step and the
// same records at the end, with a cache large or tiny and with plane reads racing the
// commits. And proves the store as a snapshot: streamed in chunks to a fresh directory
// it verifies and installs with the same state hash; a transfer cut half-way leaves the
// old store intact and a retry succeeds; a corrupted chunk is refused.
import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { Level } from 'level';
import t from 'tap';
import { canonicalJson, MemoryStore, TABLES, type Operation } from '@apl/core';
import { AGENT_A, AGENT_B, EVIDENCE, Harness, intent, OPERATOR } from '@apl/core/testing';
import { applyBatch } from './apply-batch.js';
import { LedgerStore, STORE_LAYOUT, type SnapshotChunk } from './ledger-store.js';

const BUNDLE = {
  rules: [
    { id: 'R-cap', modality: 'prohibition', priority: 10, match: { action: 'purchase.*' },
      when: [{ left: 'amount', op: 'gt', right: '1000000', currency: 'USD' }], basis: 'cap' },
    { id: 'R-purchase', modality: 'permission', priority: 100, match: { action: 'purchase.*' }, basis: 'buy',
      obligations: [{ id: 'O-receipt', action: 'receipt.attach', deadline_ticks: 2,
        discharge_when: [{ left: 'evidence', op: 'count_gte', right: 1 }],
        repair: [{ id: 'D-refund', action: 'purchase.refund', deadline_ticks: 2, blocks: ['purchase.*'] }] }] },
    { id: 'R-usage', modality: 'permission', priority: 100, match: { action: 'usage.record' }, basis: 'usage' },
  ],
};

/** The operations that bootstrap the ledger: trust root, two parties, accounts, balances, a policy. */
const BOOT: Operation[] = Harness.bootstrap(BUNDLE).log.map((l) => l.op);

const party = fc.constantFrom('a', 'a', 'b');
const intentOp = party.chain((p) => fc.record({
  minor: fc.oneof(fc.bigInt({ min: 1n, max: 2_000_000n }), fc.constant((1n << 100n) + 3n)),
  own: fc.boolean(),
  action: fc.constantFrom('purchase.book', 'purchase.book', 'usage.record', 'receipt.attach', 'purchase.refund', 'other.thing'),
  obligation: fc.option(fc.integer({ min: 1, max: 30 }).chain((n) => fc.constantFrom(`obl_txn_p${n}_O-receipt`, `obl_txn_p${n}_O-receipt/D-refund`)), { nil: undefined }),
  usage: fc.option(fc.bigInt({ min: -50n, max: 500n }), { nil: undefined }),
  evidence: fc.boolean(),
  txn: fc.integer({ min: 1, max: 30 }),
  pin: fc.constantFrom('pol_1', 'pol_1', 'pol_1', 'pol_x'),
}).map((r): Operation => {
  const s = p === 'a' ? 'a' : 'b';
  const from = r.own ? `acc_cash_${s}` : 'acc_cash_a';
  return intent({
    transaction: `txn_p${r.txn}`, agent: p === 'a' ? AGENT_A : AGENT_B, policy: r.pin,
    entries: [
      { account: from, side: 'Debit', amount: { minor: r.minor, currency: 'USD' } },
      { account: 'acc_house', side: 'Credit', amount: { minor: r.minor, currency: 'USD' } },
    ],
    ...(r.usage === undefined ? {} : { consume_usage: { usage: `usage_llm_${s}`, amount: { minor: r.usage, currency: 'USD' } } }),
    action: { action: r.action, bindings: r.obligation ? { obligation: r.obligation } : {} },
    evidence: r.evidence ? [EVIDENCE] : [],
  });
}));
const adminOp = fc.oneof(
  fc.constantFrom<Operation>(
    { type: 'UnbindAgent', v: 1, by: OPERATOR, agent: AGENT_B },
    { type: 'BindAgent', v: 1, by: OPERATOR, agent: AGENT_B, party: 'party_globex' },
    { type: 'RemoveTrustRoot', v: 1, by: OPERATOR, issuer: 'acme-agents' },
    { type: 'AddParty', v: 1, by: OPERATOR, id: 'party_new' },
  ),
  fc.integer({ min: 1, max: 5 }).map((n): Operation => ({ type: 'OpenAccount', v: 1, by: OPERATOR, id: `acc_extra_${n}`, party: 'party_acme' })),
);
const op = fc.oneof({ weight: 12, arbitrary: intentOp }, { weight: 3, arbitrary: fc.constant<Operation>({ type: 'Tick', v: 1 }) }, { weight: 1, arbitrary: adminOp });
/** Operations cut into batches of 1 to 8, with no-op entries (a new leader's) among them. */
const batches = fc.array(fc.tuple(fc.array(fc.oneof({ weight: 9, arbitrary: op }, { weight: 1, arbitrary: fc.constant(null) }), { minLength: 1, maxLength: 8 })), { minLength: 1, maxLength: 12 })
  .map((bs) => bs.map(([b]) => b));

const dirs: string[] = [];
t.teardown(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));
function tempDir(): string {
  const d = mkdtempSync(join(tmpdir(), 'apl-store-'));
  dirs.push(d);
  return d;
}

const entry = (index: number, o: Operation | null) => ({ index, term: 1, op: o === null ? null : { op: o, text: canonicalJson(o) } });

/** The current LevelDB database under a store's directory, opened as another version would open it. */
async function withRawDb<T>(dir: string, use: (db: Level<string, string>) => Promise<T>): Promise<T> {
  const db = new Level<string, string>(join(dir, 'store-000001'));
  try {
    return await use(db);
  } finally {
    await db.close();
  }
}

/** Every record of a LevelDB store as key and text, in key order, for comparison. */
async function contents(store: LedgerStore): Promise<[string, string][]> {
  const out: [string, string][] = [];
  for (const { prefix } of Object.values(TABLES)) {
    let after: string | undefined;
    for (;;) {
      const page = await store.page<unknown>(prefix, { after, limit: 1000 });
      for (const [k, v] of page.items) out.push([k, canonicalJson(k.startsWith(TABLES.policy.prefix) ? { ...(v as object), compiled: undefined } : v)]);
      if (page.next === null) break;
      after = page.next;
    }
  }
  return out;
}

function memoryContents(m: MemoryStore): [string, string][] {
  return Object.values(TABLES).flatMap(({ prefix }) => m.keysUnder(prefix).map((k) => [k, m.text(k)!] as [string, string]));
}

t.test('the LevelDB store and the in-memory store give the same results, links, state hash and records', async (t) => {
  let runs = 0;
  let applied = 0;
  await fc.assert(fc.asyncProperty(batches, fc.constantFrom(3, 100_000), async (bs, cacheEntriesMax) => {
    const dir = tempDir();
    const store = await LedgerStore.open(dir, { cacheEntriesMax });
    const memory = new MemoryStore();
    try {
      let index = 0;
      const boot = BOOT.map((o) => entry(++index, o));
      await applyBatch(store, boot);
      boot.forEach((e) => memory.apply(e.index, e.op!.op));
      for (const b of bs) {
        const es = b.map((o) => entry(++index, o));
        // Plane reads racing the commit: what they read must never poison what the next batch prefetches.
        const racing = es.flatMap((e) => (e.op?.op.type === 'SubmitIntent' ? [store.get(`${TABLES.transaction.prefix}party_acme/${e.op.op.transaction}`)] : []));
        const got = await applyBatch(store, es);
        await Promise.all(racing);
        for (const [k, e] of es.entries()) {
          const want = e.op === null ? (memory.skip(e.index), null) : memory.apply(e.index, e.op.op);
          if (canonicalJson(got[k] ?? null) !== canonicalJson(want)) throw new Error(`index ${e.index}: ${canonicalJson(got[k] ?? null)} != ${canonicalJson(want)}`);
          applied++;
        }
        if (store.position.stateHash !== memory.meta.stateHash || store.position.head !== memory.meta.head || store.position.applied !== memory.meta.applied) {
          throw new Error(`after index ${index} the stores disagree: ${JSON.stringify(store.position)} != ${JSON.stringify(memory.meta)}`);
        }
      }
      const [a, b] = [await contents(store), memoryContents(memory)];
      if (canonicalJson(a) !== canonicalJson(b)) throw new Error('the records differ at the end');
      if (memory.recomputedStateHash() !== store.position.stateHash) throw new Error('the state hash is not the set hash of the records');
      runs++;
    } finally {
      await store.close();
    }
  }), { numRuns: 40 });
  t.ok(runs === 40 && applied > 400, `${runs} sequences, ${applied} operations applied alike`);
});

/** A store with some history: a bootstrap and a few hundred intents and ticks. */
async function storeWithHistory(dir: string): Promise<LedgerStore> {
  const store = await LedgerStore.open(dir, { cacheEntriesMax: 1000 });
  let index = 0;
  await applyBatch(store, BOOT.map((o) => entry(++index, o)));
  for (let k = 0; k < 30; k++) {
    const es = Array.from({ length: 20 }, (_, j) => entry(++index, j === 19 ? { type: 'Tick', v: 1 } : intent({ transaction: `txn_h${k}_${j}`, minor: BigInt(1 + j), evidence: [EVIDENCE] })));
    await applyBatch(store, es);
  }
  return store;
}

async function* relay(chunks: AsyncIterable<SnapshotChunk>, alter: (c: SnapshotChunk) => SnapshotChunk = (c) => c): AsyncGenerator<SnapshotChunk> {
  for await (const c of chunks) yield alter(c);
}

t.test('a store streamed in chunks to a fresh directory verifies, installs and holds the same state', async (t) => {
  const source = await storeWithHistory(tempDir());
  const targetDir = tempDir();
  const target = await LedgerStore.open(targetDir, { cacheEntriesMax: 10 });
  try {
    const { position, chunks } = await source.openSnapshot();
    t.equal(position.applied, source.position.applied);
    const name = await target.receiveSnapshot({ stateHash: position.stateHash, applied: position.applied }, chunks);
    t.equal(target.position.applied, 0, 'nothing changes before the install');
    // The planes keep reading while the store is switched: no read may find it closed.
    const key = `${TABLES.party.prefix}party_acme`;
    let reading = true;
    const reads: Promise<unknown>[] = [];
    const reader = (async () => {
      while (reading) {
        reads.push(target.get(key));
        await new Promise((r) => setImmediate(r));
      }
    })();
    const oldDir = join(targetDir, readdirSync(targetDir).find((n) => n.startsWith('store-') && n !== name)!);
    const { retired } = await target.install(name);
    // Removing the old store unlinks a whole state's files: it is not done on the way.
    t.ok(existsSync(oldDir), 'the install returns before the old store is removed');
    reading = false;
    await reader;
    const settled = await Promise.allSettled(reads);
    t.same(settled.filter((r) => r.status === 'rejected'), [], `none of ${settled.length} reads racing the install failed`);
    t.ok(await target.get(key), 'the installed store answers');
    t.same(target.position, source.position, 'the position travels with the records');
    t.same(await contents(target), await contents(source), 'every record is there');
    const journal: string[] = [];
    for await (const line of target.journal()) journal.push(line);
    const sourceJournal: string[] = [];
    for await (const line of source.journal()) sourceJournal.push(line);
    t.same(journal, sourceJournal, 'and the journal, so the export verifies here too');
    await retired;
    t.same(readdirSync(targetDir).sort(), ['CURRENT', name], 'the old store directory is gone once retired');
  } finally {
    await source.close();
    await target.close();
  }
});

t.test('a transfer cut half-way leaves the old store intact, and a retry succeeds', async (t) => {
  const source = await storeWithHistory(tempDir());
  const targetDir = tempDir();
  const target = await storeWithHistory(targetDir);
  // The target has history of its own, to show that it survives the failed transfer untouched.
  await applyBatch(target, [entry(target.position.applied + 1, { type: 'AddParty', v: 1, by: OPERATOR, id: 'party_only_here' })]);
  const before = { position: target.position, records: await contents(target) };
  try {
    const first = await source.openSnapshot();
    let sent = 0;
    const cut = relay(first.chunks, (c) => {
      if (++sent > 1) throw new Error('the connection was reset');
      return c;
    });
    await t.rejects(target.receiveSnapshot({ stateHash: first.position.stateHash, applied: first.position.applied }, cut), /connection was reset/);
    await first.chunks.return(undefined);
    t.same(target.position, before.position);
    t.same(await contents(target), before.records, 'the old store is as it was');
    t.equal(readdirSync(targetDir).filter((n) => n.startsWith('store-')).length, 1, 'the half-written directory is gone');
    const second = await source.openSnapshot();
    await target.install(await target.receiveSnapshot({ stateHash: second.position.stateHash, applied: second.position.applied }, second.chunks));
    t.same(target.position, source.position, 'the retry installs');
  } finally {
    await source.close();
    await target.close();
  }
});

t.test('a corrupted chunk, a chunk out of order and records that do not hash to the announced state are refused', async (t) => {
  const source = await storeWithHistory(tempDir());
  const target = await LedgerStore.open(tempDir(), { cacheEntriesMax: 10 });
  try {
    const flip = (c: SnapshotChunk): SnapshotChunk => {
      const data = Buffer.from(c.data);
      data[data.length - 2] = data[data.length - 2]! ^ 1;
      return { ...c, data };
    };
    let s = await source.openSnapshot();
    await t.rejects(target.receiveSnapshot({ stateHash: s.position.stateHash, applied: s.position.applied }, relay(s.chunks, flip)), /chunk 0 does not match its digest/);
    s = await source.openSnapshot();
    await t.rejects(target.receiveSnapshot({ stateHash: s.position.stateHash, applied: s.position.applied }, relay(s.chunks, (c) => ({ ...c, seq: c.seq + 1 }))), /chunk 1 arrived where 0 was expected/);
    s = await source.openSnapshot();
    await t.rejects(target.receiveSnapshot({ stateHash: '0'.repeat(64), applied: s.position.applied }, s.chunks), /hash to [0-9a-f]{64} at \d+; 0{64} at \d+ was announced/);
    t.equal(target.position.applied, 0, 'nothing was installed');
  } finally {
    await source.close();
    await target.close();
  }
});

t.test('a reopened store is where it was: position, records and journal', async (t) => {
  const dir = tempDir();
  const store = await storeWithHistory(dir);
  const position = store.position;
  const records = await contents(store);
  await store.close();
  const again = await LedgerStore.open(dir, { cacheEntriesMax: 10 });
  try {
    t.same(again.position, position);
    t.same(await contents(again), records);
  } finally {
    await again.close();
  }
});

t.test('a store of another layout is refused when received and when opened, and is left as it was', async (t) => {
  const dir = tempDir();
  const store = await storeWithHistory(dir);
  const { position, chunks } = await store.openSnapshot();
  // The same store as another version would stream it: its position says layout 1.
  const older = (async function* () {
    for await (const c of chunks) {
      const data = Buffer.from(Buffer.from(c.data).toString('latin1').replace(`,"layout":${STORE_LAYOUT}`, ',"layout":1'), 'latin1');
      yield { seq: c.seq, data, digest: createHash('sha256').update(data).digest('hex') };
    }
  })();
  const other = tempDir();
  const receiver = await LedgerStore.open(other, { cacheEntriesMax: 10 });
  try {
    await t.rejects(receiver.receiveSnapshot({ stateHash: position.stateHash, applied: position.applied }, older), /layout 1/);
    t.same(readdirSync(other).filter((n) => n.startsWith('store-')), ['store-000001'], 'nothing was installed');
  } finally {
    await receiver.close();
    await store.close();
  }

  // What an earlier version wrote on disk: the same position record, without a layout number.
  const positionOnDisk = async () => JSON.parse((await withRawDb(dir, (db) => db.get('chain/meta')))!) as Record<string, unknown>;
  const { layout: _layout, ...unnumbered } = await positionOnDisk();
  await withRawDb(dir, (db) => db.put('chain/meta', JSON.stringify(unnumbered)));
  await t.rejects(LedgerStore.open(dir, { cacheEntriesMax: 10 }), new RegExp(`layout 1, and this version reads layout ${STORE_LAYOUT}`));
  t.equal((await positionOnDisk()).applied, position.applied, 'the store is untouched');
});

t.test('a plane read that started before a commit never puts what it read in the cache over the commit', async (t) => {
  // The read's answer is held back until after the commit: it read the key as absent.
  let release!: () => void;
  const held = new Promise<void>((r) => (release = r));
  let holding = false;
  const store = await LedgerStore.open(tempDir(), {
    cacheEntriesMax: 100,
    wrap: (db) => new Proxy(db, {
      get(target, prop, receiver) {
        const v = Reflect.get(target, prop, receiver) as unknown;
        if (prop !== 'get' || typeof v !== 'function') return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
        return async (...args: unknown[]) => {
          const answer = await (v as (...a: unknown[]) => Promise<unknown>).apply(target, args);
          if (holding) await held;
          return answer;
        };
      },
    }),
  });
  try {
    holding = true;
    const stale = store.get(`${TABLES.party.prefix}party_race`);
    await applyBatch(store, [entry(1, { type: 'AddParty', v: 1, by: OPERATOR, id: 'party_race' })]);
    holding = false;
    release();
    t.equal(await stale, undefined, 'the early read answers what it read');
    t.same(await store.get(`${TABLES.party.prefix}party_race`), { id: 'party_race' }, 'the cache holds what the commit wrote');
    const again = await applyBatch(store, [entry(2, { type: 'AddParty', v: 1, by: OPERATOR, id: 'party_race' })]);
    t.match(again[0]?.result, { ok: false, error: { error: 'already_exists' } }, 'and the next batch sees it');
  } finally {
    await store.close();
  }
});

t.test('a second store streamed while one is being received is refused, and the first installs whole', async (t) => {
  const source = await storeWithHistory(tempDir());
  const target = await LedgerStore.open(tempDir(), { cacheEntriesMax: 10 });
  try {
    const a = await source.openSnapshot();
    const b = await source.openSnapshot();
    const first = target.receiveSnapshot({ stateHash: a.position.stateHash, applied: a.position.applied }, a.chunks);
    await t.rejects(target.receiveSnapshot({ stateHash: b.position.stateHash, applied: b.position.applied }, b.chunks), /a store is being received already/);
    await b.chunks.return(undefined);
    await target.install(await first);
    t.same(target.position, source.position, 'the first transfer installs, untouched by the second');
    t.same(await contents(target), await contents(source), 'every record is there');
    const c = await source.openSnapshot();
    await target.install(await target.receiveSnapshot({ stateHash: c.position.stateHash, applied: c.position.applied }, c.chunks));
    t.same(target.position, source.position, 'once it is done, another may be received');
  } finally {
    await source.close();
    await target.close();
  }
});

/** A store with a history, and beside it, received and not installed, another store's. */
async function storeWithOneReceived(): Promise<{ source: LedgerStore; target: LedgerStore; targetDir: string; before: LedgerStore['position']; name: string }> {
  const source = await storeWithHistory(tempDir());
  const targetDir = tempDir();
  const target = await storeWithHistory(targetDir);
  const before = target.position;
  const s = await source.openSnapshot();
  const name = await target.receiveSnapshot({ stateHash: s.position.stateHash, applied: s.position.applied }, s.chunks);
  return { source, target, targetDir, before, name };
}

t.test('a received store that opens at another position than it was received at is not installed', async (t) => {
  const { source, target, targetDir, before, name } = await storeWithOneReceived();
  try {
    rmSync(join(targetDir, name), { recursive: true, force: true });
    await t.rejects(target.install(name), /opens at applied index 0, not at \d+ where it was received/);
    t.same(target.position, before, 'the store in use stays');
    t.ok(await target.get(`${TABLES.party.prefix}party_acme`), 'and answers');
  } finally {
    await source.close();
    await target.close();
  }
});

t.test('a received store that will not be installed is discarded: its directory goes, and it cannot be installed after', async (t) => {
  const { source, target, targetDir, before, name } = await storeWithOneReceived();
  try {
    t.ok(existsSync(join(targetDir, name)), 'received beside the store in use');
    await target.discardReceived(name);
    t.notOk(existsSync(join(targetDir, name)), 'gone from the disk');
    await t.rejects(target.install(name), /no store .* was received here/);
    await t.rejects(target.discardReceived(name), /no store .* was received here/, 'nor discarded twice');
    t.same(target.position, before, 'the store in use stays');
  } finally {
    await source.close();
    await target.close();
  }
});
