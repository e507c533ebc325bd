// Proves the spare worker: the one started is the one taken, once; what ended it before
// it was taken (an error as it loaded, or an exit) is kept for the taker instead of
// ending the process; a discarded one ends; and a waiting one does not keep the
// process alive.
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import t from 'tap';
import { SpareWorker } from './spare-worker.js';

const exited = (code: number) => new Error(`exited (${code})`);
/** Settles when `w` has exited (events.once would reject on the error that comes first). */
const exit = (w: Worker) => new Promise<number>((r) => w.once('exit', r));
const worker = (code: string) => () => new Worker(code, { eval: true });

t.test('the worker started is the one taken, once', async (t) => {
  const spare = new SpareWorker(worker('setInterval(() => {}, 1000)'), exited);
  t.equal(spare.take(), null, 'none before it is started');
  spare.start();
  const first = spare.take();
  t.ok(first?.worker instanceof Worker);
  t.equal(first?.failed, null);
  t.equal(spare.take(), null, 'taken once');
  await first!.worker.terminate();
});

t.test('a second start while one waits starts nothing more', async (t) => {
  let made = 0;
  const spare = new SpareWorker(() => (made++, new Worker('setInterval(() => {}, 1000)', { eval: true })), exited);
  spare.start();
  spare.start();
  t.equal(made, 1);
  await spare.take()!.worker.terminate();
});

t.test('what ends it before it is taken (an error as it loads, an exit) is kept for the taker, not thrown', async (t) => {
  for (const [code, failed] of [['throw new Error("it could not load")', 'it could not load'], ['process.exit(3)', 'exited (3)']] as const) {
    const spare = new SpareWorker(worker(code), exited);
    spare.start();
    const taken = spare.take()!;
    taken.worker.ref(); // as a taker does: an unref'd worker's exit would not keep this test's process waiting
    await exit(taken.worker);
    t.match(taken.failed, { message: failed }, code);
  }
});

t.test('a discarded worker ends', async (t) => {
  let made: Worker | null = null;
  const spare = new SpareWorker(() => (made = new Worker('setInterval(() => {}, 1000)', { eval: true })), exited);
  spare.start();
  made!.ref();
  const ended = exit(made!);
  spare.discard();
  t.type(await ended, 'number', 'it exited');
  t.equal(spare.take(), null);
  spare.discard();
});

t.test('a waiting worker does not keep the process alive', async (t) => {
  const dist = fileURLToPath(new URL('../dist/spare-worker.js', import.meta.url));
  const script = `import { Worker } from 'node:worker_threads';
    const { SpareWorker } = await import(${JSON.stringify(dist)});
    new SpareWorker(() => new Worker('setInterval(() => {}, 1000)', { eval: true }), (c) => new Error(String(c))).start();
    console.log('started');`;
  const r = spawnSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8', timeout: 20_000 });
  t.equal(r.signal, null, 'it was not killed by the timeout');
  t.equal(r.status, 0, r.stderr);
  t.equal(r.stdout.trim(), 'started');
});
