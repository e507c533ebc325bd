// Proves the state store's LevelDB on its own thread answers as classic-level does:
// reads, batches, ranges in both directions across the iterator's batches, snapshots
// that keep the store as it was, errors with their codes; that an iterator left early
// and the store itself close cleanly; that a store held open elsewhere is refused and
// the refused handle closes; that an idle thread does not keep the process alive
// while a waiting request does; and that a thread started early (before the node knew
// where its store is) is taken by the first store made, which it opens where that
// store says, and a request before the open is refused, saying so.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import t, { type Test } from 'tap';
import { ThreadedLevel } from './level-thread.js';

async function open(t: Test): Promise<ThreadedLevel> {
  const dir = mkdtempSync(join(tmpdir(), 'apl-level-thread-'));
  const db = new ThreadedLevel(dir);
  await db.open();
  t.teardown(async () => {
    await db.close();
    rmSync(dir, { recursive: true, force: true });
  });
  return db;
}

const key = (k: number) => `k/${String(k).padStart(4, '0')}`;

t.test('reads, batches and ranges answer as LevelDB does, across iterator batches', async (t) => {
  const db = await open(t);
  await db.batch(Array.from({ length: 600 }, (_, k) => ({ type: 'put' as const, key: key(k), value: `v${k}` })));
  await db.batch([{ type: 'del', key: key(5) }, { type: 'put', key: 'other', value: 'x' }]);
  t.equal(await db.get(key(7)), 'v7');
  t.equal(await db.get(key(5)), undefined, 'a deleted key reads as absent');
  t.same(await db.getMany([key(1), key(5), 'nope', 'other']), ['v1', undefined, undefined, 'x']);
  const keys = await db.keys({ gte: 'k/', lt: 'k0' }).all();
  t.equal(keys.length, 599);
  t.equal(keys[0], key(0));
  t.equal(keys.at(-1), key(599));
  const forward: string[] = [];
  for await (const [k, v] of db.iterator({ gt: key(100), lte: key(450) })) forward.push(`${k}=${v}`);
  t.equal(forward.length, 350, 'more than one batch of 256 brought over');
  t.equal(forward[0], `${key(101)}=v101`);
  t.equal(forward.at(-1), `${key(450)}=v450`);
  const backward: string[] = [];
  for await (const [k] of db.iterator({ gte: 'k/', lt: 'k0', reverse: true })) backward.push(k);
  t.same(backward, [...keys].reverse(), 'in reverse');
  const values: string[] = [];
  for await (const v of db.values({ gte: key(595), lt: 'k0' })) values.push(v);
  t.same(values, ['v595', 'v596', 'v597', 'v598', 'v599']);
});

t.test('a snapshot reads the store as it was, until closed', async (t) => {
  const db = await open(t);
  await db.batch([{ type: 'put', key: 'a', value: '1' }]);
  const snapshot = db.snapshot();
  await db.batch([{ type: 'put', key: 'a', value: '2' }, { type: 'put', key: 'b', value: '3' }]);
  t.equal(await db.get('a', { snapshot }), '1');
  t.equal(await db.get('a'), '2');
  const seen: string[] = [];
  for await (const [k, v] of db.iterator({ snapshot })) seen.push(`${k}=${v}`);
  t.same(seen, ['a=1'], 'the iterator at the snapshot does not see later writes');
  await snapshot.close();
  await t.rejects(db.get('a', { snapshot }), /no snapshot/, 'a closed snapshot cannot be read');
});

t.test('an iterator left early is closed; errors keep their codes; a closed store refuses', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'apl-level-thread-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const db = new ThreadedLevel(dir);
  await db.open();
  await db.batch(Array.from({ length: 300 }, (_, k) => ({ type: 'put' as const, key: key(k), value: 'v' })));
  let n = 0;
  for await (const _ of db.iterator({})) if (++n === 3) break;
  t.equal(n, 3);
  const it = db.iterator({});
  await it.next();
  await it.close();
  await it.close();
  t.equal(await it.next(), undefined, 'a closed iterator has nothing more');
  const err = await db.batch([{ type: 'put', key: 'a', value: undefined as unknown as string }]).then(() => null, (e: Error & { code?: string }) => e);
  t.ok(err instanceof Error, 'LevelDB refuses an undefined value');
  t.equal(err?.code, 'LEVEL_INVALID_VALUE', 'with its code');
  await db.close();
  await t.rejects(db.get(key(1)), /closed/, 'a request after close is refused');
  await db.close();
});

t.test('a store another handle holds open is refused, and the refused handle closes', async (t) => {
  const db = await open(t);
  const second = new ThreadedLevel(db.location);
  const err = await second.open().then(() => null, (e: Error & { code?: string }) => e);
  t.ok(err instanceof Error, 'LevelDB\'s lock refuses a second opener');
  t.equal(err?.code, 'LEVEL_DATABASE_NOT_OPEN');
  await second.close();
  await t.rejects(second.get('a'), /closed/);
  t.equal(await db.get('a'), undefined, 'the first handle is untouched');
});

t.test('an idle LevelDB thread does not keep the process alive; a waiting request does', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'apl-level-thread-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const dist = fileURLToPath(new URL('../dist/level-thread.js', import.meta.url));
  // Opens, writes and reads without closing: the process must end on its own, after the read answered.
  const script = `import('${dist}').then(async ({ ThreadedLevel }) => {
    const db = new ThreadedLevel(${JSON.stringify(dir)});
    await db.open();
    await db.batch([{ type: 'put', key: 'a', value: 'answered' }]);
    console.log(await db.get('a'));
  });`;
  const r = spawnSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8', timeout: 20_000 });
  t.equal(r.signal, null, 'it was not killed by the timeout');
  t.equal(r.status, 0, r.stderr);
  t.equal(r.stdout.trim(), 'answered', 'the awaited read was answered before the process ended');
});

t.test('a thread started early opens the first store made, where that store says', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'apl-level-thread-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  ThreadedLevel.startEarly();
  const db = new ThreadedLevel(join(dir, 'store'));
  await db.open();
  await db.batch([{ type: 'put', key: 'a', value: 'kept' }]);
  t.equal(await db.get('a'), 'kept');
  await db.close();
  t.ok(existsSync(join(dir, 'store', 'CURRENT')), 'the LevelDB is at the location given');
  const again = new ThreadedLevel(join(dir, 'store'));
  await again.open();
  t.equal(await again.get('a'), 'kept', 'and holds what was written');
  await again.close();
});

t.test('a request before the store is opened is refused, saying so', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'apl-level-thread-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const db = new ThreadedLevel(dir);
  await t.rejects(db.get('a'), /the store is not open \(get before open\)/);
  await db.open();
  t.equal(await db.get('a'), undefined, 'it opens after all');
  await db.close();
});
