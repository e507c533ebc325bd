// Proves the agent plane over real HTTPS on one node: every route of the
// specification, every error of its table (and of DESIGN §9) that a single node can
// produce with its exact body, the usage law's messages, every verdict, the reads'
// scoping (a missing, unowned or foreign resource answers byte-identical 404s), and
// that a refusal before judgement (409, 422) leaves the ledger digest as it was while
// a judged refusal extends it. Every response is also checked against the committed
// OpenAPI document by the harness.
import t, { type Test } from 'tap';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { maxHeaderSize } from 'node:http';
import { Agent, request as httpsRequest } from 'node:https';
import { connect as netConnect } from 'node:net';
import { connect as tlsConnect } from 'node:tls';
import { gzipSync } from 'node:zlib';
import { PublicProtocol } from 'paseto';
import { ExportPublicKeyFactory, GenerateKeyPairFactory, SignFactory } from 'paseto/v4/public';
import { LINGER_MS, OPENAPI_FILES } from '@apl/node';
import { parseJson } from '@apl/core';
import {
  AGENT_A, AGENT_B, AGENT_UNBOUND, Client, EVIDENCE, Issuer, bootstrap, envelope, startTestNode, testCerts,
  type Response, type TestNode,
} from './support/node.js';

const INTENTS = '/api/v1/intents';
const JSON_TYPE = 'application/json; charset=utf-8';

let n: TestNode;
/** Agent A's everyday attestation, and agent B's. */
let att: string;
let attB: string;
let seq = 0;
const txn = (label: string) => `txn_ap_${label}_${++seq}`;

t.before(async () => {
  n = await startTestNode();
  await bootstrap(n);
  att = await n.issuer.sign(AGENT_A);
  attB = await n.issuer.sign(AGENT_B);
});
t.teardown(() => n.close());

const post = (body: unknown) => n.api('POST', INTENTS, { body });
const digest = async (): Promise<string> => (await n.adm('operator', 'GET', '/admin/v1/log/digest')).body.digest;
const balance = async (account: string) => (await n.adm('operator', 'GET', `/admin/v1/accounts/${account}`)).text;

/** Asserts an error answer: its status, JSON content type and exact body. */
function isError(t: Test, r: Response, status: number, body: Record<string, unknown>): void {
  t.equal(r.status, status, `answers ${status}`);
  t.equal(r.headers['content-type'], JSON_TYPE);
  t.strictSame(r.body, body);
}

/** Sends an intent that must be refused before judgement, and asserts the ledger did not move. */
async function refused(t: Test, env: Record<string, unknown>, status: number, body: Record<string, unknown>): Promise<Response> {
  const before = await digest();
  const cash = await balance('acc_acme_cash');
  const r = await post(env);
  isError(t, r, status, body);
  t.equal(await digest(), before, 'the ledger digest is unchanged');
  t.equal(await balance('acc_acme_cash'), cash, 'no leg was posted');
  if (typeof env.transaction === 'string' && env.transaction.startsWith('txn_')) {
    const read = await n.api('GET', `/api/v1/transactions/${env.transaction}`, { token: att });
    t.equal(read.status, 404, 'the transaction id stays free');
  }
  return r;
}

/** A malformed envelope: 400 with exactly these issues. */
const malformed = (t: Test, env: Record<string, unknown>, issues: { path: string; message: string }[]) =>
  refused(t, env, 400, { error: 'malformed_request', message: 'The intent envelope is not valid.', issues });

/** A token without `exp` (the harness's issuer always sets one), from a new key. */
async function nonExpiring(issuer: string, agent: string): Promise<{ paserk: string; token: string }> {
  const v4 = new PublicProtocol(GenerateKeyPairFactory, SignFactory, ExportPublicKeyFactory);
  const { publicKey, secretKey } = await v4.GenerateKeyPair();
  const claims = { iss: issuer, sub: agent, aud: 'agent-plane-ledger', jti: randomBytes(6).toString('hex'), cap: ['purchase.*'] };
  return { paserk: await v4.ExportPublicKey(publicKey), token: await v4.Sign(secretKey, claims, { nonExpiring: true }) };
}

/** An envelope that moves no money: only usage moves, under the R-usage permission. */
function usageEnvelope(moves: Record<string, unknown>, over: Record<string, unknown> = {}): Record<string, unknown> {
  return envelope(att, { transaction: txn('usage'), entries: [], action: { action: 'usage.record', bindings: {} }, ...moves, ...over });
}
const move = (usage: string, minor: bigint | number, currency = 'USD') => ({ usage, amount: { minor, currency } });

t.test('a permitted intent posts its legs, and the transaction and account reads show it', async (t) => {
  const id = txn('permitted');
  const before = await digest();
  const r = await post(envelope(att, { transaction: id, minor: 2500 }));
  t.equal(r.status, 200);
  t.equal(r.headers['content-type'], JSON_TYPE);
  t.match(r.body, { transaction: id, verdict: 'Permitted', posted: true, policy: 'pol_1', provenance: { winning_rule: 'R-purchase' } });
  t.notOk('basis' in r.body.provenance, 'a permission carries no refusal basis');
  t.not(await digest(), before, 'a posting extends the chain');

  const read = await n.api('GET', `/api/v1/transactions/${id}`, { token: att });
  t.equal(read.status, 200);
  t.match(read.body, {
    transaction: id, verdict: 'Permitted', agent: AGENT_A, party: 'party_acme', evidence: [EVIDENCE],
    action: { action: 'purchase.book', bindings: { merchant: 'books-r-us' } },
    entries: [{ account: 'acc_acme_cash', side: 'Debit', amount: { minor: 2500, currency: 'USD' } }, { account: 'acc_merchant_books', side: 'Credit' }],
  });
  t.equal(read.body.provenance.entry_hash, r.body.provenance.entry_hash);

  const acc = await n.api('GET', '/api/v1/accounts/acc_acme_cash/balance', { token: att });
  t.equal(acc.status, 200);
  t.equal(acc.body.account, 'acc_acme_cash');
  t.equal(acc.body.party, 'party_acme');
  t.match(acc.body.balances, [{ currency: 'USD' }]);
  const usd = acc.body.balances[0];
  t.equal(BigInt(usd.net), BigInt(usd.debits) - BigInt(usd.credits), 'net is debits minus credits');
});

t.test('400 malformed_request: a body that is not JSON, or not sent as JSON', async (t) => {
  const before = await digest();
  const notJson = await n.api('POST', INTENTS, { raw: '{"agent": ' });
  t.equal(notJson.status, 400);
  t.strictSame(Object.keys(notJson.body), ['error', 'message']);
  t.equal(notJson.body.error, 'malformed_request');
  t.match(notJson.body.message, /^The body is not valid JSON: .+\.$/);

  const text = await n.api('POST', INTENTS, { raw: JSON.stringify(envelope(att)), headers: { 'content-type': 'text/plain' } });
  isError(t, text, 400, { error: 'malformed_request', message: 'The body must be JSON (Content-Type: application/json).' });
  const form = await n.api('POST', INTENTS, { raw: 'agent=x', headers: { 'content-type': 'application/x-www-form-urlencoded' } });
  isError(t, form, 400, { error: 'malformed_request', message: 'The body must be JSON (Content-Type: application/json).' });

  // A compressed body is read as its Content-Encoding says; one that does not decode,
  // or a coding the node does not read, says which.
  const zipped = await n.api('POST', INTENTS, { raw: gzipSync(JSON.stringify(envelope(att, { transaction: 'txn_ap_gzip', minor: 3 }))), headers: { 'content-encoding': 'gzip' } });
  t.equal(zipped.status, 200, 'gzip is read');
  const notZipped = await n.api('POST', INTENTS, { raw: JSON.stringify(envelope(att)), headers: { 'content-encoding': 'gzip' } });
  t.equal(notZipped.status, 400);
  t.match(notZipped.body, { error: 'malformed_request', message: /^The body does not decode as its Content-Encoding \([a-z]+\) says: .+\.$/ });
  for (const coding of ['deflate', 'br', 'zstd']) {
    const bad = await n.api('POST', INTENTS, { raw: JSON.stringify(envelope(att)), headers: { 'content-encoding': coding } });
    t.match(bad.body, { error: 'malformed_request', message: /^The body does not decode as its Content-Encoding \([a-z]+\) says: .+\.$/ }, coding);
  }
  const compress = await n.api('POST', INTENTS, { raw: JSON.stringify(envelope(att)), headers: { 'content-encoding': 'compress' } });
  isError(t, compress, 400, { error: 'malformed_request', message: 'The body is sent with Content-Encoding: compress, which this node does not read; send the JSON as it is (identity).' });

  const empty = await n.api('POST', INTENTS, {});
  isError(t, empty, 400, { error: 'malformed_request', message: 'The intent envelope is required.', issues: [{ path: '', message: 'is required' }] });
  const array = await n.api('POST', INTENTS, { raw: '[]' });
  isError(t, array, 400, { error: 'malformed_request', message: 'The intent envelope is not valid.', issues: [{ path: '', message: 'must be an object' }] });
  const dup = await n.api('POST', INTENTS, { raw: '{"agent":"a","agent":"b"}' });
  t.equal(dup.status, 400, 'a duplicate key is a syntax error, not a silent choice');

  // Text that is not UTF-8 would be decoded with U+FFFD in place of its bytes: the
  // justification recorded, and its hash, would not be what the agent sent.
  const good = Buffer.from(JSON.stringify(envelope(att, { transaction: 'txn_ap_not_utf8', justification: 'Buy XXing supplies' })));
  const at = good.indexOf('XX');
  good[at] = 0xff;
  good[at + 1] = 0xfe;
  isError(t, await n.api('POST', INTENTS, { raw: good }), 400, { error: 'malformed_request', message: 'The body is not valid UTF-8.' });
  const bom = Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from(JSON.stringify(envelope(att, { transaction: 'txn_ap_bom' })))]);
  isError(t, await n.api('POST', INTENTS, { raw: bom }), 400, { error: 'malformed_request', message: 'The body begins with a byte-order mark (U+FEFF), which JSON text does not have: send it without one.' });
  for (const charset of ['iso-8859-1', 'utf-16']) {
    const other = await n.api('POST', INTENTS, { raw: JSON.stringify(envelope(att, { transaction: 'txn_ap_charset' })), headers: { 'content-type': `application/json; charset=${charset}` } });
    isError(t, other, 400, { error: 'malformed_request', message: `The body must be JSON in UTF-8, not ${charset} (Content-Type: application/json; charset=utf-8).` });
  }
  // The same through a JSON escape: a lone surrogate has no UTF-8 form, and would be
  // hashed as U+FFFD (\ud800, \udc00 and \ufffd had one justification_hash).
  for (const escape of ['\\ud800', '\\udc00', 'a\\udbff\\udbffb']) {
    const lone = JSON.stringify(envelope(att, { transaction: 'txn_ap_lone_surrogate', justification: 'JUSTIFY' })).replace('JUSTIFY', escape);
    isError(t, await n.api('POST', INTENTS, { raw: lone }), 400, {
      error: 'malformed_request',
      message: 'The intent envelope is not valid.',
      issues: [{ path: 'justification', message: 'must be Unicode text: a lone surrogate (an escape such as \\ud800 without its pair) has no UTF-8 form to hash' }],
    });
  }
  // And in a binding, where the chain would hold it: text is Unicode everywhere.
  const loneBinding = JSON.stringify(envelope(att, { transaction: 'txn_ap_lone_binding' })).replace('books-r-us', '\\ud800');
  isError(t, await n.api('POST', INTENTS, { raw: loneBinding }), 400, {
    error: 'malformed_request',
    message: 'The intent envelope is not valid.',
    issues: [{ path: 'action.bindings.merchant', message: 'must be Unicode text, which a lone surrogate (an escape such as \\ud800 without its pair) is not' }],
  });
  // A binding named by one: the issue names it by its escape, so that the answer is Unicode text too.
  const loneName = JSON.stringify(envelope(att, { transaction: 'txn_ap_lone_name' })).replace('"merchant":', '"\\ud800":');
  const named = await n.api('POST', INTENTS, { raw: loneName });
  t.equal(named.status, 400);
  const namedPaths = (JSON.parse(named.text) as { issues: { path: string }[] }).issues.map((i) => i.path);
  t.ok(namedPaths.length > 0 && namedPaths.every((p) => !/[\uD800-\uDFFF]/.test(p)), `every path is Unicode text: ${JSON.stringify(namedPaths)}`);
  t.ok(namedPaths.includes('action.bindings.\\ud800'), 'the name written as its escape');
  const paired = JSON.stringify(envelope(att, { transaction: 'txn_ap_surrogate_pair', minor: 10, justification: 'JUSTIFY' })).replace('JUSTIFY', '\\ud83d\\ude00');
  t.equal((await n.api('POST', INTENTS, { raw: paired })).status, 200, 'an escaped pair is one character, and hashes as its UTF-8');
  const utf8 = await n.api('POST', INTENTS, { raw: JSON.stringify(envelope(att, { transaction: 'txn_ap_charset_utf8', minor: 10 })), headers: { 'content-type': 'application/json; charset=UTF-8' } });
  t.equal(utf8.status, 200, 'charset=UTF-8 is JSON as it should be');
  const afterUtf8 = await digest();

  // A fraction a double rounds away would post 1 for 1.0000000000000000001.
  const inexact = JSON.stringify(envelope(att, { transaction: 'txn_ap_inexact', minor: 7 })).replaceAll('"minor":7', '"minor":1.0000000000000000001');
  isError(t, await n.api('POST', INTENTS, { raw: inexact }), 400, {
    error: 'malformed_request',
    message: 'The body holds a number the ledger cannot read exactly: the number 1.0000000000000000001 ("minor") is not an integer, though a double rounds it to 1; write numbers as exact integers.',
  });
  t.equal(await digest(), afterUtf8, 'nothing else was written');
  t.not(afterUtf8, before, 'the one good intent was');
});

t.test('400 malformed_request: schema failures list each problem with its dotted path', async (t) => {
  const legs = (minor: unknown) => [
    { account: 'acc_acme_cash', side: 'Debit', amount: { minor, currency: 'USD' } },
    { account: 'acc_merchant_books', side: 'Credit', amount: { minor: 129900, currency: 'USD' } },
  ];
  await malformed(t, envelope(att, { entries: legs(-5) }), [{ path: 'entries.0.amount.minor', message: 'must be a positive integer below 2^127' }]);
  await malformed(t, envelope(att, { entries: legs(0) }), [{ path: 'entries.0.amount.minor', message: 'must be a positive integer below 2^127' }]);
  await malformed(t, envelope(att, { entries: legs(12.5) }), [{ path: 'entries.0.amount.minor', message: 'must be a positive integer below 2^127, written as an exact integer' }]);
  await malformed(t, envelope(att, { entries: legs('129900') }), [{ path: 'entries.0.amount.minor', message: 'must be a positive integer below 2^127' }]);
  await malformed(t, envelope(att, { entries: legs(1n << 127n) }), [{ path: 'entries.0.amount.minor', message: 'must be a positive integer below 2^127' }]);
  await malformed(t, envelope(att, { entries: [{ account: 'cash', side: 'Left', amount: { minor: 1, currency: 'usd' } }] }), [
    { path: 'entries.0.account', message: 'must be an account id (acc_<id>; a letter or digit, then letters, digits and _ . : -, 128 characters at most)' },
    { path: 'entries.0.side', message: 'must be Debit or Credit' },
    { path: 'entries.0.amount.currency', message: 'must be a currency code (e.g. USD)' },
  ]);

  const missing = envelope(att);
  delete missing.transaction;
  delete missing.evidence;
  await malformed(t, { ...missing, extra: 1 }, [
    { path: 'transaction', message: 'is required' },
    { path: 'evidence', message: 'is required' },
    { path: '', message: 'unknown field "extra"' },
  ]);
  await malformed(t, envelope(att, { transaction: 'tx-1' }), [{ path: 'transaction', message: 'must be a transaction id (txn_<id>; a letter or digit, then letters, digits and _ . : -, 128 characters at most)' }]);
  await malformed(t, envelope(att, { agent: 42 }), [{ path: 'agent', message: 'must be a string' }]);
  await malformed(t, envelope(att, { action: { action: 'Purchase Book', bindings: { merchant: 1.5 } } }), [
    { path: 'action.action', message: 'must be an action name (dotted lowercase words, e.g. purchase.book)' },
    { path: 'action.bindings.merchant', message: 'must be a string (at most 256 characters), an integer or a boolean' },
  ]);
  // An integer binding of a new intent is held to 128 bits, signed, as the contract's int128 says.
  await malformed(t, envelope(att, { action: { action: 'purchase.book', bindings: { merchant: 'books-r-us', quantity: 1n << 127n } } }), [
    { path: 'action.bindings.quantity', message: 'must be an integer from -2^127 to 2^127-1' },
  ]);
  // Beyond 2^53 with an exponent or a fraction it reads as a double: not exact, and said so, as for an amount.
  for (const written of ['1e20', '9007199254740993.0']) {
    const raw = JSON.stringify(envelope(att)).replace('"bindings":{', `"bindings":{"quantity":${written},`);
    isError(t, await n.api('POST', INTENTS, { raw }), 400, { error: 'malformed_request', message: 'The intent envelope is not valid.', issues: [
      { path: 'action.bindings.quantity', message: 'must be an integer from -2^127 to 2^127-1, written as an exact integer' },
    ] });
  }
  const widest = await post(envelope(att, { transaction: 'txn_ap_binding_wide', minor: 5, action: { action: 'purchase.book', bindings: { merchant: 'books-r-us', quantity: -(1n << 127n) } } }));
  t.equal(widest.status, 200, 'the widest negative binding is taken');
  const badKey = await post(envelope(att, { action: { action: 'purchase.book', bindings: { Merchant: 'x' } } }));
  t.equal(badKey.status, 400);
  t.strictSame(badKey.body.issues.map((i: { path: string }) => i.path), ['action.bindings.Merchant'], 'a bad binding name is named by its path');
});

t.test('400 malformed_request: a usage move sent as null, and usage deltas out of range', async (t) => {
  await malformed(t, usageEnvelope({ consume_usage: null }), [{ path: 'consume_usage', message: 'must be an object' }]);
  await malformed(t, usageEnvelope({ meter_usage: move('usage_acme_llm', -(1n << 127n) - 1n) }), [
    { path: 'meter_usage.amount.minor', message: 'must be an integer from -2^127 to 2^127-1' },
  ]);
  await malformed(t, usageEnvelope({ bill_usage: move('acc_acme_cash', 1) }), [{ path: 'bill_usage.usage', message: 'must be a usage-balance id (usage_<id>; a letter or digit, then letters, digits and _ . : -, 128 characters at most)' }]);
});

t.test('400 malformed_request: evidence must be lowercase-hex SHA-256 digests', async (t) => {
  await malformed(t, envelope(att, { evidence: [EVIDENCE.toUpperCase()] }), [{ path: 'evidence.0', message: 'must be a lowercase-hex SHA-256 digest' }]);
  await malformed(t, envelope(att, { evidence: [EVIDENCE, EVIDENCE.slice(1), 7] }), [
    { path: 'evidence.1', message: 'must be a lowercase-hex SHA-256 digest' },
    { path: 'evidence.2', message: 'must be a SHA-256 digest' },
  ]);
  await malformed(t, envelope(att, { evidence: Array.from({ length: 65 }, () => EVIDENCE) }), [{ path: 'evidence', message: 'at most 64 evidence digests per intent' }]);
});

t.test('400 malformed_request: more entries than the configured limit', async (t) => {
  const limit = n.config.limits.entries_per_intent_max;
  t.equal(limit, 64, 'the default limit');
  const legs = (count: number) => Array.from({ length: count }, (_, i) => ({
    account: i % 2 === 0 ? 'acc_acme_cash' : 'acc_merchant_books', side: i % 2 === 0 ? 'Debit' : 'Credit', amount: { minor: 1, currency: 'USD' },
  }));
  await malformed(t, envelope(att, { entries: legs(limit + 2) }), [{ path: 'entries', message: `at most ${limit} entries per intent` }]);
  const atLimit = await post(envelope(att, { transaction: txn('limit'), entries: legs(limit) }));
  t.equal(atLimit.status, 200, 'exactly the limit is accepted');
  t.equal(atLimit.body.verdict, 'Permitted');
});

t.test('413 payload_too_large: a body over the configured limit, and nothing is written', async (t) => {
  const before = await digest();
  const env = envelope(att, { justification: 'x'.repeat(n.config.limits.body_bytes_max) });
  const r = await post(env);
  isError(t, r, 413, { error: 'payload_too_large', message: `The body is larger than the ${n.config.limits.body_bytes_max} bytes this node accepts (limits.body_bytes_max).` });
  t.equal(await digest(), before);
});

t.test('413 payload_too_large at once for a body declared over the limit, before it is sent; the connection is closed', async (t) => {
  const before = await digest();
  const host = new URL(n.node.agentUrl).host;
  const declared = n.config.limits.body_bytes_max * 100;
  // Only the start of the body is sent: the answer must not wait for the rest (nor for the request timeout's 408).
  const answer = await rawExchange(n.node.agentUrl, `POST ${INTENTS} HTTP/1.1\r\nHost: ${host}\r\nContent-Type: application/json\r\nContent-Length: ${declared}\r\n\r\n{"agent":`);
  t.match(answer, /^HTTP\/1\.1 413 Payload Too Large\r\n/);
  t.match(answer, /\r\nconnection: close\r\n/i);
  t.same(JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4)), { error: 'payload_too_large', message: `The body is larger than the ${n.config.limits.body_bytes_max} bytes this node accepts (limits.body_bytes_max).` });
  t.equal(await digest(), before);
});

t.test('a client that sends the whole of a body over the limit reads the 413, never a reset', async (t) => {
  const before = await digest();
  // The answer goes out before the body is read. Closing at once would answer the body
  // still arriving with a reset, which a client can see as a broken pipe before it has
  // read the 413: one try in seven did, before the connection lingered.
  const agent = new Agent({ ca: readFileSync(testCerts().ca), keepAlive: true, maxSockets: 1 });
  t.teardown(() => agent.destroy());
  const body = JSON.stringify(envelope(att, { transaction: txn('large'), justification: 'x'.repeat(32 * n.config.limits.body_bytes_max) }));
  const u = new URL(n.node.agentUrl);
  const outcomes: Record<string, number> = {};
  for (let i = 0; i < 150; i++) {
    const outcome = await new Promise<string>((resolve) => {
      const req = httpsRequest({ host: u.hostname, port: Number(u.port), method: 'POST', path: INTENTS, agent, headers: { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(body)) } }, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve(`${res.statusCode} ${String(res.headers.connection)} ${JSON.parse(Buffer.concat(chunks).toString('utf8')).error}`));
        res.on('error', (err) => resolve(`response: ${err.message}`));
      });
      req.on('error', (err) => resolve(`request: ${err.message}`));
      req.end(body);
    });
    outcomes[outcome] = (outcomes[outcome] ?? 0) + 1;
  }
  t.same(outcomes, { '413 close payload_too_large': 150 });
  t.equal(await digest(), before, 'nothing is written');
});

t.test('the connection of an early 413 reads what the client still sends, and is cut LINGER_MS after the answer', async (t) => {
  const host = new URL(n.node.agentUrl).host;
  const u = new URL(n.node.agentUrl);
  const declared = n.config.limits.body_bytes_max * 100;
  // A client that keeps its side open when the node ends the connection (the TLS socket
  // takes that from the TCP one it runs on).
  const tcp = netConnect({ host: u.hostname, port: Number(u.port), allowHalfOpen: true });
  const socket = tlsConnect({ socket: tcp, ca: readFileSync(testCerts().ca), servername: 'localhost' });
  t.teardown(() => socket.destroy());
  const errors: string[] = [];
  socket.on('error', (err) => errors.push(err.message));
  const chunks: Buffer[] = [];
  socket.on('data', (c: Buffer) => chunks.push(c));
  await new Promise((resolve) => socket.once('secureConnect', resolve));
  socket.write(`POST ${INTENTS} HTTP/1.1\r\nHost: ${host}\r\nContent-Type: application/json\r\nContent-Length: ${declared}\r\n\r\n{"agent":`);
  await new Promise((resolve) => socket.once('end', resolve));
  const answered = Date.now();
  const answer = Buffer.concat(chunks).toString('utf8');
  t.match(answer, /^HTTP\/1\.1 413 Payload Too Large\r\n/, 'the answer, then the end of the connection');
  t.match(answer, /\r\nconnection: close\r\n/i);
  // The client has not read the answer yet and goes on sending: the node reads it, no reset.
  for (let i = 0; i < 8; i++) {
    socket.write('x'.repeat(64 * 1024));
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  t.same(errors, [], 'the body sent after the answer is read, not refused with a reset');
  // Past LINGER_MS the node has let the connection go: what the client sends then is refused.
  await new Promise((resolve) => setTimeout(resolve, Math.max(0, answered + LINGER_MS + 500 - Date.now())));
  const closed = socket.closed ? Promise.resolve() : new Promise((resolve) => socket.once('close', resolve));
  let sent = 0;
  for (; sent < 200 && errors.length === 0 && !socket.destroyed; sent++) {
    socket.write('x'.repeat(1024));
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  t.ok(errors.length > 0 || socket.destroyed, `the connection is cut once LINGER_MS has passed (${errors.join('; ') || 'closed'}, after ${sent} more writes)`);
  await closed;
});

t.test('400 malformed_request: a number beyond any double is refused by name, not crashed on', async (t) => {
  const raw = JSON.stringify(envelope(att)).replace('"bindings":{', '"bindings":{"weight":1e400,');
  const r = await n.api('POST', INTENTS, { raw });
  isError(t, r, 400, { error: 'malformed_request', message: 'The body holds a number too large to represent.', issues: [{ path: 'action.bindings.weight', message: 'is too large to represent' }] });
});

t.test('401 unknown_agent: no attestation, or an agent bound to no party', async (t) => {
  const none = envelope(att);
  delete none.attestation;
  await refused(t, none, 401, { error: 'unknown_agent', message: 'No attestation was presented.' });
  await refused(t, envelope(att, { attestation: '' }), 401, { error: 'unknown_agent', message: 'No attestation was presented.' });
  const stranger = await n.issuer.sign(AGENT_UNBOUND);
  await refused(t, envelope(stranger, { agent: AGENT_UNBOUND }), 401, { error: 'unknown_agent', message: `The agent ${AGENT_UNBOUND} is not bound to a party.` });
});

t.test('401 unknown_agent on reads: no Authorization header, another scheme, or an unbound agent', async (t) => {
  const paths = ['/api/v1/usages/usage_acme_llm', '/api/v1/transactions/txn_x', '/api/v1/accounts/acc_acme_cash/balance', '/api/v1/obligations', '/api/v1/policies/active'];
  const stranger = await n.issuer.sign(AGENT_UNBOUND);
  for (const path of paths) {
    isError(t, await n.api('GET', path), 401, { error: 'unknown_agent', message: 'No attestation was presented (Authorization: Bearer <attestation>).' });
    const unread = (why: string) => ({ error: 'unknown_agent', message: `No attestation was read: ${why} (Authorization: Bearer <attestation>).` });
    isError(t, await n.api('GET', path, { headers: { authorization: `Basic ${att}` } }), 401, unread("the Authorization header's scheme is not Bearer"));
    isError(t, await n.api('GET', path, { headers: { authorization: att } }), 401, unread("the Authorization header's scheme is not Bearer"));
    isError(t, await n.api('GET', path, { headers: { authorization: `Bearer ${att} extra` } }), 401, unread('the Authorization header has more than one word after Bearer'));
    isError(t, await n.api('GET', path, { headers: { authorization: 'Bearer' } }), 401, unread('the Authorization header has no token after Bearer'));
  }
  const challenged = await n.api('GET', paths[0]!);
  t.equal(challenged.headers['www-authenticate'], 'Bearer', 'a 401 names the scheme that authenticates');
  for (const path of paths.slice(0, 4)) {
    isError(t, await n.api('GET', path, { token: stranger }), 401, { error: 'unknown_agent', message: `The agent ${AGENT_UNBOUND} is not bound to a party.` });
  }
});

t.test('403 attestation: signature, expiry, a lifetime too long, audience, issuer, subject, and a missing exp', async (t) => {
  const rejected = (why: string) => ({ error: 'attestation', message: `The attestation was rejected: ${why}.` });
  // Flip one character inside the signature (the last 64 bytes of the body).
  const parts = att.split('.');
  const body = parts[2]!;
  const k = body.length - 20;
  const forged = [...parts.slice(0, 2), body.slice(0, k) + (body[k] === 'A' ? 'B' : 'A') + body.slice(k + 1)].join('.');
  await refused(t, envelope(forged), 403, rejected('its signature or form does not verify'));
  const impostor = await Issuer.create(n.issuer.name);
  await refused(t, envelope(await impostor.sign(AGENT_A)), 403, rejected('its signature or form does not verify'));
  await refused(t, envelope('not-a-token'), 403, rejected('it is not a v4.public token'));
  // As long as the body limit lets it be: the same 403 as a read with it gets, not a 400 of the envelope's shape.
  const long = `v4.public.${'A'.repeat(9000)}`;
  await refused(t, envelope(long), 403, rejected('it is longer than 8192 characters'));
  isError(t, await n.api('GET', '/api/v1/policies/active', { token: long }), 403, rejected('it is longer than 8192 characters'));

  const expired = await n.issuer.sign(AGENT_A, { exp: new Date(Date.now() - 60_000).toISOString() });
  await refused(t, envelope(expired), 403, rejected('it has expired'));
  await refused(t, envelope(await n.issuer.sign(AGENT_A, { exp: new Date(Date.now() + 2 * 86_400_000).toISOString() })), 403,
    rejected('its exp is more than 86400 seconds ahead, the longest lifetime this node accepts (attestation_lifetime_max_s)'));
  await refused(t, envelope(await n.issuer.sign(AGENT_A, { aud: 'another-ledger' })), 403, rejected('it is for another audience'));
  await refused(t, envelope(await n.issuer.sign(AGENT_A, { aud: undefined })), 403, rejected('it has no aud claim'));
  const rogue = await Issuer.create('rogue-agents');
  await refused(t, envelope(await rogue.sign(AGENT_A)), 403, rejected('its issuer is not a trust root'));
  await refused(t, envelope(attB), 403, rejected('its subject is not this agent'));
  const perpetual = await nonExpiring('perpetual-agents', AGENT_A);
  t.equal((await n.adm('operator', 'POST', '/admin/v1/trust-roots', { issuer: 'perpetual-agents', public_key: perpetual.paserk })).status, 201);
  await refused(t, envelope(perpetual.token), 403, rejected('it has no exp claim'));
  await refused(t, envelope(await n.issuer.sign(AGENT_A, { cap: ['purchase.*', `a${'.b'.repeat(80)}`] })), 403,
    rejected('its cap claim is not a list of at most 64 capabilities (action patterns of at most 128 characters)'));
  const ready = await n.api('GET', '/readyz');
  t.equal(ready.status, 200, 'an attestation the log could not record never reaches the log');
});

t.test('403 attestation on reads: the same rejections as the writing route', async (t) => {
  const expired = await n.issuer.sign(AGENT_A, { exp: new Date(Date.now() - 1000).toISOString() });
  const rogue = await (await Issuer.create('rogue-agents')).sign(AGENT_A);
  for (const [token, why] of [[expired, 'it has expired'], [rogue, 'its issuer is not a trust root'], ['v4.public.AAAA', 'it is too short to hold claims and a signature']] as const) {
    const r = await n.api('GET', '/api/v1/usages/usage_acme_llm', { token });
    isError(t, r, 403, { error: 'attestation', message: `The attestation was rejected: ${why}.` });
  }
});

t.test('403 attestation: removing a trust root refuses its attestations at once, cached or not', async (t) => {
  const temp = await Issuer.create('temp-agents');
  t.equal((await n.adm('operator', 'POST', '/admin/v1/trust-roots', { issuer: temp.name, public_key: temp.paserk })).status, 201);
  const token = await temp.sign(AGENT_A);
  const ok = await post(envelope(token, { transaction: txn('temp'), minor: 100 }));
  t.equal(ok.body.verdict, 'Permitted', 'the attestation is verified (and now cached)');
  t.equal((await n.api('GET', '/api/v1/usages/usage_acme_llm', { token })).status, 200);
  t.equal((await n.adm('operator', 'DELETE', `/admin/v1/trust-roots/${temp.name}`)).status, 200);
  await refused(t, envelope(token, { minor: 100 }), 403, { error: 'attestation', message: 'The attestation was rejected: its issuer is not a trust root.' });
  isError(t, await n.api('GET', '/api/v1/usages/usage_acme_llm', { token }), 403, { error: 'attestation', message: 'The attestation was rejected: its issuer is not a trust root.' });
});

t.test('a cached attestation is refused once its exp has passed', async (t) => {
  const token = await n.issuer.sign(AGENT_A, { exp: new Date(Date.now() + 1500).toISOString() });
  t.equal((await post(envelope(token, { transaction: txn('short'), minor: 100 }))).body.verdict, 'Permitted');
  await new Promise((r) => setTimeout(r, 1600));
  await refused(t, envelope(token, { minor: 100 }), 403, { error: 'attestation', message: 'The attestation was rejected: it has expired.' });
});

t.test('422 invalid_agent_uri: a malformed agent URI', async (t) => {
  for (const agent of ['buyer-7', 'agent://acme.example/buyer-7', 'https://acme.example/agent/buyer-7', 'agent://acme.example/agent/']) {
    await refused(t, envelope(att, { agent }), 422, { error: 'invalid_agent_uri', message: `${JSON.stringify(agent)} is not an agent URI (agent://<authority>/agent/<agent_id>).` });
  }
});

t.test('422 capability_mapping: an action no granted capability covers', async (t) => {
  const usageOnly = await n.issuer.sign(AGENT_A, { cap: ['usage.record'] });
  await refused(t, envelope(usageOnly), 422, { error: 'capability_mapping', message: 'The attestation grants no capability for action purchase.book.' });
  const none = await n.issuer.sign(AGENT_A, { cap: [] });
  await refused(t, envelope(none, { action: { action: 'usage.record', bindings: {} } }), 422, { error: 'capability_mapping', message: 'The attestation grants no capability for action usage.record.' });
  const prefix = await n.issuer.sign(AGENT_A, { cap: ['purchase.book.*'] });
  await refused(t, envelope(prefix), 422, { error: 'capability_mapping', message: 'The attestation grants no capability for action purchase.book.' });
});

t.test('422 multi_currency_mandate_charge: a mandate charge with legs in two currencies', async (t) => {
  const mandate = await n.issuer.sign(AGENT_A, { cap: ['mandate.*'] });
  const leg = (account: string, side: string, currency: string) => ({ account, side, amount: { minor: 500, currency } });
  await refused(t, envelope(mandate, {
    action: { action: 'mandate.charge', bindings: {} },
    entries: [leg('acc_acme_cash', 'Debit', 'USD'), leg('acc_merchant_books', 'Credit', 'USD'), leg('acc_acme_cash', 'Debit', 'EUR'), leg('acc_merchant_books', 'Credit', 'EUR')],
  }), 422, { error: 'multi_currency_mandate_charge', message: 'A mandate charge moves one currency; this intent has legs in EUR and USD.' });
});

t.test('422 substrate_rejected: unbalanced legs and accounts the agent may not post to', async (t) => {
  const sub = (message: string) => ({ error: 'substrate_rejected', message, kind: 'validation' });
  await refused(t, envelope(att, { entries: [
    { account: 'acc_acme_cash', side: 'Debit', amount: { minor: 100, currency: 'USD' } },
    { account: 'acc_merchant_books', side: 'Credit', amount: { minor: 90, currency: 'USD' } },
  ] }), 422, sub('Debits and credits do not balance in USD: 100 debited, 90 credited.'));
  const into = (account: string) => envelope(att, { entries: [
    { account: 'acc_acme_cash', side: 'Debit', amount: { minor: 100, currency: 'USD' } },
    { account, side: 'Credit', amount: { minor: 100, currency: 'USD' } },
  ] });
  await refused(t, into('acc_globex_cash'), 422, sub('Account acc_globex_cash cannot be posted to by this agent.'));
  await refused(t, into('acc_never_opened'), 422, sub('Account acc_never_opened cannot be posted to by this agent.'));
});

t.test('422 substrate_rejected: the usage chain, with the exact messages of the specification', async (t) => {
  const sub = (message: string) => ({ error: 'substrate_rejected', message, kind: 'validation' });
  const u = 'usage_acme_meter';
  t.equal((await n.adm('operator', 'POST', '/admin/v1/usages', { id: u, currency: 'USD', owner: 'party_acme' })).status, 201);
  const consumed = await post(usageEnvelope({ consume_usage: move(u, 1500) }));
  t.equal(consumed.body.verdict, 'Permitted');

  // The whole intent is refused, journal legs included.
  await refused(t, usageEnvelope({ meter_usage: move(u, 2000) }, {
    entries: [
      { account: 'acc_acme_cash', side: 'Debit', amount: { minor: 7, currency: 'USD' } },
      { account: 'acc_merchant_books', side: 'Credit', amount: { minor: 7, currency: 'USD' } },
    ],
  }), 422, sub('Metering 2000 would bring the metered total to 2000, above the 1500 consumed; 0 is already metered and 1500 is consumed but not yet metered.'));
  t.equal((await post(usageEnvelope({ meter_usage: move(u, 1000) }))).body.verdict, 'Permitted');
  await refused(t, usageEnvelope({ bill_usage: move(u, 1200) }), 422,
    sub('Billing 1200 would bring the billed total to 1200, above the 1000 metered; 0 is already billed and 1000 is metered but not yet billed.'));
  await refused(t, usageEnvelope({ consume_usage: move(u, 5, 'EUR') }), 422, sub(`The consume move is in EUR but usage balance ${u} is kept in USD.`));
  await refused(t, usageEnvelope({ bill_usage: move(u, -1) }), 422, sub('Billing -1 would bring the billed total to -1, below zero; 0 is billed.'));

  // Ownership is checked before currency: a non-owner learns nothing, not even the currency.
  for (const other of ['usage_globex_llm', 'usage_unowned', 'usage_never_opened']) {
    await refused(t, usageEnvelope({ consume_usage: move(other, 5, 'EUR') }), 422, sub(`Usage balance ${other} cannot be moved by this agent.`));
  }

  const report = await n.api('GET', `/api/v1/usages/${u}`, { token: att });
  t.strictSame(report.body, {
    usage: u, currency: 'USD', consumed: 1500, metered: 1000, billed: 0, unmetered: 500, unbilled: 1000, reconciled: false,
    text: `Usage balance ${u} (USD): 1500 consumed, 1000 metered, 0 billed. 500 consumed but not yet metered; 1000 metered but not yet billed. Not reconciled.`,
  }, 'the refusals changed nothing');
});

t.test('usage moves of one intent are judged together; a lawful correction is admitted', async (t) => {
  const u = 'usage_acme_chain';
  await n.adm('operator', 'POST', '/admin/v1/usages', { id: u, currency: 'USD', owner: 'party_acme' });
  const all = await post(usageEnvelope({ consume_usage: move(u, 18446744073709551621n), meter_usage: move(u, 18446744073709551621n), bill_usage: move(u, 18446744073709551621n) }));
  t.equal(all.body.verdict, 'Permitted', 'consume, meter and bill of one amount in one intent');
  const fix = await post(usageEnvelope({ consume_usage: move(u, -21), meter_usage: move(u, -21), bill_usage: move(u, -21) }));
  t.equal(fix.body.verdict, 'Permitted', 'a negative delta that keeps the chain');
  const r = await n.api('GET', `/api/v1/usages/${u}`, { token: att });
  t.equal(r.body.consumed, 18446744073709551600n);
  t.equal(r.body.reconciled, true);
  t.equal(r.body.text, `Usage balance ${u} (USD): 18446744073709551600 consumed, 18446744073709551600 metered, 18446744073709551600 billed. Everything consumed is metered and billed. Reconciled.`);
});

t.test('format=text answers the narration alone as text/plain', async (t) => {
  const json = await n.api('GET', '/api/v1/usages/usage_acme_meter?format=json', { token: att });
  const text = await n.api('GET', '/api/v1/usages/usage_acme_meter?format=text', { token: att });
  t.equal(text.status, 200);
  t.equal(text.headers['content-type'], 'text/plain; charset=utf-8');
  t.equal(text.text, json.body.text);
  const bad = await n.api('GET', '/api/v1/usages/usage_acme_meter?format=xml', { token: att });
  isError(t, bad, 400, { error: 'malformed_request', message: 'The query is not valid.', issues: [{ path: 'format', message: 'must be json or text' }] });
});

t.test('reads are linearizable by default; consistency=local says so in the Consistency header', async (t) => {
  for (const path of ['/api/v1/usages/usage_acme_meter', '/api/v1/accounts/acc_acme_cash/balance', '/api/v1/obligations', '/api/v1/policies/active']) {
    const lin = await n.api('GET', path, { token: att });
    t.equal(lin.status, 200);
    t.equal(lin.headers.consistency, 'linearizable', `${path} reads linearizably`);
    const local = await n.api('GET', `${path}?consistency=local`, { token: att });
    t.equal(local.status, 200);
    t.equal(local.headers.consistency, 'local');
    t.equal(local.text, lin.text, 'one node: the same answer');
  }
  const bad = await n.api('GET', '/api/v1/obligations?consistency=eventual', { token: att });
  isError(t, bad, 400, { error: 'malformed_request', message: 'The query is not valid.', issues: [{ path: 'consistency', message: 'must be linearizable or local' }] });
  const extra = await n.api('GET', '/api/v1/obligations?page=2', { token: att });
  isError(t, extra, 400, { error: 'malformed_request', message: 'The query is not valid.', issues: [{ path: '', message: 'unknown field "page"' }] });
  const twice = await n.api('GET', '/api/v1/obligations?consistency=local&state=all&consistency=linearizable', { token: att });
  isError(t, twice, 400, { error: 'malformed_request', message: 'The query is not valid.', issues: [{ path: 'consistency', message: 'is given more than once; give it once' }] });
  const owedWhole = 'pages the states open, breached, discharged and all; what is owed (the default state) is answered whole, at most 256 obligations in one page';
  for (const query of ['limit=2', 'state=owed&limit=2', 'after=obl_1&state=owed']) {
    const paged = await n.api('GET', `/api/v1/obligations?${query}`, { token: att });
    isError(t, paged, 400, { error: 'malformed_request', message: 'The query is not valid.', issues: [{ path: query.includes('limit') ? 'limit' : 'after', message: owedWhole }] });
  }
});

t.test('400 invalid_usage_id: a path segment that is not a usage-balance id', async (t) => {
  for (const id of ['acc_acme_cash', 'usage_', 'llm']) {
    const r = await n.api('GET', `/api/v1/usages/${id}`, { token: att });
    isError(t, r, 400, { error: 'invalid_usage_id', message: `${JSON.stringify(id)} is not a usage-balance id (usage_<id>).` });
  }
  const badEscape = await n.api('GET', '/api/v1/usages/usage_%E0%A4%A', { token: att });
  isError(t, badEscape, 400, { error: 'malformed_request', message: 'The request path is not valid percent-encoding.' });
  const txnEscape = await n.api('GET', '/api/v1/transactions/%ZZ', { token: att });
  isError(t, txnEscape, 400, { error: 'malformed_request', message: 'The request path is not valid percent-encoding.' });
});

t.test('malformed ids on the other reads are 400 with the parameter named', async (t) => {
  isError(t, await n.api('GET', '/api/v1/transactions/tx-1', { token: att }), 400, {
    error: 'malformed_request', message: 'The transaction id is not valid.', issues: [{ path: 'txn_id', message: 'must be a transaction id (txn_<id>; a letter or digit, then letters, digits and _ . : -, 128 characters at most)' }],
  });
  isError(t, await n.api('GET', '/api/v1/accounts/cash/balance', { token: att }), 400, {
    error: 'malformed_request', message: 'The account id is not valid.', issues: [{ path: 'id', message: 'must be an account id (acc_<id>; a letter or digit, then letters, digits and _ . : -, 128 characters at most)' }],
  });
});

/** Asserts two 404 answers are the same bytes, headers that matter included. */
function sameAnswer(t: Test, a: Response, b: Response, what: string): void {
  t.equal(a.status, 404, `${what}: 404`);
  t.equal(b.status, 404);
  t.equal(b.text, a.text, `${what}: byte-identical bodies`);
  for (const h of ['content-type', 'content-length', 'consistency']) t.equal(b.headers[h], a.headers[h], `${what}: same ${h}`);
}

t.test('404 unknown_usage is no existence oracle: never opened, unowned and another party\'s answer alike', async (t) => {
  const read = (id: string) => n.api('GET', `/api/v1/usages/${id}`, { token: att });
  const neverA = await read('usage_later_globex');
  isError(t, neverA, 404, { error: 'unknown_usage', message: 'No usage balance usage_later_globex is visible to this agent.' });
  const neverB = await read('usage_later_none');
  await n.adm('operator', 'POST', '/admin/v1/usages', { id: 'usage_later_globex', currency: 'EUR', owner: 'party_globex' });
  await n.adm('operator', 'POST', '/admin/v1/usages', { id: 'usage_later_none', currency: 'JPY' });
  sameAnswer(t, neverA, await read('usage_later_globex'), 'another party\'s balance vs. the same id never opened');
  sameAnswer(t, neverB, await read('usage_later_none'), 'an unowned balance vs. the same id never opened');
  sameAnswer(t, neverA, await read('usage_later_globex?format=text'), 'format=text changes nothing');
  const owner = await n.api('GET', '/api/v1/usages/usage_later_globex', { token: attB });
  t.equal(owner.status, 200, 'the owner reads it');
  t.equal(owner.body.currency, 'EUR');
  const unowned = await n.adm('operator', 'GET', '/admin/v1/usages/usage_later_none');
  t.equal(unowned.body.owner, null, 'the admin plane sees the unowned balance');
});

t.test('404 unknown_transaction is no existence oracle: another party\'s transaction answers as a missing one', async (t) => {
  const id = txn('foreign');
  const before = await n.api('GET', `/api/v1/transactions/${id}`, { token: att });
  isError(t, before, 404, { error: 'unknown_transaction', message: `No transaction ${id} is visible to this agent.` });
  const envB = envelope(attB, {
    agent: AGENT_B, transaction: id,
    entries: [
      { account: 'acc_globex_cash', side: 'Debit', amount: { minor: 100, currency: 'USD' } },
      { account: 'acc_merchant_books', side: 'Credit', amount: { minor: 100, currency: 'USD' } },
    ],
  });
  t.equal((await post(envB)).body.verdict, 'Permitted');
  t.equal((await n.api('GET', `/api/v1/transactions/${id}`, { token: attB })).status, 200, 'its party reads it');
  sameAnswer(t, before, await n.api('GET', `/api/v1/transactions/${id}`, { token: att }), 'another party\'s transaction vs. the same id never recorded');
});

t.test('404 unknown_account is no existence oracle: another party\'s, a house account and a missing one answer alike', async (t) => {
  const read = (id: string) => n.api('GET', `/api/v1/accounts/${id}/balance`, { token: att });
  const neverG = await read('acc_later_globex');
  isError(t, neverG, 404, { error: 'unknown_account', message: 'No account acc_later_globex is visible to this agent.' });
  const neverH = await read('acc_later_house');
  await n.adm('operator', 'POST', '/admin/v1/accounts', { id: 'acc_later_globex', party: 'party_globex' });
  await n.adm('operator', 'POST', '/admin/v1/accounts', { id: 'acc_later_house' });
  sameAnswer(t, neverG, await read('acc_later_globex'), 'another party\'s account vs. the same id never opened');
  sameAnswer(t, neverH, await read('acc_later_house'), 'a house account vs. the same id never opened');
});

t.test('409 stale_policy: nothing is written and the transaction id stays free', async (t) => {
  const id = txn('stale');
  await refused(t, envelope(att, { transaction: id, policy: 'pol_0' }), 409, {
    error: 'stale_policy', message: 'The pinned policy pol_0 is not the policy in force (pol_1).', pinned: 'pol_0', active: 'pol_1',
  });
  const again = await post(envelope(att, { transaction: id, policy: 'pol_1', minor: 100 }));
  t.equal(again.body.verdict, 'Permitted', 'the client resubmits with the same id and the active pin');
});

t.test("transaction ids are scoped per party: another party's use of an id is not seen, not replayed and not refused", async (t) => {
  const id = txn('scoped');
  const envB = envelope(attB, { agent: AGENT_B, transaction: id, entries: [], action: { action: 'usage.record', bindings: {} } });
  const b = await post(envB);
  t.equal(b.body.verdict, 'Permitted');
  const a = await post(envelope(att, { transaction: id }));
  t.equal(a.status, 200);
  t.equal(a.headers['idempotent-replayed'], undefined, "A's intent is judged, not B's replayed");
  t.equal(a.body.verdict, 'Permitted');
  t.not(a.body.provenance.log_index, b.body.provenance.log_index);
  const readA = await n.api('GET', `/api/v1/transactions/${id}`, { token: att });
  const readB = await n.api('GET', `/api/v1/transactions/${id}`, { token: attB });
  t.equal(readA.body.party, 'party_acme');
  t.equal(readB.body.party, 'party_globex');
  t.equal(readA.body.action.action, 'purchase.book');
  t.equal(readB.body.action.action, 'usage.record');
  t.equal((await post(envelope(att, { transaction: id, minor: 1 }))).headers['idempotent-replayed'], 'true', "A's own resubmission replays A's outcome");
});

t.test('a replay of a recorded refusal answers the same bytes with Idempotent-Replayed and writes nothing', async (t) => {
  const id = txn('replay');
  const first = await post(envelope(att, { transaction: id, minor: 700000 }));
  t.equal(first.body.verdict, 'ForbiddenRejected');
  t.equal(first.headers['idempotent-replayed'], undefined);
  const before = await digest();
  const again = await post(envelope(att, { transaction: id, minor: 1 }));
  t.equal(again.status, 200);
  t.equal(again.headers['idempotent-replayed'], 'true');
  t.equal(again.text, first.text);
  t.equal(await digest(), before, 'a replay extends nothing');
});

t.test('verdicts: Permitted, ForbiddenRejected, NotPermittedRejected, ObligationUnmetRejected; judged refusals are recorded', async (t) => {
  let before = await digest();
  const forbidden = await post(envelope(att, { transaction: txn('forbidden'), minor: 700000 }));
  t.match(forbidden.body, {
    verdict: 'ForbiddenRejected', posted: false,
    provenance: { winning_rule: 'R-cap-large', basis: 'Purchase of 700000 USD minor units exceeds the 500000 limit of rule R-cap-large', prohibitions_checked: ['R-cap-large'], obligations_created: [] },
  });
  t.not(await digest(), before, 'a judged refusal extends the chain');

  before = await digest();
  const notPermitted = await post(envelope(att, { transaction: txn('notpermitted'), entries: [], action: { action: 'receipt.attach', bindings: {} } }));
  t.match(notPermitted.body, { verdict: 'NotPermittedRejected', posted: false, provenance: { winning_rule: 'default-deny', basis: 'No permission of policy pol_1 covers receipt.attach.' } });
  t.not(await digest(), before);

  const unknown = await post(envelope(att, { transaction: txn('unmet'), entries: [], action: { action: 'receipt.attach', bindings: { obligation: 'obl_nope' } } }));
  t.match(unknown.body, { verdict: 'ObligationUnmetRejected', posted: false, provenance: { winning_rule: 'unknown-obligation', basis: 'No obligation obl_nope is owed by this party.' } });
  const read = await n.api('GET', `/api/v1/transactions/${unknown.body.transaction}`, { token: att });
  t.equal(read.body.verdict, 'ObligationUnmetRejected', 'the refusal has a record');
});

t.test('an obligation is discharged by the action and evidence its rule asks for', async (t) => {
  const id = txn('buy');
  const bought = await post(envelope(att, { transaction: id, minor: 1000 }));
  const obl = `obl_${id}_O-receipt`;
  t.equal(bought.body.provenance.obligations_created[0], obl);
  const attach = (evidence: string[]) => envelope(att, { transaction: txn('attach'), entries: [], evidence, action: { action: 'receipt.attach', bindings: { obligation: obl } } });

  const unmet = await post(attach([]));
  t.match(unmet.body, { verdict: 'ObligationUnmetRejected', provenance: { winning_rule: 'R-purchase', basis: `Obligation ${obl} is not discharged: evidence has 0 items, not at least 1.` } });
  const done = await post(attach([EVIDENCE]));
  t.match(done.body, { verdict: 'Permitted', posted: true, provenance: { winning_rule: 'R-purchase', obligations_discharged: [obl] } });
  t.notOk(done.body.obligations_pending.some((o: { id: string }) => o.id === obl), 'no longer pending');
  const twice = await post(attach([EVIDENCE]));
  t.match(twice.body, { verdict: 'ObligationUnmetRejected', provenance: { basis: new RegExp(`^Obligation ${obl} was already discharged at tick \\d+ by ${done.body.transaction}\\.$`) } });

  const list = await n.api('GET', '/api/v1/obligations?state=discharged', { token: att });
  t.equal(list.body.party, 'party_acme');
  const view = list.body.obligations.find((o: { id: string }) => o.id === obl);
  t.match(view, { id: obl, rule: 'R-purchase', action: 'receipt.attach', transaction: id, state: 'discharged', discharged_by: done.body.transaction, repair_of: null, breached_at_tick: null });
  const owed = await n.api('GET', '/api/v1/obligations', { token: att });
  t.notOk(owed.body.obligations.some((o: { id: string }) => o.id === obl), 'the default view lists what is owed');
  const other = await n.api('GET', '/api/v1/obligations?state=all', { token: attB });
  t.notOk(other.body.obligations.some((o: { id: string }) => o.id === obl), 'another party does not see it');
});

t.test('GET /api/v1/policies/active answers the policy in force', async (t) => {
  const r = await n.api('GET', '/api/v1/policies/active', { token: att });
  t.equal(r.status, 200);
  t.match(r.body, { id: 'pol_1', state: 'active', author: 'alice', reviewer: 'bob', approver: 'carol' });
  t.match(r.body.bundle_hash, /^[0-9a-f]{64}$/);
});

t.test('GET /api/openapi.json serves the committed document with this node\'s own address in servers', async (t) => {
  const r = await n.api('GET', '/api/openapi.json');
  t.equal(r.status, 200);
  t.equal(r.headers['content-type'], JSON_TYPE);
  t.equal(r.body.openapi, '3.1.0');
  const committed = parseJson(readFileSync(OPENAPI_FILES.agent, 'utf8')) as { servers: { url: string }[]; components: any };
  t.strictSame(r.body.servers, [{ url: n.node.agentUrl, description: 'The node that served this document.' }]);
  t.not(n.node.agentUrl, committed.servers[0]!.url, 'the node listens on a port of its own, not the development default');
  const legs = (doc: { components: any }) => doc.components.schemas.IntentEnvelope.properties.entries as { maxItems: number };
  t.equal(legs(committed).maxItems, 256, 'the committed document admits the most legs any node may be set to');
  t.equal(legs(r.body).maxItems, 64, 'the document served admits this node\'s limit (limits.entries_per_intent_max)');
  legs(committed).maxItems = 64;
  t.strictSame({ ...r.body, servers: committed.servers }, committed, 'everything else but servers is the committed contract');
  // The address advertised is one a client can use: it serves this very document.
  const client = new Client(r.body.servers[0].url, testCerts().ca);
  t.teardown(() => client.close());
  t.equal((await client.request('GET', '/api/openapi.json')).text, r.text);
});

t.test('/healthz and /readyz', async (t) => {
  const h = await n.api('GET', '/healthz');
  t.equal(h.status, 200);
  t.strictSame(h.body, { status: 'ok' });
  const r = await n.api('GET', '/readyz');
  t.equal(r.status, 200);
  t.match(r.body, { status: 'ready', node: 'n1', role: 'leader', leader: 'n1' });
  t.equal(r.body.applied_index, r.body.commit_index);
});

t.test('unknown routes answer 404 not_found; a route asked with another method 405 with Allow', async (t) => {
  isError(t, await n.api('GET', '/api/v1/nothing'), 404, { error: 'not_found', message: 'No route GET /api/v1/nothing.' });
  isError(t, await n.api('GET', '/admin/v1/cluster'), 404, { error: 'not_found', message: 'No route GET /admin/v1/cluster; this is the agent plane: the admin routes are served on the admin plane (admin_port, 9443 by default).' });
  isError(t, await n.api('POST', '/API/V1/INTENTS', { body: envelope(att) }), 404, { error: 'not_found', message: 'No route POST /API/V1/INTENTS.' });
  isError(t, await n.api('GET', '/api/v1/usages/usage_acme_meter/', { token: att }), 404,
    { error: 'not_found', message: 'No route GET /api/v1/usages/usage_acme_meter/; without the trailing slash, /api/v1/usages/usage_acme_meter answers GET, HEAD.' });
  isError(t, await n.api('POST', `${INTENTS}/`, { body: envelope(att) }), 404,
    { error: 'not_found', message: `No route POST ${INTENTS}/; without the trailing slash, ${INTENTS} answers POST.` });
  for (const method of ['GET', 'PUT', 'DELETE']) {
    const r = await n.api(method, INTENTS);
    isError(t, r, 405, { error: 'method_not_allowed', message: `${INTENTS} answers POST, not ${method}.` });
    t.equal(r.headers.allow, 'POST');
  }
  const put = await n.api('PUT', '/api/v1/transactions/txn_x', { token: att });
  isError(t, put, 405, { error: 'method_not_allowed', message: '/api/v1/transactions/txn_x answers GET, HEAD, not PUT.' });
  t.equal(put.headers.allow, 'GET, HEAD');
});

t.test('a read that sends Authorization twice is refused: which attestation was meant is a guess', async (t) => {
  const u = new URL(n.node.agentUrl);
  const r = await new Promise<{ status: number; body: string }>((resolve, reject) => {
    const req = httpsRequest({ host: u.hostname, port: u.port, path: '/api/v1/obligations', ca: readFileSync(testCerts().ca), headers: ['host', u.host, 'authorization', `Bearer ${att}`, 'authorization', 'Bearer other'] }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode!, body: Buffer.concat(chunks).toString() }));
    });
    req.on('error', reject);
    req.end();
  });
  t.equal(r.status, 400);
  t.same(JSON.parse(r.body), { error: 'malformed_request', message: 'The Authorization header was sent more than once; send it once.' });
});

t.test('an Expect other than 100-continue is answered 417 with a JSON body', async (t) => {
  const r = await n.api('POST', INTENTS, { body: envelope(att, { transaction: 'txn_ap_expect' }), headers: { expect: '999-bogus' } });
  isError(t, r, 417, { error: 'expectation_failed', message: 'Expect: 999-bogus is not supported; only 100-continue is.' });
  t.equal((await n.api('GET', '/api/v1/transactions/txn_ap_expect', { token: att })).status, 404, 'nothing was recorded');
});

/** Sends `lines` as a request over a TLS connection of its own and reads the answer, until the server closes. */
function rawExchange(base: string, lines: string): Promise<string> {
  const u = new URL(base);
  return new Promise((resolve, reject) => {
    const socket = tlsConnect({ host: u.hostname, port: Number(u.port), ca: readFileSync(testCerts().ca), servername: 'localhost' }, () => socket.write(lines));
    const chunks: Buffer[] = [];
    socket.on('data', (c: Buffer) => chunks.push(c));
    socket.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    socket.on('error', reject);
  });
}

t.test('a request line of HTTP/2.0 or 0.9 is answered 505 with a JSON body; HTTP/1.0 is served', async (t) => {
  const host = new URL(n.node.agentUrl).host;
  for (const version of ['2.0', '0.9']) {
    const answer = await rawExchange(n.node.agentUrl, `GET /healthz HTTP/${version}\r\nHost: ${host}\r\nConnection: close\r\n\r\n`);
    t.match(answer, /^HTTP\/1\.1 505 HTTP Version Not Supported\r\n/, `HTTP/${version}`);
    t.match(answer, /\r\ncontent-type: application\/json; charset=utf-8\r\n/i);
    t.same(JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4)), { error: 'http_version_not_supported', message: `HTTP/${version} is not supported here; send HTTP/1.1.` });
  }
  const old = await rawExchange(n.node.agentUrl, 'GET /healthz HTTP/1.0\r\n\r\n');
  t.match(old, /^HTTP\/1\.1 200 OK\r\n/, 'HTTP/1.0, which needs no Host');
  t.same(JSON.parse(old.slice(old.indexOf('\r\n\r\n') + 4)), { status: 'ok' });
});

t.test('an intent sent with a query is refused, not judged with the query ignored', async (t) => {
  const id = txn('query');
  const before = await digest();
  const r = await n.api('POST', `${INTENTS}?dry_run=true`, { body: envelope(att, { transaction: id }) });
  isError(t, r, 400, { error: 'malformed_request', message: 'POST /api/v1/intents takes no query parameters; remove "dry_run".' });
  t.equal(await digest(), before, 'the ledger digest is unchanged');
  t.equal((await n.api('GET', `/api/v1/transactions/${id}`, { token: att })).status, 404, 'nothing was recorded');
  t.equal((await post(envelope(att, { transaction: id }))).status, 200, 'the same intent without the query is judged');
});

t.test('a cursor that could be no obligation id is refused, not read as a position', async (t) => {
  for (const after of ['zzz', 'obl_', '%20obl_x']) {
    const r = await n.api('GET', `/api/v1/obligations?state=all&after=${after}`, { token: att });
    isError(t, r, 400, { error: 'malformed_request', message: 'The query is not valid.', issues: [{ path: 'after', message: 'must be the next of a previous page (an obligation id)' }] });
  }
  const first = await n.api('GET', '/api/v1/obligations?state=all&limit=1', { token: att });
  t.equal(first.status, 200);
  t.type(first.body.next, 'string', 'the party has more than one obligation');
  const second = await n.api('GET', `/api/v1/obligations?state=all&limit=1&after=${encodeURIComponent(first.body.next)}`, { token: att });
  t.equal(second.status, 200, 'a cursor from a previous page is taken');
  t.not(second.body.obligations[0].id, first.body.obligations[0].id);
});

t.test('no answer of the agent plane carries a stack or an internal path', async (t) => {
  const probes = [
    n.api('POST', INTENTS, { raw: '{'.repeat(20000) }),
    n.api('POST', INTENTS, { raw: '\u0000' }),
    n.api('GET', '/api/v1/usages/usage_%FF', { token: att }),
    n.api('POST', INTENTS, { raw: JSON.stringify(envelope(att)), headers: { 'content-encoding': 'br' } }),
  ];
  for (const r of await Promise.all(probes)) {
    t.ok(r.status >= 400 && r.status < 500, `a client error (${r.status})`);
    t.notMatch(r.text, /\/work\/|node_modules|at [A-Za-z.]+ \(|\.ts:\d+/);
  }
});

t.test('409 no_active_policy on a node where no policy was ever activated', async (t) => {
  const fresh = await startTestNode();
  t.teardown(() => fresh.close());
  for (const [path, body] of [
    ['/admin/v1/trust-roots', { issuer: fresh.issuer.name, public_key: fresh.issuer.paserk }],
    ['/admin/v1/parties', { id: 'party_acme' }],
    ['/admin/v1/agents', { agent: AGENT_A, party: 'party_acme' }],
  ] as const) t.equal((await fresh.adm('operator', 'POST', path, body)).status, 201);
  const token = await fresh.issuer.sign(AGENT_A);
  const before = (await fresh.adm('operator', 'GET', '/admin/v1/log/digest')).body.digest;
  const r = await fresh.api('POST', INTENTS, { body: envelope(token, { entries: [] }) });
  isError(t, r, 409, { error: 'no_active_policy', message: 'No policy is in force; the intent pinned pol_1.', pinned: 'pol_1', active: null });
  t.equal((await fresh.adm('operator', 'GET', '/admin/v1/log/digest')).body.digest, before);
  const active = await fresh.api('GET', '/api/v1/policies/active', { token });
  isError(t, active, 404, { error: 'unknown_policy', message: 'No policy is in force.' });
});

t.test('RepairOutstandingRejected after ticks breach an obligation, until the repair is done', async (t) => {
  const fast = await startTestNode({ tick_interval_ms: 40 });
  t.teardown(() => fast.close());
  await bootstrap(fast);
  const token = await fast.issuer.sign(AGENT_A);
  const id = txn('late');
  const bought = await fast.api('POST', INTENTS, { body: envelope(token, { transaction: id, minor: 1000 }) });
  t.equal(bought.body.verdict, 'Permitted');
  const obl = `obl_${id}_O-receipt`;
  const repair = `${obl}/D-refund`;

  let breached: { state: string; breached_at_tick: number } | undefined;
  for (let i = 0; i < 100 && breached?.state !== 'breached'; i++) {
    await new Promise((r) => setTimeout(r, 40));
    const list = await fast.api('GET', '/api/v1/obligations?state=all', { token });
    breached = list.body.obligations.find((o: { id: string }) => o.id === obl);
  }
  t.equal(breached?.state, 'breached', 'the deadline passed and the obligation was breached');
  t.ok(breached!.breached_at_tick > bought.body.obligations_pending[0].deadline_tick);

  const blocked = await fast.api('POST', INTENTS, { body: envelope(token, { transaction: txn('blocked'), minor: 1000 }) });
  t.match(blocked.body, {
    verdict: 'RepairOutstandingRejected', posted: false,
    provenance: { winning_rule: 'R-purchase', basis: new RegExp(`^Repair duty ${repair.replace(/[.]/g, '\\.')} \\(purchase\\.refund, due by tick \\d+\\) is outstanding and blocks purchase\\.book\\.$`) },
  });
  t.ok(blocked.body.obligations_pending.some((o: { id: string; repair_of?: string }) => o.id === repair && o.repair_of === obl), 'the repair duty is pending');

  const refund = await fast.api('POST', INTENTS, { body: envelope(token, {
    transaction: txn('refund'),
    entries: [
      { account: 'acc_merchant_books', side: 'Debit', amount: { minor: 1000, currency: 'USD' } },
      { account: 'acc_acme_cash', side: 'Credit', amount: { minor: 1000, currency: 'USD' } },
    ],
    action: { action: 'purchase.refund', bindings: { obligation: repair } },
  }) });
  t.match(refund.body, { verdict: 'Permitted', provenance: { obligations_discharged: [repair] } });
  const after = await fast.api('POST', INTENTS, { body: envelope(token, { transaction: txn('after'), minor: 1000 }) });
  t.equal(after.body.verdict, 'Permitted', 'once repaired, purchases are permitted again');
});

t.test('a request line too long to parse is answered 400 with a body, and without one to HEAD, on a kept-alive connection too', async (t) => {
  const u = new URL(n.node.agentUrl);
  const agent = new Agent({ ca: readFileSync(testCerts().ca), keepAlive: true, maxSockets: 1 });
  const send = (method: string, path: string) => new Promise<{ status: number; body: string; error?: string }>((resolve) => {
    const r = httpsRequest({ host: u.hostname, port: u.port, method, path, agent }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode!, body: Buffer.concat(chunks).toString() }));
    });
    r.on('error', (e) => resolve({ status: 0, body: '', error: e.message }));
    r.end();
  });
  try {
    for (const [method, before] of [['HEAD', 'GET'], ['HEAD', 'HEAD'], ['GET', 'HEAD']] as const) {
      t.equal((await send(before, '/healthz')).status, 200, `a ${before} first, on the same connection`);
      const long = await send(method, `/api/v1/${'a'.repeat(20_000)}`);
      t.equal(long.error, undefined, `${method} after ${before}: the client reads the answer`);
      t.equal(long.status, 400);
      if (method === 'HEAD') t.equal(long.body, '', 'no body to HEAD');
      else t.same(JSON.parse(long.body), { error: 'malformed_request', message: `The request line and headers are larger than the ${maxHeaderSize} bytes this node reads.` });
    }
  } finally {
    agent.destroy();
  }
});
