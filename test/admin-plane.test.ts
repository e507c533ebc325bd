// Proves the administrative plane over real HTTPS on one node: bearer principals and
// their roles (401 unauthorized, 403 forbidden), four eyes on the policy lifecycle,
// every route of DESIGN §7 and the extra reads the server has, with their exact
// bodies: trust roots as PEM and PASERK (key_id is the PASERK k4.pid), agent bindings
// by URL-encoded URI, dry runs, the cluster of one member, transfer-leadership, the
// ledger digest, an export an auditor re-verifies to that digest, and /metrics.
// Every mutation goes through the log with its principal; every refusal changes
// nothing, and no input stops the node.
import t, { type Test } from 'tap';
import { createPublicKey, generateKeyPairSync } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { request } from 'node:https';
import { blake2b } from '@noble/hashes/blake2.js';
import { parseJson, verifyExport } from '@apl/core';
import { OPENAPI_FILES } from '@apl/node';
import { contract } from './support/contract.js';
import {
  AGENT_A, AGENT_B, Client, EVIDENCE, Issuer, POLICY, TOKENS, bootstrap, envelope, startTestNode, testCerts,
  type Response, type TestNode,
} from './support/node.js';

const JSON_TYPE = 'application/json; charset=utf-8';
let n: TestNode;
let att: string;

t.before(async () => {
  n = await startTestNode();
  await bootstrap(n);
  att = await n.issuer.sign(AGENT_A);
});
t.teardown(() => n.close());

const digest = async () => (await n.adm('operator', 'GET', '/admin/v1/log/digest')).body as { applied_index: number; tick: number; digest: string; state_hash: string };

function isError(t: Test, r: Response, status: number, body: Record<string, unknown>): void {
  t.equal(r.status, status, `answers ${status}`);
  t.equal(r.headers['content-type'], JSON_TYPE);
  t.strictSame(r.body, body);
}

/** Sends an admin request that must be refused, and asserts the ledger did not move. */
async function refused(t: Test, who: keyof typeof TOKENS, method: string, path: string, body: unknown, status: number, expected: Record<string, unknown>): Promise<void> {
  const before = await digest();
  isError(t, await n.adm(who, method, path, body), status, expected);
  t.equal((await digest()).digest, before.digest, 'the ledger digest is unchanged');
}

/**
 * A request the harness's JSON client cannot read (NDJSON) or send (a header twice),
 * checked against the contract all the same.
 */
function getText(path: string, token: string, headers: string[] | Record<string, string> = { authorization: `Bearer ${token}` }): Promise<Response> {
  return new Promise((resolve, reject) => {
    const req = request(`${n.node.adminUrl}${path}`, { ca: readFileSync(testCerts().ca), headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        const r = { status: res.statusCode!, headers: res.headers, text: Buffer.concat(chunks).toString('utf8'), body: undefined };
        contract('admin', 'GET', path, r);
        resolve(r);
      });
    });
    req.on('error', reject);
    req.end();
  });
}

/** The SPKI PEM of a raw Ed25519 public key. */
function pemOf(raw: Buffer): string {
  const der = Buffer.concat([Buffer.from('302a300506032b6570032100', 'hex'), raw]);
  return createPublicKey({ key: der, format: 'der', type: 'spki' }).export({ format: 'pem', type: 'spki' }).toString();
}
const paserkOf = (raw: Buffer) => `k4.public.${raw.toString('base64url')}`;
/** k4.pid as PASERK defines it, computed here rather than by the code under test. */
const pidOf = (paserk: string) => `k4.pid.${Buffer.from(blake2b(Buffer.from(`k4.pid.${paserk}`), { dkLen: 33 })).toString('base64url')}`;

t.test('401 unauthorized: no token, a wrong token, or another scheme', async (t) => {
  const required = { error: 'unauthorized', message: 'An admin token is required (Authorization: Bearer <token>).' };
  const invalid = { error: 'unauthorized', message: 'The admin token is not valid.' };
  const unread = (why: string) => ({ error: 'unauthorized', message: `No admin token was read: ${why} (Authorization: Bearer <token>).` });
  const check = async (path: string, method = 'GET', body?: unknown) => {
    const asks = [
      [n.admin.request(method, path, { body }), required],
      [n.admin.request(method, path, { body, headers: { authorization: `Basic ${TOKENS.operator}` } }), unread("the Authorization header's scheme is not Bearer")],
      [n.admin.request(method, path, { body, headers: { authorization: `Bearer ${TOKENS.operator} ${TOKENS.operator}` } }), unread('the Authorization header has more than one word after Bearer')],
      [n.admin.request(method, path, { body, token: 'not-a-token' }), invalid],
      [n.admin.request(method, path, { body, token: `${TOKENS.operator}x` }), invalid],
    ] as const;
    for (const [p, expected] of asks) {
      const r = await p;
      contract('admin', method, path, r);
      isError(t, r, 401, expected);
      t.equal(r.headers['www-authenticate'], 'Bearer', 'with the challenge of its scheme');
    }
  };
  const before = await digest();
  await check('/admin/v1/cluster');
  await check('/admin/v1/log/export');
  await check('/admin/v1/parties', 'POST', { id: 'party_intruder' });
  await check('/admin/v1/policies/pol_1/activate', 'POST', {});
  t.equal((await digest()).digest, before.digest, 'nothing was written');
  const lower = await n.admin.request('GET', '/admin/v1/cluster', { headers: { authorization: `bearer ${TOKENS.operator}` } });
  t.equal(lower.status, 200, 'the scheme is case-insensitive');
});

t.test('403 forbidden: a principal without the role the operation needs', async (t) => {
  await refused(t, 'reviewer', 'POST', '/admin/v1/parties', { id: 'party_x' }, 403, { error: 'forbidden', message: 'bob may not do AddParty (it needs the operator role).' });
  await refused(t, 'reviewer', 'POST', '/admin/v1/trust-roots', { issuer: 'x', public_key: n.issuer.paserk }, 403, { error: 'forbidden', message: 'bob may not do AddTrustRoot (it needs the operator or author role).' });
  await refused(t, 'approver', 'DELETE', `/admin/v1/trust-roots/${n.issuer.name}`, undefined, 403, { error: 'forbidden', message: 'carol may not do RemoveTrustRoot (it needs the operator or author role).' });
  await refused(t, 'author', 'DELETE', `/admin/v1/agents/${encodeURIComponent(AGENT_A)}`, undefined, 403, { error: 'forbidden', message: 'alice may not do UnbindAgent (it needs the operator role).' });
  await refused(t, 'operator', 'POST', '/admin/v1/policies', { id: 'pol_ops', bundle: POLICY }, 403, { error: 'forbidden', message: 'ops may not do DraftPolicy (it needs the author role).' });
  await refused(t, 'author', 'POST', '/admin/v1/policies/pol_1/review', {}, 403, { error: 'forbidden', message: 'alice may not do ReviewPolicy (it needs the reviewer role).' });
  await refused(t, 'operator', 'POST', '/admin/v1/policies/pol_1/approve', {}, 403, { error: 'forbidden', message: 'ops may not do ApprovePolicy (it needs the approver role).' });
  await refused(t, 'author', 'POST', '/admin/v1/policies/pol_1/activate', {}, 403, { error: 'forbidden', message: 'alice may not do ActivatePolicy (it needs the operator or approver role).' });
  await refused(t, 'reviewer', 'POST', '/admin/v1/cluster/transfer-leadership', { to: 'n1' }, 403, { error: 'forbidden', message: 'bob may not transfer leadership (it needs the operator role).' });
});

t.test('four eyes: no one reviews their own draft or approves what they reviewed, even holding every role', async (t) => {
  const bundle = { rules: [{ id: 'R-all', modality: 'permission', priority: 1, match: { action: 'purchase.*' }, basis: 'Everything' }] };
  const draft = await n.adm('multi', 'POST', '/admin/v1/policies', { id: 'pol_dana', bundle });
  t.equal(draft.status, 201);
  t.match(draft.body, { id: 'pol_dana', state: 'draft', author: 'dana', reviewer: null, approver: null, activated_at_tick: null });
  await refused(t, 'multi', 'POST', '/admin/v1/policies/pol_dana/review', {}, 403, { error: 'forbidden', message: 'The reviewer of policy pol_dana must not be its author (dana).' });

  t.equal((await n.adm('author', 'POST', '/admin/v1/policies', { id: 'pol_alice', bundle })).status, 201);
  const reviewed = await n.adm('multi', 'POST', '/admin/v1/policies/pol_alice/review', { comment: 'rules read right' });
  t.equal(reviewed.status, 200);
  t.match(reviewed.body, { state: 'reviewed', reviewer: 'dana', history: [{ action: 'draft', by: 'alice' }, { action: 'review', by: 'dana', comment: 'rules read right' }] });
  await refused(t, 'multi', 'POST', '/admin/v1/policies/pol_alice/approve', {}, 403, {
    error: 'forbidden', message: 'The approver of policy pol_alice must be neither its author (alice) nor its reviewer (dana).',
  });
  await refused(t, 'approver', 'POST', '/admin/v1/policies/pol_dana/activate', {}, 409, {
    error: 'invalid_transition', message: 'Policy pol_dana is draft; only a policy that is approved can become active.', id: 'pol_dana', state: 'draft',
  });
  await refused(t, 'approver', 'POST', '/admin/v1/policies/pol_alice/activate', undefined, 409, {
    error: 'invalid_transition', message: 'Policy pol_alice is reviewed; only a policy that is approved can become active.', id: 'pol_alice', state: 'reviewed',
  });
  await refused(t, 'approver', 'POST', '/admin/v1/policies/pol_dana/approve', {}, 409, {
    error: 'invalid_transition', message: 'Policy pol_dana is draft; only a policy that is reviewed can become approved.', id: 'pol_dana', state: 'draft',
  });
  await refused(t, 'reviewer', 'POST', '/admin/v1/policies/pol_alice/review', {}, 409, {
    error: 'invalid_transition', message: 'Policy pol_alice is reviewed; only a policy that is draft can become reviewed.', id: 'pol_alice', state: 'reviewed',
  });
  await refused(t, 'reviewer', 'POST', '/admin/v1/policies/pol_nope/review', {}, 404, { error: 'unknown_policy', message: 'No policy pol_nope exists.', id: 'pol_nope' });

  const approved = await n.adm('approver', 'POST', '/admin/v1/policies/pol_alice/approve');
  t.equal(approved.status, 200, 'an empty body is an empty request');
  t.match(approved.body, { state: 'approved', author: 'alice', reviewer: 'dana', approver: 'carol' });
  const list = await n.adm('reviewer', 'GET', '/admin/v1/policies');
  t.equal(list.body.active, 'pol_1', 'approving is not activating');
  t.strictSame(list.body.policies.map((p: { id: string; state: string }) => [p.id, p.state]), [['pol_1', 'active'], ['pol_alice', 'approved'], ['pol_dana', 'draft']], 'in id order');
  t.equal(list.body.next, null);
});

t.test('409 already_exists names the id; nothing is overwritten', async (t) => {
  const exists = (what: string, id: string) => ({ error: 'already_exists', message: `${what} ${id} already exists.`, id });
  const other = await Issuer.create(n.issuer.name);
  await refused(t, 'operator', 'POST', '/admin/v1/trust-roots', { issuer: n.issuer.name, public_key: other.paserk }, 409, exists('Trust root', n.issuer.name));
  await refused(t, 'operator', 'POST', '/admin/v1/parties', { id: 'party_acme' }, 409, exists('Party', 'party_acme'));
  await refused(t, 'operator', 'POST', '/admin/v1/agents', { agent: AGENT_A, party: 'party_globex' }, 409, exists('Agent binding', AGENT_A));
  await refused(t, 'operator', 'POST', '/admin/v1/accounts', { id: 'acc_acme_cash' }, 409, exists('Account', 'acc_acme_cash'));
  await refused(t, 'operator', 'POST', '/admin/v1/usages', { id: 'usage_acme_llm', currency: 'EUR' }, 409, exists('Usage balance', 'usage_acme_llm'));
  await refused(t, 'author', 'POST', '/admin/v1/policies', { id: 'pol_1', bundle: { rules: [] } }, 409, exists('Policy', 'pol_1'));
  const ok = await n.api('POST', '/api/v1/intents', { body: envelope(att, { transaction: 'txn_adm_after_exists', minor: 10 }) });
  t.equal(ok.body.verdict, 'Permitted', 'the original trust root and binding still stand');
});

t.test('404 unknown_party: bindings, accounts and usage balances name a party that must exist', async (t) => {
  const missing = { error: 'unknown_party', message: 'No party party_nope exists.', id: 'party_nope' };
  await refused(t, 'operator', 'POST', '/admin/v1/agents', { agent: 'agent://x.example/agent/a', party: 'party_nope' }, 404, missing);
  await refused(t, 'operator', 'POST', '/admin/v1/accounts', { id: 'acc_orphan', party: 'party_nope' }, 404, missing);
  await refused(t, 'operator', 'POST', '/admin/v1/usages', { id: 'usage_orphan', currency: 'USD', owner: 'party_nope' }, 404, missing);
});

t.test('400 invalid_policy: a bad bundle is refused at drafting with each issue', async (t) => {
  const before = await digest();
  const empty = await n.adm('author', 'POST', '/admin/v1/policies', { id: 'pol_empty', bundle: { rules: [] } });
  isError(t, empty, 400, { error: 'invalid_policy', message: 'Policy pol_empty is not valid: rules must hold at least one rule', issues: [{ path: 'rules', message: 'rules must hold at least one rule' }] });
  const badOp = await n.adm('author', 'POST', '/admin/v1/policies', {
    id: 'pol_badop', bundle: { rules: [{ id: 'R-x', modality: 'prohibition', priority: 1, match: { action: 'purchase.*' }, when: [{ left: 'amount', op: 'roughly', right: '5', currency: 'USD' }], basis: 'x' }] },
  });
  t.equal(badOp.status, 400);
  t.equal(badOp.body.error, 'invalid_policy');
  t.match(badOp.body.message, /^Policy pol_badop is not valid: /);
  t.ok(badOp.body.issues.length >= 1);
  t.ok(badOp.body.issues.every((i: { path: string; message: string }) => typeof i.path === 'string' && i.message.length > 0), 'each issue has a path and a message');
  t.ok(badOp.body.issues.some((i: { path: string }) => i.path.startsWith('rules.0.when.0')), 'the issue points at the condition');
  // An integer beyond 2^53 where an operator goes: its message once threw at the commit
  // point, which halted the replica at that entry for good.
  for (const [path, bundle] of [
    ['rules.0.when.0.op', { rules: [{ id: 'R-x', modality: 'permission', priority: 1, match: { action: '*' }, when: [{ left: 'amount', op: 9007199254740993n, right: '1', currency: 'USD' }], basis: 'b' }] }],
    ['rules.0.obligations.0.discharge_when.0.op', { rules: [{ id: 'R-x', modality: 'permission', priority: 1, match: { action: '*' }, basis: 'b', obligations: [{ id: 'O-1', action: 'receipt.attach', deadline_ticks: 5, discharge_when: [{ left: 'amount', op: 2n ** 127n, right: '1', currency: 'USD' }] }] }] }],
  ] as const) {
    const big = await n.adm('author', 'POST', '/admin/v1/policies', { id: 'pol_bigop', bundle });
    t.equal(big.status, 400, `an integer as ${path}`);
    t.equal(big.body.error, 'invalid_policy');
    t.ok(big.body.issues.some((i: { path: string; message: string }) => i.path === path && / is not an operator /.test(i.message)), JSON.stringify(big.body.issues));
    t.equal((await n.api('GET', '/readyz')).status, 200, 'and the node goes on');
  }
  // A left side that names what every object has (constructor) once answered 500 here.
  const ctor = await n.adm('author', 'POST', '/admin/v1/policies', {
    id: 'pol_ctor', bundle: { rules: [{ id: 'R-x', modality: 'permission', priority: 1, match: { action: '*' }, basis: 'b', when: [{ left: 'constructor', op: 'eq', right: 'x' }] }] },
  });
  t.equal(ctor.status, 400, 'a left side named constructor');
  t.equal(ctor.body.error, 'invalid_policy');
  t.ok(ctor.body.issues.some((i: { path: string }) => i.path === 'rules.0.when.0.left'), JSON.stringify(ctor.body.issues));
  // Text the chain hashes in its RFC 8785 form is Unicode: a lone surrogate has no such form.
  const unicode = 'must be Unicode text, which a lone surrogate (an escape such as \\ud800 without its pair) is not';
  isError(t, await n.adm('author', 'POST', '/admin/v1/policies', {
    id: 'pol_lone', bundle: { rules: [{ id: 'R-x', modality: 'permission', priority: 1, match: { action: '*' }, basis: 'all \ud800' }] },
  }), 400, { error: 'invalid_policy', message: `Policy pol_lone is not valid: rules.0.basis ${unicode}`, issues: [{ path: 'rules.0.basis', message: unicode }] });
  const loneKey = await n.adm('author', 'POST', '/admin/v1/policies', { id: 'pol_lone', bundle: { rules: [], '\udc00': 1 } });
  t.same(loneKey.body.issues, [{ path: '\\udc00', message: `its name ${unicode}` }], 'a name is text too, named by its escape so that the answer is Unicode text');
  isError(t, await n.adm('author', 'POST', '/admin/v1/policies', { id: 'pol_none' }), 400, {
    error: 'malformed_request', message: 'The policy is not valid.', issues: [{ path: 'bundle', message: 'is required' }],
  });
  isError(t, await n.adm('author', 'POST', '/admin/v1/policies', { id: 'pol_null', bundle: null }), 400, {
    error: 'invalid_policy', message: 'Policy pol_null is not valid: the bundle: must be an object', issues: [{ path: '', message: 'the bundle: must be an object' }],
  });
  const lower = 'rule R-x: currency is never "usd": it is always a currency code (3 to 12 capitals or digits, starting with a capital, as USD)';
  isError(t, await n.adm('author', 'POST', '/admin/v1/policies', {
    id: 'pol_lower', bundle: { rules: [{ id: 'R-x', modality: 'permission', priority: 1, match: { action: '*' }, when: [{ left: 'currency', op: 'eq', right: 'usd' }], basis: 'b' }] },
  }), 400, { error: 'invalid_policy', message: `Policy pol_lower is not valid: ${lower}`, issues: [{ path: 'rules.0.when.0.right', message: lower }] });
  const both = await n.adm('author', 'POST', '/admin/v1/policies', {
    id: 'pol_both', bundle: { rules: [{ id: 'R-x', modality: 'permission', priority: 1, match: { action: '*' }, when: [{ left: 'currency', op: 'eq', right: 'usd' }, { left: 'amount', op: 'gt', right: 1 }], basis: 'b' }] },
  });
  t.same(both.body.issues, [{ path: 'rules.0.when.1.currency', message: 'rule R-x: a condition on amount names its currency' }, { path: 'rules.0.when.0.right', message: lower }], 'listed after what else is wrong');
  t.equal((await digest()).digest, before.digest, 'no draft was recorded');
  isError(t, await n.adm('author', 'GET', '/admin/v1/policies/pol_empty'), 404, { error: 'unknown_policy', message: 'No policy pol_empty exists.' });
});

t.test('400 malformed_request: bodies and path parameters are held to the log\'s schemas; the node keeps serving', async (t) => {
  const invalid = (what: string, issues: { path: string; message: string }[]) => ({ error: 'malformed_request', message: `The ${what} is not valid.`, issues });
  await refused(t, 'operator', 'POST', '/admin/v1/parties', { id: 'party acme' }, 400, invalid('party', [{ path: 'id', message: 'must be a party id (<id>; a letter or digit, then letters, digits and _ . : -, 128 characters at most)' }]));
  // Reads hold their path to the same schemas as the writes that create what they read.
  await refused(t, 'operator', 'GET', '/admin/v1/usages/nope', undefined, 400, invalid('path', [{ path: 'id', message: 'must be a usage-balance id (usage_<id>; a letter or digit, then letters, digits and _ . : -, 128 characters at most)' }]));
  await refused(t, 'operator', 'GET', '/admin/v1/accounts/%00', undefined, 400, invalid('path', [{ path: 'id', message: 'must be an account id (acc_<id>; a letter or digit, then letters, digits and _ . : -, 128 characters at most)' }]));
  await refused(t, 'operator', 'GET', '/admin/v1/policies/bad%20id', undefined, 400, invalid('path', [{ path: 'id', message: 'must be a policy id (<id>; a letter or digit, then letters, digits and _ . : -, 128 characters at most)' }]));
  await refused(t, 'operator', 'POST', '/admin/v1/policies/bad%20id/dry-run', {}, 400, invalid('path', [{ path: 'id', message: 'must be a policy id (<id>; a letter or digit, then letters, digits and _ . : -, 128 characters at most)' }]));
  const host = new URL(n.node.adminUrl).host;
  const twice = await getText('/admin/v1/parties', TOKENS.operator, ['host', host, 'authorization', `Bearer ${TOKENS.operator}`, 'authorization', 'Bearer not-a-token']);
  t.equal(twice.status, 400, 'Authorization sent twice: which one was meant is a guess');
  t.same(JSON.parse(twice.text), { error: 'malformed_request', message: 'The Authorization header was sent more than once; send it once.' });
  const hostless = await getText('/admin/v1/parties', TOKENS.operator, ['authorization', `Bearer ${TOKENS.operator}`]);
  t.equal(hostless.status, 400, 'HTTP/1.1 without Host');
  t.same(JSON.parse(hostless.text), { error: 'malformed_request', message: 'The request has no Host header, which HTTP/1.1 requires.' });
  const twoHosts = await getText('/admin/v1/parties', TOKENS.operator, ['host', host, 'Host', 'elsewhere.example', 'authorization', `Bearer ${TOKENS.operator}`]);
  t.equal(twoHosts.status, 400, 'Host sent twice (RFC 9112 §3.2)');
  t.same(JSON.parse(twoHosts.text), { error: 'malformed_request', message: 'The Host header was sent more than once; send it once.' });
  await refused(t, 'operator', 'POST', '/admin/v1/parties', { id: 'p', extra: true }, 400, invalid('party', [{ path: '', message: 'unknown field "extra"' }]));
  await refused(t, 'operator', 'POST', '/admin/v1/parties', undefined, 400, invalid('party', [{ path: '', message: 'is required' }]));
  await refused(t, 'operator', 'POST', '/admin/v1/agents', { agent: 'buyer-7', party: 'party_acme' }, 400, invalid('agent binding', [{ path: 'agent', message: 'must be an agent URI (agent://<authority>/agent/<agent_id>, the agent id 1 to 128 of A-Z a-z 0-9 . _ ~ -)' }]));
  await refused(t, 'operator', 'POST', '/admin/v1/agents', { agent: `agent://acme.example/agent/${'b'.repeat(1000)}`, party: 'party_acme' }, 400,
    invalid('agent binding', [{ path: 'agent', message: 'must be an agent URI of at most 512 characters' }]));
  await refused(t, 'operator', 'POST', '/admin/v1/agents', { agent: 'agent://ACME.example/agent/buyer-7', party: 'party_globex' }, 400,
    invalid('agent binding', [{ path: 'agent', message: 'must write its host in lower case (a host is the same in any case, so two spellings would name one agent)' }]));
  await refused(t, 'operator', 'POST', '/admin/v1/usages', { id: 'usage_x', currency: 'usd' }, 400, invalid('usage balance', [{ path: 'currency', message: 'must be a currency code (e.g. USD)' }]));
  await refused(t, 'operator', 'DELETE', '/admin/v1/trust-roots/bad%20issuer', undefined, 400, invalid('path', [{ path: 'issuer', message: 'must be an issuer name (letters, digits, _ . : -)' }]));
  await refused(t, 'operator', 'DELETE', '/admin/v1/agents/not-a-uri', undefined, 400, invalid('path', [{ path: 'agent_uri', message: 'must be an agent URI (agent://<authority>/agent/<agent_id>, the agent id 1 to 128 of A-Z a-z 0-9 . _ ~ -)' }]));
  // A route that takes no body refuses one rather than act without it. (Node.js's
  // client sends a DELETE's body with no length unless it is given, as curl gives it.)
  for (const [method, path, raw] of [
    ['DELETE', `/admin/v1/agents/${encodeURIComponent(AGENT_A)}`, '{"party":"party_acme"}'],
    ['DELETE', '/admin/v1/trust-roots/acme-agents', '{}'],
    ['POST', '/admin/v1/cluster/members/n1/promote', '{"id":"n1"}'],
  ] as const) {
    const before = await digest();
    const r = await n.admin.request(method, path, { token: TOKENS.operator, raw, headers: { 'content-type': 'application/json', 'content-length': String(raw.length) } });
    isError(t, r, 400, { error: 'malformed_request', message: `${method} ${path} takes no body; send it without one.` });
    t.equal((await digest()).digest, before.digest, 'nothing was removed');
  }
  await refused(t, 'reviewer', 'POST', '/admin/v1/policies/bad%20id/review', {}, 400, invalid('path', [{ path: 'id', message: 'must be a policy id (<id>; a letter or digit, then letters, digits and _ . : -, 128 characters at most)' }]));
  await refused(t, 'reviewer', 'POST', '/admin/v1/policies/pol_1/review', { comment: 7 }, 400, invalid('review request', [{ path: 'comment', message: 'must be a string' }]));
  await refused(t, 'reviewer', 'POST', '/admin/v1/policies/pol_1/review', { comment: 'ok \ud800' }, 400,
    invalid('review request', [{ path: 'comment', message: 'must be Unicode text, which a lone surrogate (an escape such as \\ud800 without its pair) is not' }]));
  // A body may be left out; a body of null is not an object, as [] and 7 are not.
  await refused(t, 'reviewer', 'POST', '/admin/v1/policies/pol_1/review', null, 400, invalid('review request', [{ path: '', message: 'must be an object' }]));
  await refused(t, 'author', 'POST', '/admin/v1/policies/pol_1/dry-run', null, 400, invalid('dry-run request', [{ path: '', message: 'must be an object' }]));
  await refused(t, 'operator', 'GET', '/admin/v1/accounts/%ZZ', undefined, 400, { error: 'malformed_request', message: 'The request path is not valid percent-encoding.' });

  const raw = await n.admin.request('POST', '/admin/v1/policies', { token: TOKENS.author, raw: '{"id":"pol_inf","bundle":{"rules":[],"x":1e400}}' });
  contract('admin', 'POST', '/admin/v1/policies', raw);
  isError(t, raw, 400, { error: 'malformed_request', message: 'The body holds a number too large to represent.', issues: [{ path: 'bundle.x', message: 'is too large to represent' }] });
  const text = await n.admin.request('POST', '/admin/v1/parties', { token: TOKENS.operator, raw: '{"id":"party_t"}', headers: { 'content-type': 'text/plain' } });
  isError(t, text, 400, { error: 'malformed_request', message: 'The body must be JSON (Content-Type: application/json).' });
  const big = await n.adm('author', 'POST', '/admin/v1/policies', { id: 'pol_big', bundle: { rules: [], pad: 'x'.repeat(n.config.limits.body_bytes_max) } });
  isError(t, big, 413, { error: 'payload_too_large', message: `The body is larger than the ${n.config.limits.body_bytes_max} bytes this node accepts (limits.body_bytes_max).` });

  const ready = await n.api('GET', '/readyz');
  t.equal(ready.status, 200, 'no input reached the log that the log could not read back');
  t.equal((await n.adm('operator', 'POST', '/admin/v1/parties', { id: 'party_after_bad_input' })).status, 201, 'and it still writes');
});

t.test('admin reads take consistency=local, refuse any other value, and say how they were served', async (t) => {
  const reads = ['/admin/v1/trust-roots', '/admin/v1/parties', '/admin/v1/agents', '/admin/v1/policies', '/admin/v1/policies/pol_1', '/admin/v1/accounts/acc_acme_cash', '/admin/v1/usages/usage_acme_llm', '/admin/v1/log/digest', '/admin/v1/log/export'];
  for (const path of reads) {
    t.equal((await n.adm('operator', 'GET', path)).headers.consistency, 'linearizable', path);
    const local = await n.adm('operator', 'GET', `${path}?consistency=local`);
    t.equal(local.status, 200, `${path}?consistency=local`);
    t.equal(local.headers.consistency, 'local');
    isError(t, await n.adm('operator', 'GET', `${path}?consistency=bogus`), 400, { error: 'malformed_request', message: 'The query is not valid.', issues: [{ path: 'consistency', message: 'must be linearizable or local' }] });
  }
  const from = await n.adm('operator', 'GET', '/admin/v1/log/export?from=-1');
  t.equal(from.status, 400, 'the export takes no other parameter: an auditor resuming is told so, not sent everything');
  const dry = await n.adm('operator', 'POST', '/admin/v1/policies/pol_1/dry-run?consistency=local', { limit: 1 });
  t.equal(dry.headers.consistency, 'local', 'a dry run is a read too');
});

t.test('an author registers and removes a trust root as an operator does (EXAMPLES: "operator or author token")', async (t) => {
  const platform = await Issuer.create('author-agents');
  const added = await n.adm('author', 'POST', '/admin/v1/trust-roots', { issuer: platform.name, public_key: platform.paserk });
  t.equal(added.status, 201);
  t.strictSame(added.body, { issuer: platform.name, key_id: pidOf(platform.paserk) });
  const removed = await n.adm('author', 'DELETE', `/admin/v1/trust-roots/${platform.name}`);
  t.equal(removed.status, 200);
  const list = await n.adm('author', 'GET', '/admin/v1/trust-roots');
  t.notOk(list.body.trust_roots.some((r: { issuer: string }) => r.issuer === platform.name), 'and it is gone');
});

t.test('trust roots: PEM and PASERK keys, key_id the PASERK k4.pid, list and removal', async (t) => {
  // PASERK's k4.pid-2 vector is checked in attest.test.ts: its key is no point of the
  // curve, so the node refuses it. Here, one key sent both ways has one id.
  const both = await Issuer.create('both-ways');
  const bothRaw = Buffer.from(both.paserk.slice('k4.public.'.length), 'base64url');
  const asPaserk = await n.adm('operator', 'POST', '/admin/v1/trust-roots', { issuer: 'key-paserk', public_key: paserkOf(bothRaw) });
  t.equal(asPaserk.status, 201);
  t.strictSame(asPaserk.body, { issuer: 'key-paserk', key_id: pidOf(both.paserk) });
  const asPem = await n.adm('operator', 'POST', '/admin/v1/trust-roots', { issuer: 'key-pem', public_key: pemOf(bothRaw) });
  t.strictSame(asPem.body, { issuer: 'key-pem', key_id: pidOf(both.paserk) }, 'the same key as PEM has the same id');

  // A PEM-registered issuer's attestations verify.
  const pemIssuer = await Issuer.create('pem-agents');
  const pemRaw = Buffer.from(pemIssuer.paserk.slice('k4.public.'.length), 'base64url');
  const added = await n.adm('operator', 'POST', '/admin/v1/trust-roots', { issuer: 'pem-agents', public_key: pemOf(pemRaw) });
  t.strictSame(added.body, { issuer: 'pem-agents', key_id: pidOf(pemIssuer.paserk) });
  const token = await pemIssuer.sign(AGENT_A);
  const ok = await n.api('POST', '/api/v1/intents', { body: envelope(token, { transaction: 'txn_adm_pem', minor: 10 }) });
  t.equal(ok.body.verdict, 'Permitted');
  t.equal(ok.body.provenance.authority.issuer, 'pem-agents');

  const list = await n.adm('reviewer', 'GET', '/admin/v1/trust-roots');
  t.equal(list.status, 200);
  const pem = list.body.trust_roots.find((r: { issuer: string }) => r.issuer === 'pem-agents');
  t.strictSame(pem, { issuer: 'pem-agents', key_id: pidOf(pemIssuer.paserk), public_key: pemIssuer.paserk }, 'stored as PASERK');

  const { publicKey: rsa } = generateKeyPairSync('rsa', { modulusLength: 1024 });
  const invalid = (message: string) => ({ error: 'malformed_request', message: 'The trust root is not valid.', issues: [{ path: 'public_key', message }] });
  await refused(t, 'operator', 'POST', '/admin/v1/trust-roots', { issuer: 'rsa', public_key: rsa.export({ format: 'pem', type: 'spki' }).toString() }, 400, invalid('is a rsa key; v4.public needs Ed25519'));
  await refused(t, 'operator', 'POST', '/admin/v1/trust-roots', { issuer: 'junk', public_key: 'hello' }, 400, invalid('is neither a PEM public key nor a PASERK k4.public key'));
  await refused(t, 'operator', 'POST', '/admin/v1/trust-roots', { issuer: 'short', public_key: 'k4.public.AAAA' }, 400, invalid('is not a PASERK k4.public key'));
  // 32 zero bytes: a point of order 4, which no private key stands behind; y = 2: no point at all.
  const SMALL_ORDER = 'is a point of small order, which no private key stands behind: no token signed for it could ever be verified';
  await refused(t, 'operator', 'POST', '/admin/v1/trust-roots', { issuer: 'zero', public_key: `k4.public.${'A'.repeat(43)}` }, 400, invalid(SMALL_ORDER));
  const spki = (key: string) => `-----BEGIN PUBLIC KEY-----\n${Buffer.concat([Buffer.from('302a300506032b6570032100', 'hex'), Buffer.from(key, 'hex')]).toString('base64')}\n-----END PUBLIC KEY-----\n`;
  await refused(t, 'operator', 'POST', '/admin/v1/trust-roots', { issuer: 'identity', public_key: spki(`01${'00'.repeat(31)}`) }, 400, invalid(SMALL_ORDER));
  await refused(t, 'operator', 'POST', '/admin/v1/trust-roots', { issuer: 'offcurve', public_key: `k4.public.${Buffer.from(`02${'00'.repeat(31)}`, 'hex').toString('base64url')}` }, 400, invalid('is not a point of the Ed25519 curve'));

  const removed = await n.adm('operator', 'DELETE', '/admin/v1/trust-roots/pem-agents');
  t.equal(removed.status, 200);
  t.strictSame(removed.body, { issuer: 'pem-agents', key_id: pidOf(pemIssuer.paserk) });
  const refusedIntent = await n.api('POST', '/api/v1/intents', { body: envelope(token, { transaction: 'txn_adm_pem_after', minor: 10 }) });
  isError(t, refusedIntent, 403, { error: 'attestation', message: 'The attestation was rejected: its issuer is not a trust root.' });
  await refused(t, 'operator', 'DELETE', '/admin/v1/trust-roots/pem-agents', undefined, 404, { error: 'unknown_trust_root', message: 'No trust root pem-agents is registered.' });
});

t.test('agent bindings: bind, list, unbind by URL-encoded URI; an unbound agent is 401', async (t) => {
  const agent = 'agent://acme.example:8443/agent/night-shift';
  const bound = await n.adm('operator', 'POST', '/admin/v1/agents', { agent, party: 'party_acme' });
  t.equal(bound.status, 201);
  t.strictSame(bound.body, { agent, party: 'party_acme' });
  const list = await n.adm('author', 'GET', '/admin/v1/agents');
  t.ok(list.body.agents.some((b: { agent: string; party: string }) => b.agent === agent && b.party === 'party_acme'));

  const token = await n.issuer.sign(agent);
  const env = envelope(token, { agent, transaction: 'txn_adm_night_1', minor: 10 });
  t.equal((await n.api('POST', '/api/v1/intents', { body: env })).body.verdict, 'Permitted');

  const unbound = await n.adm('operator', 'DELETE', `/admin/v1/agents/${encodeURIComponent(agent)}`);
  t.equal(unbound.status, 200);
  t.strictSame(unbound.body, { agent, party: null });
  isError(t, await n.api('POST', '/api/v1/intents', { body: { ...env, transaction: 'txn_adm_night_2' } }), 401, { error: 'unknown_agent', message: `The agent ${agent} is not bound to a party.` });
  isError(t, await n.api('GET', '/api/v1/usages/usage_acme_llm', { token }), 401, { error: 'unknown_agent', message: `The agent ${agent} is not bound to a party.` });
  await refused(t, 'operator', 'DELETE', `/admin/v1/agents/${encodeURIComponent(agent)}`, undefined, 404, { error: 'unknown_binding', message: `The agent ${agent} is not bound.` });
  t.equal((await n.adm('operator', 'POST', '/admin/v1/agents', { agent, party: 'party_globex' })).status, 201, 'it may be bound again, to another party');
});

t.test('parties, accounts and usage balances: create and the admin reads, which are not party-scoped', async (t) => {
  t.strictSame((await n.adm('operator', 'POST', '/admin/v1/parties', { id: 'party_initech' })).body, { id: 'party_initech' });
  t.ok((await n.adm('reviewer', 'GET', '/admin/v1/parties')).body.parties.some((p: { id: string }) => p.id === 'party_initech'));

  const acc = await n.adm('operator', 'POST', '/admin/v1/accounts', { id: 'acc_initech_cash', party: 'party_initech' });
  t.equal(acc.status, 201);
  t.strictSame(acc.body, { account: 'acc_initech_cash', party: 'party_initech', balances: [] });
  const house = await n.adm('operator', 'POST', '/admin/v1/accounts', { id: 'acc_clearing' });
  t.strictSame(house.body, { account: 'acc_clearing', party: null, balances: [] });
  const sentBack = await n.adm('operator', 'POST', '/admin/v1/accounts', { id: 'acc_clearing_2', party: null });
  t.strictSame(sentBack.body, { account: 'acc_clearing_2', party: null, balances: [] }, 'a null party, as the read prints it, is no party');
  const read = await n.adm('approver', 'GET', '/admin/v1/accounts/acc_acme_cash');
  t.equal(read.status, 200);
  t.equal(read.body.party, 'party_acme');
  isError(t, await n.adm('approver', 'GET', '/admin/v1/accounts/acc_nope'), 404, { error: 'unknown_account', message: 'No account acc_nope exists.' });

  const usage = await n.adm('operator', 'POST', '/admin/v1/usages', { id: 'usage_initech_gpu', currency: 'EUR', owner: 'party_initech' });
  t.equal(usage.status, 201);
  t.strictSame(usage.body, {
    usage: 'usage_initech_gpu', currency: 'EUR', consumed: 0, metered: 0, billed: 0, unmetered: 0, unbilled: 0, reconciled: true,
    text: 'Usage balance usage_initech_gpu (EUR): 0 consumed, 0 metered, 0 billed. Everything consumed is metered and billed. Reconciled.', owner: 'party_initech',
  });
  const other = await n.adm('reviewer', 'GET', '/admin/v1/usages/usage_globex_llm');
  t.equal(other.body.owner, 'party_globex', 'any party\'s balance, with its owner');
  t.equal((await n.adm('reviewer', 'GET', '/admin/v1/usages/usage_unowned')).body.owner, null);
  const nullOwner = await n.adm('operator', 'POST', '/admin/v1/usages', { id: 'usage_house_null', currency: 'USD', owner: null });
  t.equal(nullOwner.status, 201, 'a null owner, as the read prints it, is no owner');
  t.equal((await n.adm('reviewer', 'GET', '/admin/v1/usages/usage_house_null')).body.owner, null);
  isError(t, await n.adm('reviewer', 'GET', '/admin/v1/usages/usage_nope'), 404, { error: 'unknown_usage', message: 'No usage balance usage_nope exists.' });

  const pol = await n.adm('operator', 'GET', '/admin/v1/policies/pol_1');
  t.match(pol.body, { id: 'pol_1', state: 'active', author: 'alice', reviewer: 'bob', approver: 'carol', bundle: POLICY });
  t.strictSame(pol.body.history.map((h: { action: string; by: string }) => [h.action, h.by]), [['draft', 'alice'], ['review', 'bob'], ['approve', 'carol'], ['activate', 'carol']]);
});

t.test('dry run: which recorded verdicts a draft would change, read-only', async (t) => {
  for (const [id, minor] of [['txn_adm_dry_small', 100], ['txn_adm_dry_large', 300000]] as const) {
    t.equal((await n.api('POST', '/api/v1/intents', { body: envelope(att, { transaction: id, minor }) })).body.verdict, 'Permitted');
  }
  const strict = { rules: [
    { id: 'R-cap-strict', modality: 'prohibition', priority: 10, match: { action: 'purchase.*' }, when: [{ left: 'amount', op: 'gt', right: '200000', currency: 'USD' }], basis: 'Purchases above 2,000.00 USD are forbidden' },
    { id: 'R-purchase', modality: 'permission', priority: 100, match: { action: 'purchase.*' }, basis: 'Agents may purchase' },
  ] };
  t.equal((await n.adm('author', 'POST', '/admin/v1/policies', { id: 'pol_strict', bundle: strict })).status, 201);
  const before = await digest();
  const run = await n.adm('reviewer', 'POST', '/admin/v1/policies/pol_strict/dry-run', { limit: 2 });
  t.equal(run.status, 200);
  t.strictSame(run.body, {
    policy: 'pol_strict', bundle_hash: run.body.bundle_hash, evaluated: 2, unchanged: 1, decided_by_obligations: 0,
    changed: [{ transaction: 'txn_adm_dry_large', party: 'party_acme', recorded: 'Permitted', would_be: 'ForbiddenRejected', winning_rule: 'R-cap-strict', basis: 'Purchase of 300000 USD minor units exceeds the 200000 limit of rule R-cap-strict' }],
    refused: [],
    next_before: run.body.next_before,
  });
  const small = (await n.api('GET', '/api/v1/transactions/txn_adm_dry_small', { token: att })).body.provenance.log_index;
  t.equal(run.body.next_before, small, 'the page ends at the older of the two; the next page is before it');
  const older = await n.adm('reviewer', 'POST', '/admin/v1/policies/pol_strict/dry-run', { limit: 1, before: run.body.next_before });
  t.equal(older.status, 200);
  t.ok(older.body.evaluated + older.body.decided_by_obligations === 1, 'the next page judges one intent recorded before');
  t.notOk(older.body.changed.some((c: { transaction: string }) => c.transaction.startsWith('txn_adm_dry')), 'and neither of the two already judged');
  const all = await n.adm('reviewer', 'POST', '/admin/v1/policies/pol_strict/dry-run');
  t.ok(all.body.evaluated >= 2, 'the default looks further back');
  t.equal((await digest()).digest, before.digest, 'a dry run writes nothing');
  isError(t, await n.adm('reviewer', 'POST', '/admin/v1/policies/pol_nope/dry-run', {}), 404, { error: 'unknown_policy', message: 'No policy pol_nope exists.' });
  isError(t, await n.adm('reviewer', 'POST', '/admin/v1/policies/pol_strict/dry-run', { limit: 0 }), 400, {
    error: 'malformed_request', message: 'The dry-run request is not valid.', issues: [{ path: 'limit', message: 'must be an integer from 1 to 1000' }],
  });
  isError(t, await n.adm('reviewer', 'POST', '/admin/v1/policies/pol_strict/dry-run', { limit: 1001 }), 400, {
    error: 'malformed_request', message: 'The dry-run request is not valid.', issues: [{ path: 'limit', message: 'must be an integer from 1 to 1000' }],
  });
});

t.test('lists come in pages: at most limit items, and a cursor to the next page', async (t) => {
  for (const id of ['party_page_a', 'party_page_b', 'party_page_c']) t.equal((await n.adm('operator', 'POST', '/admin/v1/parties', { id })).status, 201);
  const seen: string[] = [];
  let after: string | null = null;
  let pages = 0;
  do {
    const r: Response = await n.adm('reviewer', 'GET', `/admin/v1/parties?limit=2${after === null ? '' : `&after=${encodeURIComponent(after)}`}`);
    t.equal(r.status, 200);
    t.ok(r.body.parties.length <= 2);
    seen.push(...r.body.parties.map((p: { id: string }) => p.id));
    after = r.body.next;
    pages++;
  } while (after !== null && pages < 100);
  t.ok(['party_page_a', 'party_page_b', 'party_page_c'].every((id) => seen.includes(id)), 'every party is on some page');
  t.equal(new Set(seen).size, seen.length, 'and on one page only');
  t.strictSame(seen, [...seen].sort(), 'in id order');
  t.ok(pages >= 2, `${pages} pages`);
  isError(t, await n.adm('reviewer', 'GET', '/admin/v1/parties?limit=0'), 400, { error: 'malformed_request', message: 'The query is not valid.', issues: [{ path: 'limit', message: 'must be an integer from 1 to 1000' }] });
  isError(t, await n.adm('reviewer', 'GET', '/admin/v1/agents?limit=5000'), 400, { error: 'malformed_request', message: 'The query is not valid.', issues: [{ path: 'limit', message: 'must be an integer from 1 to 1000' }] });
  isError(t, await n.adm('reviewer', 'GET', '/admin/v1/parties?limit=1&limit=2'), 400, { error: 'malformed_request', message: 'The query is not valid.', issues: [{ path: 'limit', message: 'is given more than once; give it once' }] });
  isError(t, await n.adm('reviewer', 'GET', '/admin/v1/policies?page=2'), 400, { error: 'malformed_request', message: 'The query is not valid.', issues: [{ path: '', message: 'unknown field "page"' }] });
  // A cursor is an id of what the list holds; one that could be none is refused, not read as a position.
  for (const [list, bad, what] of [
    ['parties', 'party%20page', 'a party id'], ['trust-roots', '%2Fetc', 'an issuer name'],
    ['agents', 'party_page_a', 'an agent URI'], ['policies', '', 'a policy id'],
  ] as const) {
    isError(t, await n.adm('reviewer', 'GET', `/admin/v1/${list}?after=${bad}`), 400, {
      error: 'malformed_request', message: 'The query is not valid.', issues: [{ path: 'after', message: `must be the next of a previous page (${what})` }],
    });
  }
  const past = await n.adm('reviewer', 'GET', '/admin/v1/parties?after=party_page_b');
  t.equal(past.status, 200, 'an id that names no page boundary is still a position in id order');
  t.ok(past.body.parties.every((p: { id: string }) => p.id > 'party_page_b'));
});

t.test('a mutation sent with a query is refused, not applied with the query ignored', async (t) => {
  const q = (message: string) => ({ error: 'malformed_request', message });
  await refused(t, 'operator', 'POST', '/admin/v1/parties?upsert=true', { id: 'party_query' }, 400, q('POST /admin/v1/parties takes no query parameters; remove "upsert".'));
  t.notOk((await n.adm('operator', 'GET', '/admin/v1/parties?limit=1000')).body.parties.some((p: { id: string }) => p.id === 'party_query'), 'the party was not created');
  await refused(t, 'operator', 'POST', '/admin/v1/policies/pol_1/review?force=1&as=bob', {}, 400, q('POST /admin/v1/policies/pol_1/review takes no query parameters; remove "force", "as".'));
  await refused(t, 'operator', 'DELETE', '/admin/v1/trust-roots/agents?cascade', undefined, 400, q('DELETE /admin/v1/trust-roots/agents takes no query parameters; remove "cascade".'));
  await refused(t, 'operator', 'POST', '/admin/v1/cluster/members/n9/promote?now=1', undefined, 400, q('POST /admin/v1/cluster/members/n9/promote takes no query parameters; remove "now".'));
  // A dry run reads: it takes consistency as the other reads do.
  const dry = await n.adm('author', 'POST', '/admin/v1/policies/pol_1/dry-run?consistency=local', {});
  t.equal(dry.status, 200);
  t.equal(dry.headers.consistency, 'local');
});

t.test('GET /admin/v1/cluster reports the single member', async (t) => {
  const r = await n.adm('reviewer', 'GET', '/admin/v1/cluster');
  t.equal(r.status, 200);
  const { term, commit_index, applied_index } = r.body;
  t.ok(term >= 1);
  t.equal(applied_index, commit_index, 'everything committed is applied');
  t.strictSame(r.body, {
    node: 'n1', role: 'leader', term, leader: 'n1', commit_index, applied_index, voters: ['n1'], learners: [], removed: [],
    members: [{ id: 'n1', agent_url: n.node.agentUrl, admin_url: n.node.adminUrl, peer_addr: null, role: 'leader', voter: true, match_index: commit_index, lag: 0, reachable: true }],
  });
  // It is this member's own view, always: it takes no consistency, nor any other parameter.
  isError(t, await n.adm('reviewer', 'GET', '/admin/v1/cluster?consistency=local'), 400, { error: 'malformed_request', message: 'GET /admin/v1/cluster takes no query parameters; remove "consistency".' });
});

t.test('transfer-leadership on a group of one: to itself changes nothing (200), to a stranger is 409', async (t) => {
  const self = await n.adm('operator', 'POST', '/admin/v1/cluster/transfer-leadership', { to: 'n1' });
  t.equal(self.status, 200);
  t.strictSame(self.body, { leader: 'n1', transferring_to: null });
  await refused(t, 'operator', 'POST', '/admin/v1/cluster/transfer-leadership', { to: 'n9' }, 409, { error: 'invalid_transition', message: 'n9 is not a voter of the group (voters: n1).', id: 'n9' });
  await refused(t, 'operator', 'POST', '/admin/v1/cluster/transfer-leadership', { to: '' }, 400, {
    error: 'malformed_request', message: 'The transfer request is not valid.', issues: [{ path: 'to', message: 'must be a member id' }],
  });
  await refused(t, 'operator', 'POST', '/admin/v1/cluster/transfer-leadership', {}, 400, {
    error: 'malformed_request', message: 'The transfer request is not valid.', issues: [{ path: 'to', message: 'is required' }],
  });
  const cluster = await n.adm('operator', 'GET', '/admin/v1/cluster');
  t.equal(cluster.body.role, 'leader', 'still the primary');
  const write = await n.api('POST', '/api/v1/intents', { body: envelope(att, { transaction: 'txn_adm_after_transfer', minor: 10 }) });
  t.equal(write.body.verdict, 'Permitted', 'and it still takes writes');
});

t.test('membership changes on a group of one: refused with the reason, and bad input changes nothing', async (t) => {
  const before = await digest();
  await refused(t, 'operator', 'POST', '/admin/v1/cluster/members', { id: 'n2', peer_addr: '127.0.0.1:7444', agent_url: 'https://127.0.0.1:8444' }, 409, {
    error: 'invalid_transition', message: 'A standalone node has no cluster membership to change: run members with peers (docs/cluster.md).',
  });
  await refused(t, 'operator', 'POST', '/admin/v1/cluster/members', { id: 'n1', peer_addr: '127.0.0.1:7444', agent_url: 'https://127.0.0.1:8444' }, 409, {
    error: 'already_exists', message: 'n1 is already a member of the cluster.', id: 'n1',
  });
  await refused(t, 'operator', 'POST', '/admin/v1/cluster/members', { id: 'N 2', peer_addr: 'nowhere', agent_url: 'x' }, 400, {
    error: 'malformed_request', message: 'The member request is not valid.', issues: [
      { path: 'id', message: 'must be a node id (lowercase letters, digits and -, at most 32)' },
      { path: 'peer_addr', message: 'must be host:port, the port from 1 to 65535' },
      { path: 'agent_url', message: 'must be an https URL (https://<host>:<port>): the planes speak https only' },
    ],
  });
  // Addresses that can never be reached: the id would be spent on them for good.
  await refused(t, 'operator', 'POST', '/admin/v1/cluster/members', { id: 'n7', peer_addr: '127.0.0.1:99999', agent_url: 'ftp://x', admin_url: 'http://127.0.0.1:9447' }, 400, {
    error: 'malformed_request', message: 'The member request is not valid.', issues: [
      { path: 'peer_addr', message: 'must be host:port, the port from 1 to 65535' },
      { path: 'agent_url', message: 'must be an https URL (https://<host>:<port>): the planes speak https only' },
      { path: 'admin_url', message: 'must be an https URL (https://<host>:<port>): the planes speak https only' },
    ],
  });
  await refused(t, 'operator', 'POST', '/admin/v1/cluster/members', { id: 'n7', peer_addr: 'h:0', agent_url: 'https://h:8447?x=1' }, 400, {
    error: 'malformed_request', message: 'The member request is not valid.', issues: [
      { path: 'peer_addr', message: 'must be host:port, the port from 1 to 65535' },
      { path: 'agent_url', message: 'must be an https URL (https://<host>:<port>): the planes speak https only' },
    ],
  });
  await refused(t, 'operator', 'POST', '/admin/v1/cluster/members/n7/promote', undefined, 404, {
    error: 'not_found', message: 'n7 is not a member of the cluster; add it first (POST /admin/v1/cluster/members).', id: 'n7',
  });
  await refused(t, 'operator', 'POST', '/admin/v1/cluster/members/n1/promote', undefined, 409, { error: 'invalid_transition', message: 'n1 is already a voter.', id: 'n1' });
  await refused(t, 'operator', 'DELETE', '/admin/v1/cluster/members/n7', undefined, 404, { error: 'not_found', message: 'n7 is not a member of the cluster.', id: 'n7' });
  for (const [method, path] of [['DELETE', '/admin/v1/cluster/members/n7'], ['POST', '/admin/v1/cluster/members/n7/promote']] as const) {
    await refused(t, 'author', method, path, undefined, 403, { error: 'forbidden', message: 'alice may not change the cluster\'s membership (it needs the operator role).' });
  }
  t.equal((await digest()).digest, before.digest, 'nothing was recorded');
  t.same((await n.adm('operator', 'GET', '/admin/v1/cluster')).body.voters, ['n1'], 'the member list is unchanged');
});

t.test('every admin mutation goes through the log with its principal; the digest moves only when something took effect', async (t) => {
  const before = await digest();
  t.strictSame(Object.keys(before).sort(), ['applied_index', 'digest', 'state_hash', 'tick']);
  t.equal((await n.adm('operator', 'POST', '/admin/v1/parties', { id: 'party_logged' })).status, 201);
  const after = await digest();
  t.ok(after.applied_index > before.applied_index, 'the applied index advanced');
  t.not(after.digest, before.digest);
  t.not(after.state_hash, before.state_hash);
  const log = await getText('/admin/v1/log/export', TOKENS.reviewer);
  const last = parseJson(log.text.trimEnd().split('\n').at(-1)!) as { index: number; op: { type: string; by: unknown; id: string }; entry_hash: string };
  t.match(last, { index: after.applied_index, op: { type: 'AddParty', id: 'party_logged', by: { name: 'ops', roles: ['operator'] } }, entry_hash: after.digest });
});

t.test('GET /admin/v1/log/export re-verifies with verifyExport to the digest and state hash the node reports', async (t) => {
  const secret = 'A justification that must never reach the log';
  const w = await n.api('POST', '/api/v1/intents', { body: envelope(att, { transaction: 'txn_adm_audit', minor: 10, justification: secret }) });
  t.equal(w.status, 200);
  const d = await digest();
  const r = await getText('/admin/v1/log/export', TOKENS.approver);
  t.equal(r.status, 200);
  t.equal(r.headers['content-type'], 'application/x-ndjson; charset=utf-8');
  const v = verifyExport(r.text);
  if (!v.ok) throw new Error(`export does not verify at line ${v.line}: ${v.reason}`);
  t.equal(v.digest, d.digest, 'the export leads to the reported digest');
  t.equal(v.state_hash, d.state_hash, 'and to the reported state hash');
  t.equal(v.applied, d.applied_index);
  t.notOk(r.text.includes(secret), 'the justification text is not in the log');
  t.notOk(r.text.includes(att), 'nor the attestation');
  t.ok(r.text.includes(w.body.justification_hash), 'only its hash');

  const tampered = r.text.replace('"party_globex"', '"party_globez"');
  t.equal(verifyExport(tampered).ok, false, 'a changed byte does not verify');
});

t.test('GET /metrics: Prometheus text with the intents counter', async (t) => {
  const r = await n.admin.request('GET', '/metrics');
  contract('admin', 'GET', '/metrics', r);
  t.equal(r.status, 200);
  t.match(r.headers['content-type'], /^text\/plain; version=0\.0\.4; charset=utf-8$/);
  t.match(r.text, /^# HELP apl_intents_total Intents judged at the commit point, by verdict or error code\.$/m);
  t.match(r.text, /^# TYPE apl_intents_total counter$/m);
  const permitted = /^apl_intents_total\{outcome="Permitted"\} (\d+)$/m.exec(r.text);
  t.ok(permitted && Number(permitted[1]) >= 5, 'the Permitted intents of this file are counted');
  t.match(r.text, /^apl_http_requests_total\{plane="admin",route="\/admin\/v1\/parties",status="201"\} \d+$/m);
  t.match(r.text, /^apl_raft_is_leader 1$/m);
  const count = (pattern: string) => Number(new RegExp(`^${pattern} (\\d+)$`, 'm').exec(r.text)?.[1] ?? 0);
  for (const stage of ['prefetch', 'apply', 'store_write']) {
    t.ok(count(`apl_apply_stage_duration_seconds_count\\{stage="${stage}"\\}`) >= 5, `each batch's ${stage} is timed`);
  }
  t.ok(count('apl_raft_ready_duration_seconds_count') >= 5, 'each Ready is timed');
  t.notMatch(r.text, new RegExp(TOKENS.operator), 'no token in the metrics');
});

t.test('GET /admin/openapi.json serves the committed document with this node\'s own address in servers, without a token', async (t) => {
  const r = await n.admin.request('GET', '/admin/openapi.json');
  contract('admin', 'GET', '/admin/openapi.json', r);
  t.equal(r.status, 200);
  t.equal(r.headers['content-type'], JSON_TYPE);
  const committed = parseJson(readFileSync(OPENAPI_FILES.admin, 'utf8')) as { servers: { url: string }[] };
  t.strictSame(r.body.servers, [{ url: n.node.adminUrl, description: 'The node that served this document.' }]);
  t.not(n.node.adminUrl, committed.servers[0]!.url, 'the node listens on a port of its own, not the development default');
  t.strictSame({ ...r.body, servers: committed.servers }, committed, 'everything but servers is the committed contract');
  const client = new Client(r.body.servers[0].url, testCerts().ca);
  t.teardown(() => client.close());
  t.equal((await client.request('GET', '/admin/openapi.json')).text, r.text, 'the address advertised serves this very document');
});

t.test('unknown admin routes are 404 not_found behind the token; known ones asked with another method 405', async (t) => {
  isError(t, await n.adm('operator', 'GET', '/admin/v1/nothing'), 404, { error: 'not_found', message: 'No route GET /admin/v1/nothing.' });
  const put = await n.adm('operator', 'PUT', '/admin/v1/parties');
  isError(t, put, 405, { error: 'method_not_allowed', message: '/admin/v1/parties answers GET, HEAD, POST, not PUT.' });
  t.equal(put.headers.allow, 'GET, HEAD, POST');
  isError(t, await n.adm('operator', 'GET', '/admin/v1/policies/pol_1/review'), 405, { error: 'method_not_allowed', message: '/admin/v1/policies/pol_1/review answers POST, not GET.' });
  isError(t, await n.adm('operator', 'GET', '/api/v1/obligations'), 404, { error: 'not_found', message: 'No route GET /api/v1/obligations; this is the admin plane: the agent routes are served on the agent plane (agent_port, 8443 by default).' });
  const anonymous = await n.admin.request('GET', '/admin/v1/nothing');
  t.equal(anonymous.status, 401, 'without a token the plane says nothing about its routes');
});

t.test('activation supersedes the policy in force; agents then pin the new one', async (t) => {
  const bundle = { rules: [...POLICY.rules, { id: 'R-evidence', modality: 'prohibition', priority: 20, match: { action: 'purchase.*' }, when: [{ left: 'evidence', op: 'count_lte', right: 0 }], basis: 'No purchase without evidence' }] };
  t.equal((await n.adm('author', 'POST', '/admin/v1/policies', { id: 'pol_2', bundle })).status, 201);
  t.equal((await n.adm('reviewer', 'POST', '/admin/v1/policies/pol_2/review', {})).status, 200);
  t.equal((await n.adm('approver', 'POST', '/admin/v1/policies/pol_2/approve', {})).status, 200);
  const active = await n.adm('operator', 'POST', '/admin/v1/policies/pol_2/activate', { comment: 'evidence is required from now on' });
  t.equal(active.status, 200);
  t.match(active.body, { id: 'pol_2', state: 'active', activated_at_tick: 0, history: [{}, {}, {}, { action: 'activate', by: 'ops', comment: 'evidence is required from now on' }] });
  const old = await n.adm('operator', 'GET', '/admin/v1/policies/pol_1');
  t.match(old.body, { state: 'superseded', superseded_at_tick: 0 });
  t.match(old.body.history.at(-1), { action: 'supersede', by: 'ops', comment: 'superseded by pol_2' });

  const stale = await n.api('POST', '/api/v1/intents', { body: envelope(att, { transaction: 'txn_adm_pin', minor: 10 }) });
  isError(t, stale, 409, { error: 'stale_policy', message: 'The pinned policy pol_1 is not the policy in force (pol_2).', pinned: 'pol_1', active: 'pol_2' });
  const repinned = await n.api('POST', '/api/v1/intents', { body: envelope(att, { transaction: 'txn_adm_pin', minor: 10, policy: 'pol_2', evidence: [] }) });
  t.match(repinned.body, { verdict: 'ForbiddenRejected', policy: 'pol_2', provenance: { winning_rule: 'R-evidence' } });
  const withEvidence = await n.api('POST', '/api/v1/intents', { body: envelope(att, { transaction: 'txn_adm_pin_2', minor: 10, policy: 'pol_2', evidence: [EVIDENCE] }) });
  t.equal(withEvidence.body.verdict, 'Permitted');
  const b = await n.issuer.sign(AGENT_B);
  t.equal((await n.api('GET', '/api/v1/policies/active', { token: b })).body.id, 'pol_2', 'every agent reads the new policy');
});
