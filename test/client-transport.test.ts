// Proves the SDK's transport against servers that misbehave on purpose (HTTPS on free
// ports of 127.0.0.1, no node): an answer trickled byte by byte is held to the
// time-out as a whole; an export that goes silent, or is cut off part-way, ends with a
// TransportError after the lines that came whole; an export passes over a replica that
// refuses the connection, or does not begin its answer in time; an intent that could not be confirmed is thrown with the
// transaction id it went with and how many times it was sent, and as the 503 it got
// even when no connection follows it; an intent that never got past TLS is not sent
// again; and the feed asks again after a server's failure. A request that timed out
// is never sent again behind the caller's back; a replica that does not answer in time
// is passed over for the next one for a read or an intent, not for an admin write; an
// error thrown after an intent was sent carries its id and sends whatever its kind; a
// read-back that is not the transaction is refused, and one that fails (a 421 after a
// 503) leaves the 503 to be thrown; a failed re-read of the policy carries the
// intent's id; an integer beyond 2^53 is refused before any request; a feed's
// silence is reported with its own time-out; and a last page's null cursor is
// nothing after it, never "null".
import t, { type Test } from 'tap';
import { readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:https';
import type { AddressInfo } from 'node:net';
import { createServer as createTcpServer } from 'node:net';
import { join } from 'node:path';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { AdminClient, AgentClient, CommitUnavailableError, TransportError, UnexpectedResponseError } from '@apl/client';
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
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`still waiting after ${ms} ms`)), ms)));
  // Cleared once `p` settles: a timer left running would hold the test's process open.
  return Promise.race([p, late]).finally(() => clearTimeout(timer));
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

t.test('an export passes over a replica that does not begin its answer in time', async (t) => {
  const hung: string[] = [];
  const silent = await server(t, (req) => {
    hung.push(`${req.method} ${req.url}`); // never answered
  });
  const url = await server(t, (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/x-ndjson' });
    res.end(`${RECORD(1)}\n${RECORD(2)}\n`);
  });
  const admin = new AdminClient({ url: [silent, url], ca, token: 'x', timeoutMs: 300 });
  t.teardown(() => admin.close());
  const { got, err } = await within(lines(admin.exportLog()), 10_000);
  t.equal(err, null, 'no error: the next replica answered');
  t.same(got, [RECORD(1), RECORD(2)]);
  t.same(hung, ['GET /admin/v1/log/export'], 'after the silent one had it once');
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

const INTENT = { entries: [], action: { action: 'purchase.book', bindings: {} }, evidence: [EVIDENCE], justification: 'j', policy: 'pol_1' };
const AGENT = { attestation: 'v4.public.x', agent: 'agent://acme.example/agent/buyer-7' };
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

t.test('a request that timed out is not sent again once the caller has its error', async (t) => {
  const posts: number[] = [];
  const url = await server(t, (req, res) => {
    if (req.method === 'POST') return void posts.push(Date.now()); // and never answered
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(DIGEST);
  });
  const admin = new AdminClient({ url, ca, token: 'x', timeoutMs: 400 });
  t.teardown(() => admin.close());
  // A request answered first, so that the POST goes on a kept-alive connection.
  t.equal((await admin.getDigest()).applied_index, 1);
  const err = await within(admin.addParty({ id: 'party_x' }).then(() => null, (e: unknown) => e), 10_000);
  t.type(err, TransportError);
  t.equal((err as TransportError).code, 'ETIMEDOUT');
  await sleep(500);
  t.equal(posts.length, 1, 'the admin write went once, and not again behind the caller\'s back');
});

t.test('a replica that does not answer in time is passed over for a read and an intent, not for an admin write', async (t) => {
  const hung: string[] = [];
  const slow = await server(t, (req) => {
    hung.push(`${req.method} ${req.url}`); // never answered
  });
  const fast = await server(t, (req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    if (req.method === 'GET' && req.url === '/admin/v1/log/digest') return res.end(DIGEST);
    if (req.method === 'GET') return res.end('{"id":"pol_1"}');
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => res.end(JSON.stringify({
      transaction: (JSON.parse(body) as { transaction: string }).transaction, verdict: 'Permitted', posted: true, policy: 'pol_1',
      obligations_pending: [], justification_hash: 'a'.repeat(64), provenance: { rule: 'R-x', basis: 'b', obligations_created: [], obligations_discharged: [] },
    })));
  });
  const admin = new AdminClient({ url: [slow, fast], ca, token: 'x', timeoutMs: 300 });
  t.teardown(() => admin.close());
  t.equal((await within(admin.getDigest(), 10_000)).applied_index, 1, 'the read is answered by the next replica');
  // A client of its own, which tries the hung replica first.
  const writer = new AdminClient({ url: [slow, fast], ca, token: 'x', timeoutMs: 300 });
  t.teardown(() => writer.close());
  const write = await within(writer.addParty({ id: 'party_y' }).then(() => null, (e: unknown) => e), 10_000);
  t.type(write, TransportError, 'an admin write is not sent to another replica');
  const agent = new AgentClient({ url: [slow, fast], ca, ...AGENT, timeoutMs: 300, retryDelayMs: 1 });
  t.teardown(() => agent.close());
  const r = await within(agent.submitIntent({ ...INTENT, transaction: 'txn_passed_over' }), 10_000);
  t.equal(r.outcome.transaction, 'txn_passed_over', 'the intent is answered by the next replica');
  t.same(hung.filter((h) => h.startsWith('POST /api/v1/intents')).length, 1, 'after the hung one had it once');
  t.same([r.attempts, r.posts], [1, 2], 'posts counts the send to the hung replica and the one to the next');
});

t.test('an error thrown after an intent was sent carries its id and how often it was sent, whatever its kind', async (t) => {
  const proxyPage = await server(t, (_req, res) => {
    res.writeHead(502, { 'content-type': 'text/html' });
    res.end('<html><body>Bad Gateway</body></html>');
  });
  const agent = new AgentClient({ url: proxyPage, ca, ...AGENT, retryDelayMs: 1 });
  t.teardown(() => agent.close());
  const err = await within(agent.submitIntent({ ...INTENT, transaction: 'txn_html' }).then(() => null, (e: unknown) => e), 10_000);
  t.type(err, UnexpectedResponseError);
  t.equal((err as UnexpectedResponseError).transaction, 'txn_html');
  t.equal((err as UnexpectedResponseError).attempts, 1);
  const silent = await server(t, () => undefined);
  const hung = new AgentClient({ url: silent, ca, ...AGENT, timeoutMs: 200, commitRetries: 1, retryDelayMs: 1 });
  t.teardown(() => hung.close());
  const timeout = await within(hung.submitIntent({ ...INTENT, transaction: 'txn_hung' }).then(() => null, (e: unknown) => e), 10_000);
  t.type(timeout, TransportError);
  t.equal((timeout as TransportError).transaction, 'txn_hung');
  t.equal((timeout as TransportError).attempts, 2, 'sent, and sent again once');
});

t.test('a 503 and then 421 on the retries and the read: the 503 is thrown, never the 421 (the intent may have landed)', async (t) => {
  const seen: string[] = [];
  const url = await server(t, (req, res) => {
    seen.push(req.method!);
    res.writeHead(seen.length === 1 ? 503 : 421, { 'content-type': 'application/json' });
    res.end(seen.length === 1 ? '{"error":"commit_unavailable","message":"m"}' : '{"error":"not_primary","message":"not the primary","primary_client_addr":null}');
  });
  const agent = new AgentClient({ url, ca, ...AGENT, retryDelayMs: 1 });
  t.teardown(() => agent.close());
  const err = await within(agent.submitIntent({ ...INTENT, transaction: 'txn_503_then_421' }).then(() => null, (e: unknown) => e), 10_000);
  t.type(err, CommitUnavailableError, `the 503: a caller that takes a 421 for "not recorded" would send it again under a new id (${String(err)})`);
  t.equal((err as CommitUnavailableError).transaction, 'txn_503_then_421');
  t.same(seen, ['POST', 'POST', 'POST', 'GET'], 'sent, retried twice, then read');
});

t.test('an intent whose pin was stale, and whose re-read of the policy fails, is thrown with its id', async (t) => {
  const url = await server(t, (req, res) => {
    res.writeHead(req.method === 'POST' ? 409 : 503, { 'content-type': 'application/json' });
    res.end(req.method === 'POST' ? '{"error":"stale_policy","message":"stale","pinned":"pol_1","active":"pol_2"}' : '{"error":"commit_unavailable","message":"m"}');
  });
  const agent = new AgentClient({ url, ca, ...AGENT, retryDelayMs: 1 });
  t.teardown(() => agent.close());
  const err = await within(agent.submitIntent({ ...INTENT, transaction: 'txn_reread' }).then(() => null, (e: unknown) => e), 10_000);
  t.type(err, CommitUnavailableError);
  t.equal((err as CommitUnavailableError).transaction, 'txn_reread', 'the id it was sent with');
  t.equal((err as CommitUnavailableError).attempts, 1, 'sent once');
});

t.test('a 429 carries its Retry-After, in seconds, on the error', async (t) => {
  const url = await server(t, (req, res) => {
    res.writeHead(429, { 'content-type': 'application/json', 'retry-after': req.method === 'POST' ? '7' : 'Wed, 21 Oct 2026 07:28:00 GMT' });
    res.end('{"error":"rate_limited","message":"Too many intents from this agent. Retry after 7 s."}');
  });
  const agent = new AgentClient({ url, ca, ...AGENT });
  t.teardown(() => agent.close());
  const err = await within(agent.submitIntent({ ...INTENT, transaction: 'txn_limited' }).then(() => null, (e: unknown) => e), 10_000);
  t.match(err, { name: 'RateLimitedError', code: 'rate_limited', status: 429, retryAfterSeconds: 7, transaction: 'txn_limited' });
  const read = await within(agent.getActivePolicy().then(() => null, (e: unknown) => e), 10_000);
  t.match(read, { code: 'rate_limited', retryAfterSeconds: null }, 'a date is not read as seconds');
});

t.test('an integer beyond 2^53 is refused before any request, the active policy\'s read included', async (t) => {
  const seen: string[] = [];
  const url = await server(t, (req, res) => {
    seen.push(`${req.method} ${req.url}`);
    res.writeHead(500).end();
  });
  const agent = new AgentClient({ url, ca, ...AGENT });
  t.teardown(() => agent.close());
  const { policy: _none, ...unpinned } = INTENT;
  await t.rejects(agent.submitIntent({ ...unpinned, action: { action: 'purchase.book', bindings: { n: 9007199254740993 as unknown as bigint } } }), { name: 'RangeError', message: /"n" is an integer beyond 2\^53/ });
  t.same(seen, [], 'nothing was sent');
});

t.test('a read-back that is not the transaction is never an outcome: the 503 is thrown, with the read\'s error as its cause', async (t) => {
  const url = await server(t, (req, res) => {
    if (req.method === 'POST') return void res.writeHead(503, { 'content-type': 'application/json' }).end('{"error":"commit_unavailable","message":"m"}');
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end('{"id":"pol_a"}');
  });
  const agent = new AgentClient({ url, ca, ...AGENT, commitRetries: 0 });
  t.teardown(() => agent.close());
  const err = await within(agent.submitIntent({ ...INTENT, transaction: 'txn_readback' }).then((r) => r, (e: unknown) => e), 10_000);
  t.type(err, CommitUnavailableError, `not an outcome, but the 503: whether it landed is still not known (${JSON.stringify(err)})`);
  t.type((err as Error).cause, UnexpectedResponseError, 'with the read\'s own error as its cause');
  t.match(((err as Error).cause as Error).message, /the read-back of txn_readback answered a body that is not that transaction/);
  t.equal((err as CommitUnavailableError).transaction, 'txn_readback');
});

t.test('a feed gone silent is reconnected after its own idle time-out, and says that time', async (t) => {
  const url = await server(t, (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/x-ndjson' });
    res.write('{"heartbeat":true,"next":0}\n'); // then silence
  });
  const admin = new AdminClient({ url, ca, token: 'x' });
  t.teardown(() => admin.close());
  const stop = new AbortController();
  const reasons: string[] = [];
  const done = (async () => {
    for await (const _ of admin.feed({ idleTimeoutMs: 300, signal: stop.signal, onReconnect: (r) => { reasons.push(r.reason); stop.abort(); } })) { /* none */ }
  })().catch(() => undefined);
  await within(done, 10_000);
  t.ok(reasons.length >= 1, 'it reconnected');
  t.notMatch(reasons[0] ?? '', /30000 ms/, `not the request time-out: ${reasons[0]}`);
  t.match(reasons[0] ?? '', /300 ms|silent for too long/);
});

t.test('a last page\'s null cursor has nothing after it: never sent as "null"', async (t) => {
  const seen: string[] = [];
  const url = await server(t, (req, res) => {
    seen.push(req.url!);
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end('{"parties":[{"id":"party_acme"}],"next":null}');
  });
  const admin = new AdminClient({ url, ca, token: 'x' });
  t.teardown(() => admin.close());
  const page = await admin.listParties({ limit: 50 });
  const rest: string[] = [];
  for await (const p of admin.allParties({ after: page.next })) rest.push(p.id);
  t.same(rest, [], 'nothing after the last page');
  await t.rejects(admin.listParties({ after: null }), RangeError);
  t.same(seen, ['/admin/v1/parties?limit=50'], 'no request with after=null');
});
