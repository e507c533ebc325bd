// Proves that the SDK pages through every list route of a live node holding more
// items than one page: each list method answers the page `limit` and `after` ask for,
// with its `next`; each `all...` iterator yields every item once, in order, across
// pages; a limit the node would refuse is refused before any request is sent.
import t from 'tap';
import { readFileSync } from 'node:fs';
import { AdminClient, AgentClient, PAGE_LIMIT_MAX, pages } from '@apl/client';
import { AGENT_A, EVIDENCE, TOKENS, bootstrap, startTestNode, testCerts, type TestNode } from './support/node.js';

let n: TestNode;
let admin: AdminClient;
let agent: AgentClient;
/** More parties than the node's default page of 100. */
const PARTIES = Array.from({ length: 105 }, (_, i) => `party_page_${String(i).padStart(3, '0')}`);

const collect = async <T>(it: AsyncIterable<T>): Promise<T[]> => {
  const out: T[] = [];
  for await (const x of it) out.push(x);
  return out;
};

t.before(async () => {
  n = await startTestNode();
  await bootstrap(n);
  const ca = readFileSync(testCerts().ca);
  admin = new AdminClient({ url: n.node.adminUrl, ca, token: TOKENS.operator });
  agent = new AgentClient({ url: n.node.agentUrl, ca, attestation: await n.issuer.sign(AGENT_A) });
  for (const id of PARTIES) await admin.addParty({ id });
  for (let i = 0; i < 3; i++) await admin.bindAgent({ agent: `agent://page.example/agent/${i}`, party: PARTIES[i]! });
  for (let i = 0; i < 2; i++) await admin.addTrustRoot({ issuer: `page-issuer-${i}`, public_key: n.issuer.paserk });
  for (let i = 0; i < 5; i++) {
    await agent.submitIntent({
      entries: [
        { account: 'acc_acme_cash', side: 'Debit', amount: { minor: 100n, currency: 'USD' } },
        { account: 'acc_merchant_books', side: 'Credit', amount: { minor: 100n, currency: 'USD' } },
      ],
      action: { action: 'purchase.book', bindings: {} }, evidence: [EVIDENCE], justification: `purchase ${i}, owing a receipt`,
    });
  }
});
t.teardown(async () => {
  admin.close();
  agent.close();
  await n.close();
});

t.test('a list answers the node\'s default page of 100 and the cursor of the next; after it, the rest', async (t) => {
  const first = await admin.listParties();
  t.equal(first.parties.length, 100);
  t.type(first.next, 'string');
  const rest = await admin.listParties({ after: first.next! });
  t.equal(rest.next, null, 'the last page');
  const ids = [...first.parties, ...rest.parties].map((p) => p.id);
  t.same(ids, [...ids].sort(), 'in id order');
  t.same(new Set(ids).size, ids.length, 'no party twice');
  t.ok(PARTIES.every((p) => ids.includes(p)), 'every party is on a page');
});

t.test('allParties walks every page, whatever its size', async (t) => {
  const everyOne = (await admin.listParties({ limit: PAGE_LIMIT_MAX })).parties.map((p) => p.id);
  t.equal(everyOne.length, PARTIES.length + 2, 'the bootstrap\'s two parties and ours');
  t.same((await collect(admin.allParties())).map((p) => p.id), everyOne, 'pages of 100');
  t.same((await collect(admin.allParties({ limit: 7 }))).map((p) => p.id), everyOne, 'pages of 7');
  const page = await admin.listParties({ limit: 50 });
  t.same((await collect(admin.allParties({ after: page.next! }))).map((p) => p.id), everyOne.slice(50), 'from a cursor on');
});

t.test('trust roots, bindings and policies page the same way', async (t) => {
  const roots = await admin.listTrustRoots({ limit: 2 });
  t.equal(roots.trust_roots.length, 2);
  t.type(roots.next, 'string');
  t.same((await collect(admin.allTrustRoots({ limit: 1 }))).map((r) => r.issuer), ['acme-agents', 'page-issuer-0', 'page-issuer-1']);
  t.match((await collect(admin.allTrustRoots({ limit: 1 })))[0], { issuer: 'acme-agents', public_key: n.issuer.paserk });
  const bindings = await collect(admin.allAgents({ limit: 2 }));
  t.equal(bindings.length, 5, 'the bootstrap\'s two and our three');
  t.same(bindings.map((b) => b.agent), [...bindings.map((b) => b.agent)].sort());
  const policies = await admin.listPolicies({ limit: 1, consistency: 'local' });
  t.match(policies, { active: 'pol_1', policies: [{ id: 'pol_1' }], next: null });
});

t.test('the agent\'s obligations page, and allObligations walks them', async (t) => {
  const page = await agent.listObligations({ state: 'open', limit: 2 });
  t.equal(page.obligations.length, 2);
  t.type(page.next, 'string');
  const next = await agent.listObligations({ state: 'open', limit: 2, after: page.next!, consistency: 'local' });
  t.equal(next.obligations.length, 2);
  t.notOk(next.obligations.some((o) => page.obligations.some((p) => p.id === o.id)), 'the next page goes on');
  const all = await collect(agent.allObligations({ state: 'open', limit: 2 }));
  t.equal(all.length, 5, 'one receipt owed per purchase');
  t.same(new Set(all.map((o) => o.id)).size, 5, 'each once');
  t.same(all.slice(0, 4).map((o) => o.id), [...page.obligations, ...next.obligations].map((o) => o.id), 'in the pages\' order');
  const owed = await collect(agent.allObligations());
  t.same(owed.map((o) => o.id).sort(), all.map((o) => o.id).sort(), 'owed by default: the open ones');
  // The node answers what is owed whole, and refuses a page of it (400): said before any request.
  const whole = /^limit and after page the states open, breached, discharged and all; what is owed \(the default state\) is answered whole$/;
  await t.rejects(agent.listObligations({ limit: 2 }), { name: 'RangeError', message: whole }, 'a limit with the default state');
  await t.rejects(agent.listObligations({ state: 'owed', after: 'obl_x' }), { name: 'RangeError', message: whole }, 'an after with owed');
  await t.rejects(collect(agent.allObligations({ limit: 5 })), { name: 'RangeError', message: whole });
});

t.test('a limit out of 1..1000 is refused before any request', async (t) => {
  for (const limit of [0, 1001, 2.5, Number.NaN]) {
    await t.rejects(admin.listParties({ limit }), { name: 'RangeError', message: `limit must be an integer from 1 to 1000, not ${limit}` });
    await t.rejects(collect(admin.allAgents({ limit })), RangeError);
    await t.rejects(agent.listObligations({ limit }), RangeError);
  }
});

t.test('pages refuses to follow a cursor that does not move on', async (t) => {
  const stuck = pages(async () => ({ items: [1], next: 'c1' }), (p) => p.items, 'c1');
  await t.rejects(collect(stuck), /answered the cursor c1 as its own next page/);
});
