// Proves how a streamed answer (the log export) ends: whole for a client that reads it
// all; at once for a client that goes away; after the stall limit, with its connection
// closed, for one that stops reading. In the last two the lines' source is closed (its
// `finally` runs), as a store iterator must be, or it pins the files it reads.
import t, { type Test } from 'tap';
import { createServer, get, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { streamLines, type StreamEnd } from './http.js';

const LINE = 'x'.repeat(16 * 1024);

/** Lines of 16 KiB, `count` of them (endless by default); `closed` once the source is closed. */
function source(count = Infinity): { lines: AsyncGenerator<string>; closed: Promise<void>; sent: () => number } {
  let sent = 0;
  let close: () => void = () => undefined;
  const closed = new Promise<void>((r) => (close = r));
  const lines = (async function* () {
    try {
      while (sent < count) {
        sent++;
        yield LINE;
        await Promise.resolve();
      }
    } finally {
      close();
    }
  })();
  return { lines, closed, sent: () => sent };
}

/** A server that streams `lines` to its one request, with the stall limit given; `ended` says how. */
async function serving(t: Test, lines: AsyncIterable<string>, stallMs: number): Promise<{ url: string; ended: Promise<StreamEnd> }> {
  let end: (e: StreamEnd) => void = () => undefined;
  const ended = new Promise<StreamEnd>((r) => (end = r));
  const server: Server = createServer((_req, res: ServerResponse) => {
    res.setHeader('content-type', 'application/x-ndjson');
    void streamLines(res, lines, stallMs).then(end);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.teardown(() => new Promise<void>((r) => {
    server.closeAllConnections();
    server.close(() => r());
  }));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/`, ended };
}

/** Settles with `p`, or fails the test after `ms` (the old export waited for ever). */
function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  return Promise.race([p, new Promise<T>((_, reject) => setTimeout(() => reject(new Error(`${what}: not within ${ms} ms`)), ms).unref())]);
}

t.test('a client that reads it all gets every line, and the answer ends', async (t) => {
  const s = source(200);
  const { url, ended } = await serving(t, s.lines, 1000);
  const body = await new Promise<string>((resolve, reject) => {
    get(url, (res: IncomingMessage) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
      res.on('error', reject);
    }).on('error', reject);
  });
  t.equal(await ended, 'done');
  t.equal(body, `${LINE}\n`.repeat(200), '200 lines, each whole');
  await within(s.closed, 1000, 'the source closed');
});

t.test('a client that goes away mid-answer stops the stream at once, and its source is closed', async (t) => {
  const s = source();
  const { url, ended } = await serving(t, s.lines, 60_000);
  await new Promise<void>((resolve, reject) => {
    const req = get(url, (res: IncomingMessage) => {
      res.once('data', () => {
        req.destroy();
        resolve();
      });
    });
    req.on('error', () => undefined);
    req.on('close', resolve);
    setTimeout(() => reject(new Error('no data')), 5000).unref();
  });
  t.equal(await within(ended, 5000, 'the stream ended'), 'gone', 'well before the stall limit of 60 s');
  await within(s.closed, 1000, 'the source closed');
  t.pass('the source was closed');
});

t.test('a client that stops reading is cut after the stall limit: the connection closes and the source is closed', async (t) => {
  const s = source();
  const { url, ended } = await serving(t, s.lines, 300);
  let received = 0;
  const started = Date.now();
  const answer = new Promise<IncomingMessage>((resolve, reject) => {
    get(url, (res: IncomingMessage) => {
      res.once('data', (c: Buffer) => {
        received += c.length;
        res.pause(); // reads nothing more: the socket's buffers fill, then the server's
        resolve(res);
      });
    }).on('error', reject);
  });
  const res = await within(answer, 5000, 'the answer began');
  t.equal(await within(ended, 10_000, 'the stream ended'), 'stalled');
  t.ok(Date.now() - started >= 300, 'not before the limit');
  await within(s.closed, 1000, 'the source closed');
  t.ok(received < s.sent() * LINE.length, `the client had read ${received} bytes of the ${s.sent() * (LINE.length + 1)} written`);
  // Reading again, the client drains what reached it and then finds the body cut.
  const end = new Promise<string>((resolve) => {
    res.on('end', () => resolve('end'));
    res.on('error', (err) => resolve(`error: ${err.message}`));
  });
  res.resume();
  t.match(await within(end, 5000, 'the client saw the end'), /^error: aborted/, 'the body ends without its last chunk: no whole answer');
});
