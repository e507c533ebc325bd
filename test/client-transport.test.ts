// Proves the SDK's transport against servers that misbehave on purpose (HTTPS on free
// ports of 127.0.0.1, no node): an answer trickled byte by byte is held to the
// time-out as a whole; an export that goes silent, or is cut off part-way, ends with a
// TransportError after the lines that came whole; an export passes over a replica that
// refuses the connection; an intent that could not be confirmed is thrown with the
// transaction id it went with and how many times it was sent, and as the 503 it got
// even when no connection follows it; an intent that never got past TLS is not sent
// again; and the feed asks again after a server's failure.
import t, { type Test } from 'tap';
import { readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:https';
import type { AddressInfo } from 'node:net';
import { createServer as createTcpServer } from 'node:net';
import { join } from 'node:path';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { AdminClient, AgentClient, CommitUnavailableError, TransportError } from '@apl/client';
import { EVIDENCE, testCerts } from './support/node.js';
import { errorReply, startProxy } from './support/proxy.js';

const certs = testCerts();
const ca = readFileSync(certs.ca);

/** An HTTPS server on a free port whose every request `handle` answers as it likes. */
async function server(t: Test, handle: (req: IncomingMessage, res: ServerResponse) => void): Promise<string> {
  const s: Server = createServer({ cert: readFileSync(join(certs.dir, 'n2.pem')), key: readFileSync(join(certs.dir, 'n2-key.pem')) }, handle);
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  t.teardown(() => {
    s.closeAllConnections();
    return new Promise<void>((r) => s.close(() => r()));
  });
  return `https://127.0.0.1:${(s.address() as AddressInfo).port}`;
}

/** A port of 127.0.0.1 that refuses connections: one just bound and closed. */
async function refusedPort(): Promise<number> {
  const s = createTcpServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const { port } = s.address() as AddressInfo;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

/** Rejects if `p` has not settled within `ms`: a test fails rather than hangs. */
function within<T>(p: Promise<T>, ms: number): Promise<T> {
  return Promise.race([p, new Promise<never>((_, reject) => setTimeout(() => reject(new Error(`still waiting after ${ms} ms`)), ms))]);
}

async function lines(gen: AsyncGenerator<string>): Promise<{ got: string[]; err: unknown }> {
  const got: string[] = [];
  try {
    for await (const l of gen) got.push(l);
    return { got, err: null };
  } catch (err) {
    return { got, err };
  }
}

const DIGEST = '{"applied_index":1,"tick":0,"digest":"' + 'a'.repeat(64) + '","state_hash":"' + 'b'.repeat(64) + '"}';
const RECORD = (i: number) => `{"entry_hash":"${'c'.repeat(64)}","index":${i},"op":{"type":"Tick","v":1},"result":{"ok":true,"value":{}}}`;

t.test('an answer trickled a byte at a time is held to the time-out as a whole', async (t) => {
  const url = await server(t, (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': String(DIGEST.length) });
    let at = 0;
    const timer = setInterval(() => {
      if (res.destroyed || at >= DIGEST.length) return clearInterval(timer);
      res.write(DIGEST[at++]!);
    }, 40);
    res.on('close', () => clearInterval(timer));
  });
  const admin = new AdminClient({ url, ca, token: 'x', timeoutMs: 600 });
  t.teardown(() => admin.close());
  const err = await within(admin.getDigest().then(() => null, (e: unknown) => e), 10_000);
  t.type(err, TransportError, 'a byte every 40 ms is never silent for 600 ms, but the whole answer takes longer');
  t.equal((err as TransportError).code, 'ETIMEDOUT');
});

t.test('an export that goes silent ends with a TransportError after its whole lines', async (t) => {
  const url = await server(t, (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/x-ndjson' });
    res.write(`${RECORD(1)}\n`); // and nothing more, the connection left open
  });
  const admin = new AdminClient({ url, ca, token: 'x', timeoutMs: 500 });
  t.teardown(() => admin.close());
  const { got, err } = await within(lines(admin.exportLog()), 10_000);
  t.same(got, [RECORD(1)]);
  t.type(err, TransportError);
  t.equal((err as TransportError).code, 'ETIMEDOUT');
});

t.test('an export cut off part-way ends with a TransportError after its whole lines', async (t) => {
  const url = await server(t, (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/x-ndjson' });
    res.write(`${RECORD(1)}\n${RECORD(2)}\n${RECORD(3).slice(0, 40)}`, () => setTimeout(() => res.socket?.destroy(), 50));
  });
  const admin = new AdminClient({ url, ca, token: 'x' });
  t.teardown(() => admin.close());
  const { got, err } = await within(lines(admin.exportLog()), 10_000);
  t.same(got.slice(0, 2), [RECORD(1), RECORD(2)], 'the whole lines');
  t.type(err, TransportError, `a TransportError, not a bare Error: ${String(err)}`);
});

t.test('an export passes over a replica that refuses the connection', async (t) => {
  const url = await server(t, (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/x-ndjson' });
    res.end(`${RECORD(1)}\n${RECORD(2)}\n`);
  });
  const admin = new AdminClient({ url: [`https://127.0.0.1:${await refusedPort()}`, url], ca, token: 'x' });
  t.teardown(() => admin.close());
  const { got, err } = await within(lines(admin.exportLog()), 10_000);
  t.equal(err, null);
  t.same(got, [RECORD(1), RECORD(2)]);
});

t.test('an intent that could not be confirmed is thrown with its transaction id and how often it was sent', async (t) => {
  const proxy = await startProxy(null, async (req) => {
    if (req.method === 'POST') return errorReply(503, { error: 'commit_unavailable', message: 'The commit could not be confirmed in time.' });
    return errorReply(404, { error: 'unknown_transaction', message: 'No such transaction.' });
  });
  t.teardown(() => proxy.close());
  const agent = new AgentClient({ url: proxy.url, ca, attestation: 'v4.public.x', agent: 'agent://acme.example/agent/buyer-7', retryDelayMs: 1 });
  t.teardown(() => agent.close());
  const err = await agent.submitIntent({
    entries: [], action: { action: 'purchase.book', bindings: {} }, evidence: [EVIDENCE], justification: 'j', policy: 'pol_1',
  }).then(() => null, (e: unknown) => e);
  t.type(err, CommitUnavailableError);
  const posted = proxy.seen.filter((s) => s.method === 'POST').map((s) => (JSON.parse(s.body) as { transaction: string }).transaction);
  t.equal(posted.length, 3, 'sent once and retried twice');
  t.equal(new Set(posted).size, 1, 'with one id');
  t.equal((err as CommitUnavailableError).transaction, posted[0], 'the id it made is on the error, to retry with');
  t.match(posted[0], /^txn_[0-9a-f]{32}$/);
  t.equal((err as CommitUnavailableError).attempts, 3, 'attempts counts every send');
});

t.test('a 503 and then no connection: the intent may have landed, and the error says so', async (t) => {
  let proxy: Awaited<ReturnType<typeof startProxy>> | null = null;
  proxy = await startProxy(null, async () => {
    setImmediate(() => void proxy!.close()); // gone after this answer: every later connection is refused
    return errorReply(503, { error: 'commit_unavailable', message: 'The commit could not be confirmed in time.' });
  });
  const agent = new AgentClient({ url: proxy.url, ca, attestation: 'v4.public.x', agent: 'agent://acme.example/agent/buyer-7', retryDelayMs: 20 });
  t.teardown(() => agent.close());
  const err = await agent.submitIntent({
    entries: [], action: { action: 'purchase.book', bindings: {} }, evidence: [EVIDENCE], justification: 'j', policy: 'pol_1', transaction: 'txn_landed_maybe',
  }).then(() => null, (e: unknown) => e);
  t.type(err, CommitUnavailableError, `the 503, not the refused connection after it: ${String(err)}`);
  t.equal((err as CommitUnavailableError).transaction, 'txn_landed_maybe');
});

t.test('an intent whose TLS handshake fails is not sent again nor read back: it cannot have landed', async (t) => {
  const proxy = await startProxy(null, async () => errorReply(500, { error: 'internal_error', message: 'x' }));
  t.teardown(() => proxy.close());
  // No CA: the node's development certificate is not trusted, so nothing is ever sent.
  const agent = new AgentClient({ url: proxy.url, attestation: 'v4.public.x', agent: 'agent://acme.example/agent/buyer-7', retryDelayMs: 5_000 });
  t.teardown(() => agent.close());
  const started = Date.now();
  const err = await agent.submitIntent({
    entries: [], action: { action: 'purchase.book', bindings: {} }, evidence: [EVIDENCE], justification: 'j', policy: 'pol_1',
  }).then(() => null, (e: unknown) => e);
  t.type(err, TransportError);
  t.match((err as TransportError).code, /CERT|SELF_SIGNED|UNABLE_TO_/);
  t.ok(Date.now() - started < 4_000, 'thrown at once, not after retries 5 s apart');
  t.equal(proxy.seen.length, 0);
});

t.test('the feed asks again after a server failure (a 5xx, a proxy\'s HTML page) rather than stop', async (t) => {
  const proxy = await startProxy(null, async () => ({ status: 502, headers: { 'content-type': 'text/html' }, body: '<html>Bad Gateway</html>' }));
  t.teardown(() => proxy.close());
  const admin = new AdminClient({ url: proxy.url, ca, token: 'x' });
  t.teardown(() => admin.close());
  const stop = new AbortController();
  const reasons: string[] = [];
  const records: unknown[] = [];
  const following = (async () => {
    for await (const r of admin.feed({ reconnectDelayMs: 10, signal: stop.signal, onReconnect: ({ reason }) => {
      reasons.push(reason);
      if (reasons.length === 2) stop.abort();
    } })) records.push(r);
  })();
  const err = await within(following.then(() => null, (e: unknown) => e), 10_000);
  t.equal(err, null, `it did not give up: ${String(err)}`);
  t.equal(reasons.length, 2, 'it reconnected');
  t.same(records, []);
});
