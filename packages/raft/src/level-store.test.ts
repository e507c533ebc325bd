// Proves the storage contract on every store (the write-ahead log and LevelDB, each in a
// temporary directory, and the in-memory model the simulator uses): a Ready is stored atomically, a conflicting suffix
// is truncated, a snapshot replaces or compacts the log, and load() returns what a node
// needs to restart. For LevelDB also: data survives close and reopen, index keys sort in
// numeric order across byte boundaries, and a RawNode restarts from the store.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Level } from 'level';
import t from 'tap';
import { DELETES_PER_WRITE, LevelLogStore, entryKey } from './level-store.js';
import { RawNode } from './rawnode.js';
import { MemoryLogStore, type LogStore, type SaveBatch } from './storage.js';
import { LogStoreCorruptError, decodeMeta } from './store-records.js';
import { WalLogStore } from './wal-store.js';
import { bytes, config, ents, text } from './testing.js';
import type { HardState, Snapshot } from './types.js';

async function tempDir(t: { teardown: (f: () => Promise<void>) => void }): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'apl-raft-store-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

function batch(over: Partial<SaveBatch>): SaveBatch {
  return { hardState: null, snapshot: null, entries: [], mustSync: true, ...over };
}

function snapshot(index: number, term: number, data = `state@${index}`): Snapshot {
  return { meta: { index, term, conf: { voters: ['a', 'b', 'c'], learners: [], context: {}, removed: [] } }, data: bytes(data) };
}

const hs = (term: number, vote: string | null, commit: number): HardState => ({ term, vote, commit });

type Open = (t: { teardown: (f: () => Promise<void>) => void }) => Promise<LogStore>;

const stores: [string, Open][] = [
  ['WalLogStore', async (t) => {
    const store = await WalLogStore.open(await tempDir(t), { segmentBytes: 1 << 16 });
    t.teardown(() => store.close());
    return store;
  }],
  ['LevelLogStore', async (t) => {
    const store = await LevelLogStore.open(await tempDir(t));
    t.teardown(() => store.close());
    return store;
  }],
  ['MemoryLogStore', async () => new MemoryLogStore()],
];

for (const [name, open] of stores) {
  t.test(`${name}: a new store loads an empty log`, async (t) => {
    const s = await open(t);
    t.same(await s.load(), { hardState: hs(0, null, 0), snapshot: null, entries: [] });
  });

  t.test(`${name}: save stores hard state and entries; load returns them`, async (t) => {
    const s = await open(t);
    await s.save(batch({ hardState: hs(2, 'a', 1), entries: ents([1, 2, 2]) }));
    const b = await s.load();
    t.same(b.hardState, hs(2, 'a', 1));
    t.same(b.entries, ents([1, 2, 2]));
    t.equal(b.snapshot, null);
  });

  t.test(`${name}: entries that overwrite stored ones truncate the conflicting suffix`, async (t) => {
    const s = await open(t);
    await s.save(batch({ hardState: hs(1, 'a', 0), entries: ents([1, 1, 1, 1, 1]) }));
    await s.save(batch({ hardState: hs(2, 'b', 2), entries: ents([2, 2], 3) }));
    const b = await s.load();
    t.same(b.entries.map((e) => [e.index, e.term]), [[1, 1], [2, 1], [3, 2], [4, 2]], 'entry 5 of the old suffix is gone');
    t.same(b.hardState, hs(2, 'b', 2));
  });

  t.test(`${name}: a conf entry keeps its type and a normal one stays untyped`, async (t) => {
    const s = await open(t);
    const conf = { index: 2, term: 1, data: bytes('{"change":{}}'), type: 'conf' as const };
    await s.save(batch({ hardState: hs(1, 'a', 0), entries: [...ents([1]), conf, ...ents([1], 3)] }));
    const b = await s.load();
    t.same(b.entries.map((e) => e.type ?? 'normal'), ['normal', 'conf', 'normal']);
    t.same(b.entries.map((e) => e.term), [1, 1, 1], 'the type does not leak into the term');
  });

  t.test(`${name}: entries that would leave a gap are refused`, async (t) => {
    const s = await open(t);
    await s.save(batch({ entries: ents([1]) }));
    await t.rejects(s.save(batch({ entries: ents([1], 3) })));
  });

  t.test(`${name}: a snapshot in a Ready replaces the whole stored log`, async (t) => {
    const s = await open(t);
    await s.save(batch({ hardState: hs(1, 'a', 3), entries: ents([1, 1, 1, 1]) }));
    await s.save(batch({ hardState: hs(3, null, 10), snapshot: snapshot(10, 3), entries: ents([3, 3], 11) }));
    const b = await s.load();
    t.same(b.snapshot?.meta, { index: 10, term: 3, conf: { voters: ['a', 'b', 'c'], learners: [], context: {}, removed: [] } });
    t.equal(text(b.snapshot?.data ?? new Uint8Array()), 'state@10');
    t.same(b.entries.map((e) => e.index), [11, 12]);
    t.same(b.hardState, hs(3, null, 10));
  });

  t.test(`${name}: saveSnapshot stores the snapshot and deletes the entries it covers`, async (t) => {
    const s = await open(t);
    await s.save(batch({ hardState: hs(1, 'a', 8), entries: ents([1, 1, 1, 1, 1, 1, 1, 1, 1, 1]) }));
    await s.saveSnapshot(snapshot(6, 1));
    let b = await s.load();
    t.equal(b.snapshot?.meta.index, 6);
    t.same(b.entries.map((e) => e.index), [7, 8, 9, 10]);
    await s.saveSnapshot(snapshot(4, 1, 'older'));
    b = await s.load();
    t.equal(text(b.snapshot?.data ?? new Uint8Array()), 'state@6', 'an older snapshot is ignored');
    await s.save(batch({ entries: ents([2], 11) }));
    b = await s.load();
    t.same(b.entries.map((e) => e.index), [7, 8, 9, 10, 11], 'appends continue after compaction');
  });

  t.test(`${name}: a commit index below the snapshot loads as the snapshot index`, async (t) => {
    const s = await open(t);
    await s.save(batch({ hardState: hs(1, 'a', 2), entries: ents([1, 1, 1, 1]) }));
    await s.saveSnapshot(snapshot(3, 1));
    t.equal((await s.load()).hardState.commit, 3);
  });
}

t.test('MemoryLogStore: a crash loses writes that were not synced, and only those', async (t) => {
  const s = new MemoryLogStore();
  s.saveSync(batch({ hardState: hs(1, 'a', 0), entries: ents([1, 1]) }));
  s.saveSync(batch({ hardState: hs(1, 'a', 2), mustSync: false }));
  t.equal(s.loadSync().hardState.commit, 2, 'visible before the crash');
  s.crash();
  t.equal(s.loadSync().hardState.commit, 0, 'lost by the crash');
  s.saveSync(batch({ hardState: hs(1, 'a', 1), mustSync: false }));
  s.saveSync(batch({ entries: ents([1], 3) }));
  s.crash();
  t.equal(s.loadSync().hardState.commit, 1, 'a later synced write makes earlier ones durable');
  t.equal(s.syncCount, 2);
});

t.test('LevelLogStore: everything survives close and reopen', async (t) => {
  const dir = await tempDir(t);
  let s = await LevelLogStore.open(dir);
  await s.save(batch({ hardState: hs(4, 'c', 5), entries: ents([1, 2, 3, 4, 4, 4]) }));
  await s.saveSnapshot(snapshot(3, 3));
  await s.close();
  s = await LevelLogStore.open(dir);
  const b = await s.load();
  t.same(b.hardState, hs(4, 'c', 5));
  t.equal(b.snapshot?.meta.index, 3);
  t.same(b.entries.map((e) => [e.index, e.term]), [[4, 4], [5, 4], [6, 4]]);
  // The bounds were reread: a conflicting write after reopening still truncates.
  await s.save(batch({ entries: ents([5], 5) }));
  t.same((await s.load()).entries.map((e) => [e.index, e.term]), [[4, 4], [5, 5]]);
  await s.close();
});

t.test('LevelLogStore: a large compaction deletes what it covers a bounded number per write, and the log loads right at every step', async (t) => {
  const dir = await tempDir(t);
  const total = 3 * DELETES_PER_WRITE;
  const onDisk = async () => {
    const raw = new Level<Uint8Array, Uint8Array>(dir, { keyEncoding: 'view', valueEncoding: 'view' });
    await raw.open();
    const keys = await raw.keys({ gte: entryKey(0), lte: entryKey(Number.MAX_SAFE_INTEGER) }).all();
    await raw.close();
    return keys.length;
  };
  let s = await LevelLogStore.open(dir);
  await s.save(batch({ hardState: hs(1, 'a', total), entries: ents(Array.from({ length: total }, () => 1)) }));
  const index = total - 10;
  await s.saveSnapshot(snapshot(index, 1));
  let b = await s.load();
  t.same(b.entries.map((e) => e.index), Array.from({ length: 10 }, (_, k) => index + 1 + k), 'the log is what follows the snapshot at once');
  await s.close();
  t.equal(await onDisk(), total - DELETES_PER_WRITE, 'the compaction deleted one bound of covered entries');

  // Reopened with covered entries still on disk: they are not loaded, and later writes delete them.
  s = await LevelLogStore.open(dir);
  b = await s.load();
  t.equal(b.entries[0]?.index, index + 1);
  t.equal(b.entries.length, 10);
  await s.save(batch({ hardState: hs(1, 'a', total + 1), entries: ents([1], total + 1) }));
  await s.close();
  t.equal(await onDisk(), total + 1 - 2 * DELETES_PER_WRITE, 'the next write deleted one bound more');

  s = await LevelLogStore.open(dir);
  for (let k = 2; k <= 4; k++) await s.save(batch({ hardState: hs(1, 'a', total + k), entries: ents([1], total + k) }));
  b = await s.load();
  t.same(b.entries.map((e) => e.index), Array.from({ length: 14 }, (_, k) => index + 1 + k));
  await s.close();
  t.equal(await onDisk(), 14, 'every covered entry is gone, and only those');
});

t.test('LevelLogStore: a snapshot written before membership changes loads its members as the voters', async (t) => {
  const dir = await tempDir(t);
  const raw = new Level<Uint8Array, Uint8Array>(dir, { keyEncoding: 'view', valueEncoding: 'view' });
  await raw.put(Uint8Array.of(0x6d), bytes(JSON.stringify({ index: 3, term: 2, members: ['n2', 'n1', 'n3'] })));
  await raw.put(Uint8Array.of(0x73), bytes('state@3'));
  await raw.close();
  const s = await LevelLogStore.open(dir);
  t.same((await s.load()).snapshot?.meta, { index: 3, term: 2, conf: { voters: ['n1', 'n2', 'n3'], learners: [], context: {}, removed: [] } });
  await s.close();
});

t.test('LevelLogStore: a snapshot written before removed ids were remembered loads as one that removed none; one written after keeps them', async (t) => {
  const dir = await tempDir(t);
  const raw = new Level<Uint8Array, Uint8Array>(dir, { keyEncoding: 'view', valueEncoding: 'view' });
  await raw.put(Uint8Array.of(0x6d), bytes(JSON.stringify({ index: 3, term: 2, conf: { voters: ['n1', 'n2'], learners: ['n4'], context: { n4: 'x' } } })));
  await raw.put(Uint8Array.of(0x73), bytes('state@3'));
  await raw.close();
  const s = await LevelLogStore.open(dir);
  t.same((await s.load()).snapshot?.meta.conf, { voters: ['n1', 'n2'], learners: ['n4'], context: { n4: 'x' }, removed: [] });
  const conf = { voters: ['n1', 'n2'], learners: [], context: {}, removed: ['n3', 'n4'] };
  await s.saveSnapshot({ meta: { index: 4, term: 2, conf }, data: bytes('state@4') });
  await s.close();
  const again = await LevelLogStore.open(dir);
  t.same((await again.load()).snapshot?.meta.conf, conf, 'the removed ids survive a restart');
  await again.close();
});

t.test('snapshot meta whose removed ids are not a list is corruption, refused', async (t) => {
  const meta = (removed: unknown) => bytes(JSON.stringify({ index: 3, term: 2, conf: { voters: ['n1'], learners: [], context: {}, removed } }));
  t.throws(() => decodeMeta(meta('n3')), LogStoreCorruptError);
  t.same(decodeMeta(meta(['n3'])).conf.removed, ['n3']);
});

t.test('LevelLogStore: index keys sort in numeric order across byte boundaries', async (t) => {
  const indexes = [1, 255, 256, 65_535, 65_536, 2 ** 32 - 1, 2 ** 32, Number.MAX_SAFE_INTEGER];
  for (let k = 1; k < indexes.length; k++) {
    const a = Buffer.from(entryKey(indexes[k - 1] as number));
    const b = Buffer.from(entryKey(indexes[k] as number));
    t.ok(Buffer.compare(a, b) < 0, `${indexes[k - 1]} sorts before ${indexes[k]}`);
  }
  const dir = await tempDir(t);
  const s = await LevelLogStore.open(dir);
  const many = Array.from({ length: 600 }, () => 1);
  await s.save(batch({ entries: ents(many) }));
  const b = await s.load();
  t.same(b.entries.map((e) => e.index), many.map((_, k) => k + 1), '600 entries load in index order');
  await s.close();
});

t.test('LevelLogStore: writes issued without waiting reach the disk in order', async (t) => {
  const dir = await tempDir(t);
  const s = await LevelLogStore.open(dir);
  const first = s.save(batch({ hardState: hs(1, 'a', 0), entries: ents([1, 1, 1]) }));
  const second = s.save(batch({ hardState: hs(2, 'b', 0), entries: ents([2], 2) }));
  await Promise.all([first, second]);
  const b = await s.load();
  t.same(b.hardState, hs(2, 'b', 0));
  t.same(b.entries.map((e) => [e.index, e.term]), [[1, 1], [2, 2]]);
  await s.close();
});

for (const [name, openAt] of [['LevelDB store', (dir: string) => LevelLogStore.open(dir)], ['write-ahead log', (dir: string) => WalLogStore.open(dir, { segmentBytes: 1 << 16 })]] as const) {
  t.test(`a one-member node restarts from its ${name} with its term, vote, log and commit`, async (t) => {
    const dir = await tempDir(t);
    let store: LogStore = await openAt(dir);
    let node = new RawNode(config('solo', ['solo']), await store.load());
    const applied: string[] = [];
    const drive = async (): Promise<void> => {
      while (node.hasReady()) {
        const rd = node.ready();
        await store.save(rd);
        for (const e of rd.committedEntries) if (e.data.length > 0) applied.push(text(e.data));
        node.advance(rd);
      }
    };
    node.campaign();
    await drive();
    t.ok(node.propose([bytes('x'), bytes('y')]).ok);
    await drive();
    t.same(applied, ['x', 'y']);
    const before = node.status();
    await store.close();

    store = await openAt(dir);
    node = new RawNode(config('solo', ['solo']), await store.load());
    const after = node.status();
    t.same([after.term, after.vote, after.lastIndex, after.commit], [before.term, before.vote, before.lastIndex, before.commit]);
    applied.length = 0;
    await drive();
    t.same(applied, ['x', 'y'], 'committed entries are applied again from the start (no snapshot)');
    node.campaign();
    await drive();
    t.ok(node.propose([bytes('z')]).ok);
    await drive();
    t.same(applied, ['x', 'y', 'z']);
    await store.close();
  });
}
