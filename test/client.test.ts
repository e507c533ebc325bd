// Proves the SDK against a live node on free ports of 127.0.0.1: the pin loop of
// the specification's Errors rule 3 stops at three attempts and resolves a stale
// pin; a 503 is retried with the same transaction id without posting twice, and
// read back when every retry fails; a 421 is followed to the primary across the
// configured addresses only, and a 422 gateway_error (certainly not recorded, that
// replica cannot take it) to the next of them; 128-bit values above 2^64 round-trip as bigint; the
// usage read without an attestation, and an intent whose agent cannot be known,
// send no request (the node's own request counter says so); every error code has
// its class; every admin route answers.
import t from 'tap';
import { readFileSync } from 'node:fs';
import {
  AdminClient, AgentClient, ApiError, CommitUnavailableError, ERROR_CLASSES, ERROR_CODES, GatewayErrorError, NoAttestationError, NotPrimaryError,
  PIN_ATTEMPTS_MAX, StalePolicyError, SubstrateRejectedError, TransportError, UnknownTransactionError, UnreadableAttestationError, attestationSubject, parseJson,
} from '@apl/client';
import { ExportVerifier } from '@apl/core';
import { AGENT_A, EVIDENCE, POLICY, TOKENS, bootstrap, startTestNode, testCerts, type TestNode } from './support/node.js';
import { errorReply, startProxy, type Proxy } from './support/proxy.js';

let n: TestNode;
let att: string;
const ca = readFileSync(testCerts().ca);
const open: { close(): unknown }[] = [];
const agentClient = (o: Partial<ConstructorParameters<typeof AgentClient>[0]> = {}) => {
  const c = new AgentClient({ url: n.node.agentUrl, ca, attestation: att, ...o });
  open.push(c);
  return c;
};
const proxy = async (p: Promise<Proxy>) => {
  const x = await p;
  open.push({ close: () => x.close() });
  return x;
};

t.before(async () => {
  n = await startTestNode();
  await bootstrap(n);
  att = await n.issuer.sign(AGENT_A);
});
t.teardown(async () => {
  for (const c of open) await c.close();
  await n.close();
});

/** A purchase by agent A as the SDK takes it (no agent, attestation, transaction or pin: the client fills them). */
const purchase = (minor = 1000n, currency = 'USD') => ({
  entries: [
    { account: 'acc_acme_cash', side: 'Debit' as const, amount: { minor, currency } },
    { account: 'acc_merchant_books', side: 'Credit' as const, amount: { minor, currency } },
  ],
  action: { action: 'purchase.book', bindings: { merchant: 'books-r-us' } },
  evidence: [EVIDENCE],
  justification: 'Buying the reference book the user asked for',
});

/** Drafts, reviews, approves and activates a copy of POLICY as `id`. */
async function activate(id: string): Promise<void> {
  for (const [who, path, body] of [
    ['author', '/admin/v1/policies', { id, bundle: POLICY }], ['reviewer', `/admin/v1/policies/${id}/review`, {}],
    ['approver', `/admin/v1/policies/${id}/approve`, {}], ['approver', `/admin/v1/policies/${id}/activate`, {}],
  ] as const) {
    const r = await n.adm(who, 'POST', path, body);
    if (r.status >= 300) throw new Error(`${path}: ${r.status} ${r.text}`);
  }
}

/** How many requests the node's agent plane has answered, from its Prometheus counter. */
async function agentRequests(): Promise<number> {
  const r = await n.admin.request('GET', '/metrics');
  return r.text.split('\n').filter((l) => l.startsWith('apl_http_requests_total{') && l.includes('plane="agent"'))
    .reduce((sum, l) => sum + Number(l.split(' ').pop()), 0);
}

/** How many SubmitIntent records of `txn` the node's log holds. */
async function recorded(txn: string): Promise<number> {
  const r = await n.admin.request('GET', '/admin/v1/log/export', { token: TOKENS.operator });
  return r.text.split('\n').filter(Boolean).map((l) => parseJson(l) as { op: { type: string; transaction?: string } })
    .filter((x) => x.op.type === 'SubmitIntent' && x.op.transaction === txn).length;
}

t.test('the usage read without an attestation fails locally and sends no request', async (t) => {
  const c = agentClient({ attestation: undefined });
  const before = await agentRequests();
  await t.rejects(c.getUsage('usage_acme_llm'), NoAttestationError);
  await t.rejects(c.getUsageText('usage_acme_llm'), NoAttestationError);
  await t.rejects(c.submitIntent(purchase()), NoAttestationError);
  for (const token of ['garbage', 'v4.public.AAAA']) {
    await t.rejects(c.submitIntent({ ...purchase(), attestation: token }), UnreadableAttestationError, `${token}: no agent given, and none to read`);
  }
  t.equal(await agentRequests(), before, 'the node answered no request');
  // The same client with an attestation for this call does reach the node.
  const u = await c.getUsage('usage_acme_llm', { attestation: att });
  t.equal(u.usage, 'usage_acme_llm');
  // The agent plane's thread counts a request when its answer has been written out
  // ('finish'), which may come after the client has read the answer.
  let counted = await agentRequests();
  for (const deadline = Date.now() + 5_000; counted < before + 1 && Date.now() < deadline; counted = await agentRequests()) {
    await new Promise((r) => setTimeout(r, 20));
  }
  t.equal(counted, before + 1, 'the counter counts the agent plane\'s requests');
});

t.test('128-bit values above 2^64 round-trip as bigint, small ones included', async (t) => {
  const c = agentClient();
  const consumed = 2n ** 100n + 7n;
  const minor = 2n ** 70n + 1n;
  const r = await c.submitIntent({ ...purchase(minor, 'EUR'), consume_usage: { usage: 'usage_acme_llm', amount: { minor: consumed, currency: 'USD' } } });
  t.equal(r.outcome.verdict, 'Permitted', r.outcome.provenance.basis ?? '');
  const u = await c.getUsage('usage_acme_llm');
  t.equal(u.consumed, consumed);
  t.equal(u.unmetered, consumed);
  t.equal(u.billed, 0n, 'a zero counter is a bigint too');
  t.match(u.text, String(consumed));
  const tx = await c.getTransaction(r.outcome.transaction);
  t.equal(tx.entries[0]!.amount.minor, minor);
  t.equal(tx.consume_usage!.amount.minor, consumed);
  const b = await c.getAccountBalance('acc_acme_cash');
  t.same(b.balances.find((x) => x.currency === 'EUR'), { currency: 'EUR', debits: minor, credits: 0n, net: minor });
  t.equal(attestationSubject(att), AGENT_A, 'the agent comes from the attestation');
});

t.test('a stale pin is re-read and resubmitted with the same transaction id', async (t) => {
  const c = agentClient();
  const before = (await c.getActivePolicy()).id;
  await activate('pol_pin_fresh');
  const r = await c.submitIntent({ ...purchase(), policy: before, transaction: 'txn_pin_fresh' });
  t.equal(r.outcome.verdict, 'Permitted');
  t.equal(r.outcome.policy, 'pol_pin_fresh');
  t.equal(r.attempts, 2);
  t.same(r.pins, [before, 'pol_pin_fresh']);
  t.equal(r.outcome.transaction, 'txn_pin_fresh');
  t.equal(await recorded('txn_pin_fresh'), 1);
});

t.test('the pin loop stops at three attempts', async (t) => {
  // The proxy activates a new policy right after each read of the active one, so
  // every resubmission pins a policy that has just been superseded.
  let generation = 0;
  const p = await proxy(startProxy(n.node.agentUrl, async (req, forward) => {
    const reply = await forward();
    if (req.path.startsWith('/api/v1/policies/active')) await activate(`pol_churn_${++generation}`);
    return reply;
  }));
  const c = agentClient({ url: p.url });
  const active = (await agentClient().getActivePolicy()).id;
  const err = await c.submitIntent({ ...purchase(), policy: 'pol_long_gone', transaction: 'txn_pin_churn' }).catch((e: unknown) => e);
  t.type(err, StalePolicyError);
  t.equal((err as StalePolicyError).attempts, PIN_ATTEMPTS_MAX);
  t.equal(PIN_ATTEMPTS_MAX, 3);
  t.equal((err as StalePolicyError).status, 409);
  const posts = p.seen.filter((s) => s.method === 'POST');
  t.equal(posts.length, 3, 'three attempts, no fourth');
  const sent = posts.map((s) => parseJson(s.body) as { transaction: string; policy: string });
  t.same(sent.map((s) => s.transaction), ['txn_pin_churn', 'txn_pin_churn', 'txn_pin_churn'], 'the same transaction id each time');
  t.equal(sent[0]!.policy, 'pol_long_gone');
  t.equal(sent[1]!.policy, active, 'the second attempt pins the policy read after the first');
  t.equal(sent[2]!.policy, 'pol_churn_1', 'the third pins the one read after the second');
  t.match((err as StalePolicyError).body, { pinned: 'pol_churn_1', active: 'pol_churn_2' }, 'the error is the third answer');
  t.equal(generation, 2, 'the active policy was read twice');
  t.equal(await recorded('txn_pin_churn'), 0, 'nothing recorded');
});

t.test('a 503 is retried with the same transaction id and posts once', async (t) => {
  const upstream: { status: number; replayed: string | undefined }[] = [];
  let first = true;
  const p = await proxy(startProxy(n.node.agentUrl, async (req, forward) => {
    if (req.method !== 'POST') return forward();
    const reply = await forward();
    upstream.push({ status: reply.status, replayed: reply.headers['idempotent-replayed'] });
    if (!first) return reply;
    first = false; // the intent is in the log; its answer is lost, as a commit time-out would lose it
    return errorReply(503, { error: 'commit_unavailable', message: 'The commit could not be confirmed in time.' });
  }));
  const c = agentClient({ url: p.url, retryDelayMs: 10 });
  const r = await c.submitIntent({ ...purchase(), transaction: 'txn_503_once' });
  t.equal(r.outcome.verdict, 'Permitted');
  t.equal(r.posts, 2);
  t.equal(r.replayed, true);
  t.equal(r.readBack, false);
  const posts = p.seen.filter((s) => s.method === 'POST');
  t.equal(posts.length, 2);
  t.equal(posts[0]!.body, posts[1]!.body, 'the retry sends the same envelope');
  t.same(upstream, [{ status: 200, replayed: undefined }, { status: 200, replayed: 'true' }], 'the node judged it once and replayed it');
  t.equal(await recorded('txn_503_once'), 1, 'the transaction exists once');
});

t.test('a 503 on every retry: the transaction is read back', async (t) => {
  let forwarded = false;
  const p = await proxy(startProxy(n.node.agentUrl, async (req, forward) => {
    if (req.method !== 'POST') return forward();
    if (!forwarded) {
      forwarded = true;
      await forward();
    }
    return errorReply(503, { error: 'commit_unavailable', message: 'The commit could not be confirmed in time.' });
  }));
  const c = agentClient({ url: p.url, commitRetries: 1, retryDelayMs: 10 });
  const r = await c.submitIntent({ ...purchase(), transaction: 'txn_503_read' });
  t.equal(r.readBack, true);
  t.equal(r.replayed, true);
  t.equal(r.posts, 2);
  t.equal(r.outcome.verdict, 'Permitted');
  t.equal(r.outcome.transaction, 'txn_503_read');
  t.ok(p.seen.some((s) => s.method === 'GET' && s.path === '/api/v1/transactions/txn_503_read'), 'it read the transaction');
  t.equal(await recorded('txn_503_read'), 1);
});

t.test('a 503 for an intent that never landed is thrown, after the retries and the read', async (t) => {
  const p = await proxy(startProxy(n.node.agentUrl, async (req, forward) => (
    req.method === 'POST' ? errorReply(503, { error: 'commit_unavailable', message: 'The commit could not be confirmed in time.' }) : forward()
  )));
  const c = agentClient({ url: p.url, commitRetries: 2, retryDelayMs: 5 });
  const err = await c.submitIntent({ ...purchase(), transaction: 'txn_503_never' }).catch((e: unknown) => e);
  t.type(err, CommitUnavailableError);
  t.equal((err as CommitUnavailableError).status, 503);
  t.equal(p.seen.filter((s) => s.method === 'POST').length, 3);
  t.equal(await recorded('txn_503_never'), 0);
});

t.test('a 421 is followed to the primary it names, and the primary is used from then on', async (t) => {
  const stub = await proxy(startProxy(null, async () => errorReply(421, { error: 'not_primary', message: 'This replica is not the primary.', primary_client_addr: n.node.agentUrl })));
  const c = agentClient({ url: [stub.url, n.node.agentUrl] });
  const r = await c.submitIntent({ ...purchase(), transaction: 'txn_421_follow' });
  t.equal(r.outcome.verdict, 'Permitted');
  t.equal(stub.seen.length, 1, 'the stub was asked once');
  t.equal(c.transport.url, n.node.agentUrl.replace(/\/$/, ''));
  await c.getUsage('usage_acme_llm');
  t.equal(stub.seen.length, 1, 'the next request went to the primary directly');
  t.equal(await recorded('txn_421_follow'), 1);
});

t.test('a 421 naming no primary moves to the next configured address; an unconfigured one is not followed', async (t) => {
  const nobody = await proxy(startProxy(null, async () => errorReply(421, { error: 'not_primary', message: 'This replica is not the primary.', primary_client_addr: null })));
  const c = agentClient({ url: [nobody.url, n.node.agentUrl] });
  t.equal((await c.submitIntent(purchase())).outcome.verdict, 'Permitted');
  t.equal(nobody.seen.length, 1);

  const elsewhere = await proxy(startProxy(null, async () => errorReply(421, { error: 'not_primary', message: 'This replica is not the primary.', primary_client_addr: n.node.agentUrl })));
  const lone = agentClient({ url: elsewhere.url });
  const err = await lone.submitIntent({ ...purchase(), transaction: 'txn_421_lone' }).catch((e: unknown) => e);
  t.type(err, NotPrimaryError);
  t.equal((err as NotPrimaryError).body.primary_client_addr, n.node.agentUrl);
  t.equal(await recorded('txn_421_lone'), 0, 'the unconfigured address was not followed');
});

t.test('a 422 gateway_error (a removed or stopping member) moves to the next address, used from then on; other refusals are the caller\'s', async (t) => {
  const removed = { error: 'gateway_error', message: 'This member was removed from the cluster; nothing was recorded. Send to another replica.' };
  const gone = await proxy(startProxy(null, async () => errorReply(422, removed)));
  const c = agentClient({ url: [gone.url, n.node.agentUrl] });
  const r = await c.submitIntent({ ...purchase(), transaction: 'txn_422_moved' });
  t.equal(r.outcome.verdict, 'Permitted', 'the intent went to the next replica');
  t.equal(gone.seen.length, 1, 'the removed member was asked once');
  t.equal(c.transport.url, n.node.agentUrl.replace(/\/$/, ''), 'the replica that answered is used first from then on');
  await c.getTransaction('txn_422_moved');
  t.equal(gone.seen.length, 1, 'the next request went there directly');
  t.equal(await recorded('txn_422_moved'), 1);

  const other = await proxy(startProxy(null, async () => errorReply(422, removed)));
  const everywhere = agentClient({ url: [gone.url, other.url] });
  const err = await everywhere.getTransaction('txn_422_moved').catch((e: unknown) => e);
  t.type(err, GatewayErrorError, 'when every address refuses so, the last refusal is the caller\'s');
  t.equal(other.seen.length, 1);

  const closed = await proxy(startProxy(null, async () => errorReply(500, { error: 'internal_error', message: 'x' })));
  const closedUrl = closed.url;
  await closed.close();
  const thenNothing = agentClient({ url: [gone.url, closedUrl] });
  const refused = await thenNothing.getTransaction('txn_422_moved').catch((e: unknown) => e);
  t.type(refused, GatewayErrorError, 'an address that refuses the connection after it does not hide the refusal');

  // A write sent on to a replica that never answers may be recorded there: its time-out is the caller's, not the refusal before it.
  const silent = await proxy(startProxy(null, () => new Promise(() => undefined)));
  const admin = new AdminClient({ url: [gone.url, silent.url], ca, token: TOKENS.operator, timeoutMs: 300 });
  open.push(admin);
  const lost = await admin.addParty({ id: 'party_422_lost' }).catch((e: unknown) => e);
  t.type(lost, TransportError, 'an admin write with no answer after a refusal throws the lost answer');
  t.equal((lost as TransportError).code, 'ETIMEDOUT');

  const verdict = await proxy(startProxy(null, async () => errorReply(422, { error: 'substrate_rejected', message: 'the books would not balance', kind: 'Unbalanced' })));
  const judged = agentClient({ url: [verdict.url, n.node.agentUrl] });
  const rejected = await judged.submitIntent({ ...purchase(), transaction: 'txn_422_judged' }).catch((e: unknown) => e);
  t.type(rejected, SubstrateRejectedError, 'a judgement is not sent elsewhere');
  t.equal(await recorded('txn_422_judged'), 0);
});

t.test('a refused connection moves to the next address; TLS without the CA is a transport error', async (t) => {
  const dead = await proxy(startProxy(null, async () => errorReply(500, { error: 'internal_error', message: 'x' })));
  const deadUrl = dead.url;
  await dead.close();
  const c = agentClient({ url: [deadUrl, n.node.agentUrl] });
  t.equal((await c.getActivePolicy()).state, 'active');
  const alone = agentClient({ url: deadUrl });
  const refused = await alone.getActivePolicy().catch((e: unknown) => e);
  t.type(refused, TransportError);
  t.equal((refused as TransportError).code, 'ECONNREFUSED');
  const untrusted = agentClient({ ca: undefined });
  const tls = await untrusted.getActivePolicy().catch((e: unknown) => e);
  t.type(tls, TransportError);
  t.match((tls as TransportError).code, /CERT|SIGNATURE|SELF_SIGNED|UNABLE/);
  t.throws(() => new AgentClient({ url: 'http://127.0.0.1:1' }), /https only/);
});

t.test('each error code is its own class, carrying the status and the body', async (t) => {
  for (const code of ERROR_CODES) {
    const Class = ERROR_CLASSES[code];
    const e = new Class(400, { error: code, message: 'm' } as never);
    t.ok(e instanceof ApiError && e.code === code && e.name === `${code.split('_').map((w) => w[0]!.toUpperCase() + w.slice(1)).join('')}Error`, code);
  }
  const c = agentClient();
  const missing = await c.getTransaction('txn_never_was').catch((e: unknown) => e);
  t.type(missing, UnknownTransactionError);
  t.equal((missing as UnknownTransactionError).status, 404);
  t.match((missing as UnknownTransactionError).body, { error: 'unknown_transaction', message: /txn_never_was/ });
  const chain = await c.submitIntent({ ...purchase(), meter_usage: { usage: 'usage_acme_llm', amount: { minor: 2n ** 127n - 1n, currency: 'USD' } } }).catch((e: unknown) => e);
  t.type(chain, SubstrateRejectedError);
  t.equal((chain as SubstrateRejectedError).body.kind, 'validation');
  t.match((chain as SubstrateRejectedError).message, /^Metering 170141183460469231731687303715884105727 would bring the metered total/);
});

t.test('the admin client answers every admin route', async (t) => {
  const a = new AdminClient({ url: n.node.adminUrl, ca, token: TOKENS.operator });
  const author = new AdminClient({ url: n.node.adminUrl, ca, token: TOKENS.multi });
  open.push(a, author);
  t.match(await a.addTrustRoot({ issuer: 'other-issuer', public_key: n.issuer.paserk }), { issuer: 'other-issuer' });
  t.ok((await a.listTrustRoots()).trust_roots.some((r) => r.issuer === 'other-issuer'));
  t.match(await a.removeTrustRoot('other-issuer'), { issuer: 'other-issuer' });
  t.same(await a.addParty({ id: 'party_sdk' }), { id: 'party_sdk' });
  t.ok((await a.listParties()).parties.some((p) => p.id === 'party_sdk'));
  t.same(await a.bindAgent({ agent: 'agent://sdk.example/agent/a', party: 'party_sdk' }), { agent: 'agent://sdk.example/agent/a', party: 'party_sdk' });
  t.ok((await a.listAgents()).agents.some((b) => b.party === 'party_sdk'));
  t.same(await a.unbindAgent('agent://sdk.example/agent/a'), { agent: 'agent://sdk.example/agent/a', party: null });
  t.same(await a.openAccount({ id: 'acc_sdk', party: 'party_sdk' }), { account: 'acc_sdk', party: 'party_sdk', balances: [] });
  t.equal((await a.getAccount('acc_acme_cash')).balances[0]!.debits > 0n, true);
  t.equal((await a.openUsage({ id: 'usage_sdk', currency: 'USD' })).consumed, 0n);
  t.equal(typeof (await a.getUsage('usage_acme_llm')).consumed, 'bigint');
  t.equal((await author.draftPolicy({ id: 'pol_sdk', bundle: POLICY })).state, 'draft');
  t.equal((await author.getPolicy('pol_sdk')).author, 'dana');
  t.ok((await a.listPolicies()).policies.some((p) => p.id === 'pol_sdk'));
  t.match(await author.dryRunPolicy('pol_sdk', { limit: 10 }), { policy: 'pol_sdk' });
  const reviewer = new AdminClient({ url: n.node.adminUrl, ca, token: TOKENS.reviewer });
  const approver = new AdminClient({ url: n.node.adminUrl, ca, token: TOKENS.approver });
  open.push(reviewer, approver);
  t.equal((await reviewer.reviewPolicy('pol_sdk', { comment: 'looks right' })).state, 'reviewed');
  t.equal((await approver.approvePolicy('pol_sdk')).state, 'approved');
  t.equal((await approver.activatePolicy('pol_sdk')).state, 'active');
  const cluster = await a.getCluster();
  t.equal(cluster.role, 'leader');
  t.same(await a.transferLeadership({ to: cluster.node }), { leader: cluster.node, transferring_to: null });
  t.match(await a.metrics(), /apl_http_requests_total/);
  const digest = await a.getDigest();
  const v = new ExportVerifier();
  let progress = 0;
  for await (const line of a.exportLog({ onProgress: (b) => (progress = b) })) t.ok(v.push(line).ok || t.fail(line));
  const end = v.result();
  t.ok(progress > 0, 'the export reported its progress');
  t.ok(end.ok && end.applied >= digest.applied_index, 'the streamed export verifies');
  const noToken = new AdminClient({ url: n.node.adminUrl, ca, token: 'not-a-token' });
  open.push(noToken);
  await t.rejects(noToken.getDigest(), { code: 'unauthorized', status: 401 });
  await t.rejects(async () => {
    for await (const _ of noToken.exportLog()) t.fail('no line without a token');
  }, { code: 'unauthorized' });
  // A removed member answers the export 422 gateway_error too: the next replica exports.
  const removed = await proxy(startProxy(null, async () => errorReply(422, { error: 'gateway_error', message: 'This member was removed from the cluster; it serves nothing, its state is no longer kept current. Send to another replica.' })));
  const past = new AdminClient({ url: [removed.url, n.node.adminUrl], ca, token: TOKENS.operator });
  open.push(past);
  let exported = 0;
  for await (const line of past.exportLog()) if (line !== '') exported++;
  t.ok(exported > 0, `the export came from the next replica (${exported} records)`);
  t.equal(removed.seen.length, 1, "after one refusal");
  const nowhere = new AdminClient({ url: [removed.url], ca, token: TOKENS.operator });
  open.push(nowhere);
  await t.rejects(async () => {
    for await (const _ of nowhere.exportLog()) t.fail('no line from a removed member');
  }, { code: 'gateway_error' }, 'with no other replica the refusal is thrown');
});
