// Proves a store streams as framed chunks built on the store's thread and is written
// from them on another store's thread: every record arrives, byte for byte, across
// chunk boundaries and multi-byte text; the chunks are of the size asked; the sum of
// the hashed records' terms equals the one `@apl/core` computes from the strings; a
// loop left early closes its iterator; and a chunk altered, cut inside a record, or
// holding a hashed key with a NUL byte is refused before anything of it is written.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { addHash, HASHED_PREFIXES, recordHash } from '@apl/core';
import { ThreadedLevel } from './level-thread.js';
import { decodeFrames, encodeFrames, readChunk, sha256Hex, type FramedChunk } from './store-frames.js';

async function open(t: Test): Promise<ThreadedLevel> {
  const dir = mkdtempSync(join(tmpdir(), 'apl-store-frames-'));
  const db = new ThreadedLevel(dir);
  await db.open();
  t.teardown(async () => {
    await db.close();
    rmSync(dir, { recursive: true, force: true });
  });
  return db;
}

async function all(db: ThreadedLevel): Promise<[string, string][]> {
  const out: [string, string][] = [];
  for await (const e of db.iterator({})) out.push(e);
  return out;
}

const META = 'chain/meta';
/** A table the state hash sums, and one it does not. */
const H = HASHED_PREFIXES[0]!;
const HASHED = HASHED_PREFIXES;

t.test('a store travels as chunks of the size asked, and arrives whole with the sum core computes', async (t) => {
  const source = await open(t);
  const target = await open(t);
  const records: [string, string][] = [[META, '{"applied":7}']];
  for (let k = 0; k < 300; k++) records.push([`${H}${String(k).padStart(3, '0')}`, `{"n":${k},"text":"${'é€😀'.repeat(k % 7)}"}`]);
  for (let k = 0; k < 50; k++) records.push([`zz/${k}`, 'x'.repeat(k * 10)]);
  await source.batch(records.map(([key, value]) => ({ type: 'put' as const, key, value })));
  // A write after the snapshot is not streamed.
  const snapshot = source.snapshot();
  await source.batch([{ type: 'put', key: `${H}late`, value: 'after' }]);

  const chunks: FramedChunk[] = [];
  for await (const c of source.frames({ snapshot, bytes: 600 })) chunks.push(c);
  await snapshot.close();
  t.ok(chunks.length > 10, `${chunks.length} chunks`);
  for (const c of chunks.slice(0, -1)) t.ok(c.data.length >= 600, 'each chunk but the last holds at least the bytes asked');
  t.ok(chunks.every((c) => c.digest === sha256Hex(c.data)), 'each carries its digest');
  const framed = chunks.flatMap((c) => [...decodeFrames(c.data)].map(([k, v]) => [k.toString(), v.toString()]));
  t.same(framed, [...records].sort(([a], [b]) => (a < b ? -1 : 1)), 'every record, in key order, once');

  let sum = 0n;
  let meta: string | null = null;
  for (const [seq, c] of chunks.entries()) {
    const w = await target.putFrames(seq, c, HASHED, META);
    sum = addHash(sum, BigInt(`0x${w.sum}`));
    meta = w.meta ?? meta;
  }
  t.equal(meta, '{"applied":7}', 'the position record is read out, not summed');
  const expected = records.reduce((s, [k, v]) => (k === META ? s : addHash(s, recordHash(k, v))), 0n);
  t.not(expected, 0n);
  t.equal(sum, expected, 'the terms sum as core sums them');
  t.same(await all(target), await all(source).then((r) => r.filter(([k]) => k !== `${H}late`)), 'the target holds what the snapshot held');
});

t.test('a loop left early closes its iterator; an empty store streams no chunk', async (t) => {
  const db = await open(t);
  const empty = db.snapshot();
  const none: FramedChunk[] = [];
  for await (const c of db.frames({ snapshot: empty, bytes: 100 })) none.push(c);
  await empty.close();
  t.same(none, []);
  await db.batch(Array.from({ length: 100 }, (_, k) => ({ type: 'put' as const, key: `k/${k}`, value: 'v'.repeat(50) })));
  const snapshot = db.snapshot();
  for await (const c of db.frames({ snapshot, bytes: 100 })) {
    t.ok(c.data.length > 0);
    break;
  }
  await snapshot.close();
  await db.close();
  t.pass('the store closes with no iterator left open');
});

t.test('a chunk altered, cut inside a record, or with a NUL in a hashed key is refused, and nothing of it is written', async (t) => {
  const db = await open(t);
  const good = encodeFrames([[Buffer.from(`${H}a`), Buffer.from('1')], [Buffer.from(`${H}b`), Buffer.from('2')]]);
  const altered = Buffer.from(good.data);
  altered[altered.length - 1] = altered[altered.length - 1]! ^ 1;
  await t.rejects(db.putFrames(3, { data: altered, digest: good.digest }, HASHED, META), /snapshot chunk 3 does not match its digest/);
  const cut = good.data.subarray(0, good.data.length - 1);
  await t.rejects(db.putFrames(0, { data: cut, digest: sha256Hex(cut) }, HASHED, META), /ends inside a record$/);
  const header = good.data.subarray(0, 5);
  await t.rejects(db.putFrames(0, { data: header, digest: sha256Hex(header) }, HASHED, META), /ends inside a record header/);
  const nul = encodeFrames([[Buffer.from(`${H}x\u0000y`), Buffer.from('1')]]);
  await t.rejects(db.putFrames(0, { ...nul }, HASHED, META), /holds a key with a NUL byte/);
  t.same(await all(db), [], 'nothing was written');
  t.throws(() => readChunk({ seq: 9, ...good, digest: '0'.repeat(64) }, HASHED, META), /chunk 9 does not match/);
});
