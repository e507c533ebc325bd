// Proves the data directory's lock: one process at a time opens a node's data
// directory. A second taker, in this process or another, is refused with a
// configuration error that says what holds it; the lock is free again once released,
// and once its holder is killed (the kernel releases it: no stale lock). A replica
// opening a data directory another process holds refuses before it touches the Raft
// log or the state store: not a file changes. The lock counts the starts on the
// directory, durably: 1, 2, 3 across takes, in this process or after a kill, and 1 on a
// directory of an earlier release that counted none.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import t from 'tap';
import { ConfigError } from './config.js';
import { DataDirLock } from './data-lock.js';
import { createLogger } from './log.js';
import { Metrics } from './metrics.js';
import { Replica } from './replica.js';

function tempDir(t: { teardown: (f: () => void) => void }): string {
  const dir = mkdtempSync(join(tmpdir(), 'apl-lock-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** Another process that takes the lock as a node would (LevelDB's, on `<dir>/lock`) and holds it until killed. */
async function holder(t: { teardown: (f: () => void) => void }, dir: string): Promise<ChildProcess> {
  const script = `import('level').then(async ({ Level }) => { await new Level(${JSON.stringify(join(dir, 'lock'))}).open(); process.stdout.write('held\\n'); setInterval(() => {}, 60000); })`;
  const child = spawn(process.execPath, ['-e', script], { cwd: new URL('.', import.meta.url).pathname, stdio: ['ignore', 'pipe', 'inherit'] });
  t.teardown(() => void child.kill('SIGKILL'));
  await new Promise<void>((resolve, reject) => {
    child.stdout!.on('data', (b: Buffer) => { if (b.toString().includes('held')) resolve(); });
    child.once('exit', (code) => reject(new Error(`the holder exited (${code}) before taking the lock`)));
  });
  return child;
}

t.test('in one process: a second taker is refused until the first releases', async (t) => {
  const dir = tempDir(t);
  const lock = await DataDirLock.take(dir);
  const err = await DataDirLock.take(dir).then(() => null, (e: Error) => e);
  t.ok(err instanceof ConfigError, 'a configuration error');
  t.match(err?.message, new RegExp(`the data directory ${dir} is in use: another process holds its lock`));
  t.match(err?.message, /Stop that node first, or give this one its own data_dir/);
  await lock.release();
  const again = await DataDirLock.take(dir);
  t.pass('taken again after the release');
  await again.release();
});

t.test('another process: refused while it holds the lock, free once it is killed', async (t) => {
  const dir = tempDir(t);
  const child = await holder(t, dir);
  await t.rejects(DataDirLock.take(dir), ConfigError, 'refused while the other process holds it');
  const exited = new Promise((r) => child.once('exit', r));
  child.kill('SIGKILL');
  await exited;
  const lock = await DataDirLock.take(dir);
  t.pass('taken once the holder was killed, with nothing to clear by hand');
  await lock.release();
});

t.test('each take may count a start: 1 on a directory that counted none, then one more each time, kept across a kill', async (t) => {
  const dir = tempDir(t);
  const lock = await DataDirLock.take(dir);
  t.equal(await lock.countStart(), 1, 'the first start');
  await lock.release();
  const again = await DataDirLock.take(dir);
  t.equal(await again.countStart(), 2, 'the second');
  await again.release();
  // A process that counts a start and is killed: the count was synced before it was used.
  const built = new URL('../dist/data-lock.js', import.meta.url).href;
  const script = `import(${JSON.stringify(built)}).then(async ({ DataDirLock }) => { const l = await DataDirLock.take(${JSON.stringify(dir)}); process.stdout.write(String(await l.countStart()) + '\\n'); setInterval(() => {}, 60000); })`;
  const child = spawn(process.execPath, ['-e', script], { cwd: new URL('.', import.meta.url).pathname, stdio: ['ignore', 'pipe', 'inherit'] });
  t.teardown(() => void child.kill('SIGKILL'));
  const counted = await new Promise<string>((resolve, reject) => {
    child.stdout!.on('data', (b: Buffer) => resolve(b.toString().trim()));
    child.once('exit', (code) => reject(new Error(`the child exited (${code}) before counting`)));
  });
  t.equal(counted, '3', 'the third, in another process');
  const exited = new Promise((r) => child.once('exit', r));
  child.kill('SIGKILL');
  await exited;
  const fourth = await DataDirLock.take(dir);
  t.equal(await fourth.countStart(), 4, 'the fourth, after that process was killed');
  await fourth.release();
});

t.test('a replica refuses a data directory another process holds, and changes nothing in it', async (t) => {
  const dir = tempDir(t);
  const sink = new Writable({ write: (_c, _e, cb) => cb() });
  const open = () => Replica.open({
    id: 'n1', peers: ['n1'], peerContext: {}, clusterId: 'lock-test', clusterState: 'new', dataDir: dir,
    raft: { tick_ms: 10, election_ticks: 10, heartbeat_ticks: 2, max_inflight_msgs: 64, max_size_per_msg: 1 << 20, max_uncommitted_entries: 10_000, wal_segment_bytes: 1 << 20 },
    tickIntervalMs: 3_600_000, commitTimeoutMs: 5_000, proposalsInFlightMax: 1_000,
    snapshotIntervalEntries: 1_000, snapshotCatchupEntries: 100, snapshotHoldEntries: 0, readyLagEntriesMax: 1_000,
    cacheEntriesMax: 1_000, writeBufferBytes: 1 << 20, blockBytes: 4096,
    transport: { send: () => undefined }, log: createLogger('info', 'n1', sink), metrics: new Metrics(),
  });
  const first = await open();
  first.start();
  for (const deadline = Date.now() + 10_000; !first.isLeader(); await new Promise((r) => setTimeout(r, 10))) {
    if (Date.now() > deadline) throw new Error('the replica did not become the primary');
  }
  await first.close();
  // What a node's open would touch: the Raft log's segments (and a spare being made), the state store.
  const files = (): Record<string, string> => {
    const out: Record<string, string> = {};
    const walk = (d: string) => {
      for (const e of readdirSync(d, { withFileTypes: true })) {
        const p = join(d, e.name);
        if (e.isDirectory()) {
          if (p !== join(dir, 'lock')) walk(p);
        } else {
          const s = statSync(p);
          out[p.slice(dir.length)] = `${s.size} ${s.mtimeMs}`;
        }
      }
    };
    walk(dir);
    return out;
  };
  const before = files();
  t.ok(Object.keys(before).some((f) => f.startsWith('/wal/') && f.endsWith('.wal')), 'the data directory has a Raft log');
  await holder(t, dir);
  const err = await open().then(() => null, (e: Error) => e);
  t.ok(err instanceof ConfigError, 'refused with a configuration error');
  t.match(err?.message, /is in use/);
  t.same(files(), before, 'no file of the Raft log or the state store was made, changed or removed');
});
