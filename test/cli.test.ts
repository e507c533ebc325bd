// Proves the apl command line, run as a person or a script would run it (a child
// process of bin/apl.mjs) against a live development node on free ports of
// 127.0.0.1: dev init bootstraps it in one step and twice is harmless; agent attest
// signs with the issuer key it is given, never silently with another; agent
// commands submit and read, with --json parsed back losslessly; every admin route
// has its command; apl log verify passes, and fails (exit 6) on a tampered export;
// apl feed tail prints the change feed, filtered, and follows the log until Ctrl-C;
// and failures exit with the documented codes and say what to do next.
import t from 'tap';
import { spawn } from 'node:child_process';
import { createPrivateKey, createPublicKey, generateKeyPairSync, verify } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseJson } from '@apl/client';
import { EXIT } from '@apl/cli';
import { APL, devNodeFixture, withoutApl } from './support/apl.js';
import { testCerts } from './support/node.js';
import { startProxy } from './support/proxy.js';
import { REPO } from './support/process.js';

// About 130 child processes, one after another, each starting Node.js (0.3 to 0.6 s
// each under tap): 53 s alone on two CPUs of an AMD EPYC at 2.1 GHz, and 85 to 125 s
// beside another test file in a suite run, which the former limit of 120 s cut short.
t.setTimeout(300_000);

const { dir, node, apl } = devNodeFixture(t, 'apl-cli-');

/** Runs apl --json and parses its one document losslessly. */
async function json(args: string[], env: Record<string, string> = {}): Promise<{ code: number | null; body: any; stderr: string }> {
  const r = await apl(['--json', ...args], env);
  return { code: r.code, body: parseJson(r.stdout), stderr: r.stderr };
}

let attestation = '';

t.test('apl dev init bootstraps the node in one step, and a second run changes nothing', async (t) => {
  const r = await apl(['dev', 'init']);
  t.equal(r.code, EXIT.ok, r.stderr);
  for (const line of [/issuer key\s+\S+issuer-key\.pem\s+made\s+apl/, /trust root\s+acme-agents\s+made\s+dev-author/, /agent binding\s+agent:\/\/acme\.example\/agent\/buyer-7 -> party_acme\s+made/,
    /usage balance\s+usage_acme_llm \(USD\)\s+made/, /policy review\s+pol_2026_11\s+made\s+dev-reviewer/, /policy activation\s+pol_2026_11\s+made\s+dev-approver/]) {
    t.match(r.stdout, line);
  }
  const again = await json(['dev', 'init']);
  t.equal(again.code, EXIT.ok);
  t.equal(again.body.made.length, 11);
  t.same([...new Set(again.body.made.map((m: { status: string }) => m.status))], ['exists'], 'everything was there');
  const a = await apl(['agent', 'attest']);
  t.equal(a.code, EXIT.ok, a.stderr);
  attestation = a.stdout.trim();
  t.match(attestation, /^v4\.public\./);
  t.equal(a.stderr, '', 'no warning on the way');
});

t.test('apl agent attest signs with the issuer key it is given; --key, the client certificate\'s, is refused there', async (t) => {
  const devKey = join(dir, 'issuer', 'issuer-key.pem');
  const other = join(dir, 'other-issuer.pem');
  writeFileSync(other, generateKeyPairSync('ed25519').privateKey.export({ type: 'pkcs8', format: 'pem' }));
  const given = await apl(['agent', 'attest', '--issuer-key', other]);
  t.equal(given.code, EXIT.ok, given.stderr);
  t.ok(signedBy(given.stdout.trim(), other), 'signed with the key given');
  t.notOk(signedBy(given.stdout.trim(), devKey), 'not with the development issuer\'s');
  t.ok(signedBy(attestation, devKey), 'without --issuer-key: the development issuer\'s');
  const key = await apl(['agent', 'attest', '--key', other]);
  t.equal(key.code, EXIT.usage, 'apl\'s --key is not taken for the issuer\'s');
  t.equal(key.stdout, '', 'and nothing is signed');
  t.match(key.stderr, /^apl: --key is the key of a client certificate \(--cert\), not the issuer's key\.\n {2}Give the issuer's private key with --issuer-key <pem>\./);
  const withCert = await apl(['agent', 'attest', '--key', other], { APL_CERT: join(dir, 'client.pem'), APL_KEY: join(dir, 'client-key.pem') });
  t.equal(withCert.code, EXIT.usage, 'refused too where a client certificate is configured, whose --key it would have set');
  t.equal(withCert.stdout, '');
  const envKey = await apl(['agent', 'attest', '--issuer-key', other], { APL_KEY: join(dir, 'client-key.pem') });
  t.equal(envKey.code, EXIT.ok, `APL_KEY in the environment, for the admin plane, is no such mistake: ${envKey.stderr}`);
  t.ok(signedBy(envKey.stdout.trim(), other));
  const ec = join(dir, 'ec.pem');
  writeFileSync(ec, generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey.export({ type: 'pkcs8', format: 'pem' }));
  const wrongKind = await apl(['agent', 'attest', '--issuer-key', ec]);
  t.equal(wrongKind.code, EXIT.usage);
  t.match(wrongKind.stderr, /^apl: The issuer key \S+ec\.pem is an EC key, not Ed25519\.\n {2}An issuer key is an Ed25519 private key in PEM/);
});

/** Whether a v4.public token's signature is the key's: Ed25519 over PAE("v4.public.", message, footer, ""). */
function signedBy(token: string, keyFile: string): boolean {
  const [, , body, footer = ''] = token.split('.');
  const raw = Buffer.from(body!, 'base64url');
  const pieces = [Buffer.from('v4.public.'), raw.subarray(0, -64), Buffer.from(footer, 'base64url'), Buffer.alloc(0)];
  const le64 = (n: number) => {
    const b = Buffer.alloc(8);
    b.writeBigUInt64LE(BigInt(n));
    return b;
  };
  const pae = Buffer.concat([le64(pieces.length), ...pieces.flatMap((p) => [le64(p.length), p])]);
  return verify(null, pae, createPublicKey(createPrivateKey(readFileSync(keyFile))), raw.subarray(-64));
}

t.test('submit and read as the agent, with --json parsed back', async (t) => {
  const env = { APL_ATTESTATION: attestation };
  const s = await json(['agent', 'submit', '--file', 'docs/examples/intent.json'], env);
  t.equal(s.code, EXIT.ok, s.stderr);
  t.match(s.body, { transaction: 'txn_01JD7Y3K', verdict: 'Permitted', posted: true, policy: 'pol_2026_11', attempts: 1, replayed: false });
  const again = await apl(['agent', 'submit', '--file', 'docs/examples/intent.json'], env);
  t.match(again.stdout, /^Permitted  posted  txn_01JD7Y3K\n[^]*replayed\s+yes: this transaction id was recorded before/);
  const tx = await json(['agent', 'tx', 'txn_01JD7Y3K'], env);
  t.equal(tx.body.consume_usage.amount.minor, 18446744073709551621n, 'beyond 2^64, exact');
  t.equal(BigInt(tx.body.entries[0].amount.minor), 129900n, 'a small amount is a bare number too');
  const txText = await apl(['agent', 'tx', 'txn_01JD7Y3K'], env);
  t.match(txText.stdout, /\nentries:\n[^]*acc_acme_cash\s+Debit\s+129900\s+USD\n[^]*\nusage moves:\n\s+move\s+usage\s+minor units\s+currency\n\s+consume\s+usage_acme_llm\s+18446744073709551621\s+USD\n/, 'the text shows the usage moves beside the legs');
  t.match(txText.stdout, /\nowed at tick \d+, when it was recorded \(apl agent obligations says what is owed now\):\n\s+obligation\s+action[^\n]*\n\s+obl_txn_01JD7Y3K_O-receipt\s+receipt\.attach/, 'what the party owed is said to be as it was when recorded');
  t.match(s.body.obligations_pending, [{ id: 'obl_txn_01JD7Y3K_O-receipt' }]);
  const u = await json(['agent', 'usage', 'usage_acme_llm'], env);
  t.equal(u.body.consumed, 18446744073709551621n);
  t.equal(u.body.billed, 0);
  const text = await apl(['agent', 'usage', 'usage_acme_llm', '--format', 'text'], env);
  t.equal(text.stdout, 'Usage balance usage_acme_llm (USD): 18446744073709551621 consumed, 0 metered, 0 billed. 18446744073709551621 consumed but not yet metered; 0 metered but not yet billed. Not reconciled.\n');
  const human = await apl(['agent', 'usage', 'usage_acme_llm'], env);
  t.match(human.stdout, /consumed\s+18446744073709551621/);
  const ob = await apl(['agent', 'obligations'], env);
  t.match(ob.stdout, /party_acme at tick \d+, owed:\nobligation\s+action\s+state[^]*obl_txn_01JD7Y3K_O-receipt\s+receipt\.attach\s+open/);
  const bal = await json(['agent', 'balance', 'acc_acme_cash'], env);
  t.same(bal.body.balances, [{ currency: 'USD', debits: 129900, credits: 0, net: 129900 }]);
  const pol = await apl(['agent', 'policy'], env);
  t.match(pol.stdout, /policy\s+pol_2026_11 \(active\)[^]*R-cap-large\s+prohibition\s+10\s+purchase\.\*/);
  const flags = await json(['agent', 'submit', '--action', 'receipt.attach', '--binding', 'obligation=obl_txn_01JD7Y3K_O-receipt', '--evidence', '3a7bd3e2360a3d29eea436fcfb7e44c735d117c42d1c1835420b6b9942dd4f1b', '--justification', 'The receipt'], env);
  t.match(flags.body, { verdict: 'Permitted', provenance: { obligations_discharged: ['obl_txn_01JD7Y3K_O-receipt'] } }, 'an intent from flags alone');
});

t.test('an address that is not an https URL is a usage error naming its flag, not a bug', async (t) => {
  for (const [args, env, says] of [
    [['--admin-url', 'http://127.0.0.1:9443', 'admin', 'party', 'list'], {}, 'apl: --admin-url (APL_ADMIN_URL): http://127.0.0.1:9443 is not https; the ledger is reached over https only.'],
    [['--admin-url', 'notaurl', 'log', 'digest'], {}, 'apl: --admin-url (APL_ADMIN_URL): "notaurl" is not a URL.'],
    [['admin', 'party', 'list'], { APL_ADMIN_URL: 'ftp://x' }, 'apl: --admin-url (APL_ADMIN_URL): ftp://x is not https; the ledger is reached over https only.'],
    [['--agent-url', 'http://127.0.0.1:8443', 'agent', 'policy'], { APL_ATTESTATION: 'v4.public.x' }, 'apl: --agent-url (APL_AGENT_URL): http://127.0.0.1:8443 is not https; the ledger is reached over https only.'],
    [['--admin-url', ' , ', 'log', 'digest'], {}, 'apl: --admin-url (APL_ADMIN_URL) names no address.'],
  ] as const) {
    const r = await apl([...args], { ...env });
    t.equal(r.code, EXIT.usage, args.join(' '));
    t.equal(r.stderr.split('\n')[0], says);
    t.notMatch(r.stderr, /a bug|at .*\.js:/, 'no stack trace');
  }
});

t.test('a refusal exits 3, a refused request 4 with its code, a missing attestation 2', async (t) => {
  const env = { APL_ATTESTATION: attestation };
  const forbidden = await apl(['agent', 'submit', '--file', 'docs/examples/intent.json', '--transaction', 'txn_01JD7Y4Q', '--debit', 'acc_acme_cash:700000:USD', '--credit', 'acc_merchant_books:700000:USD'], env);
  t.equal(forbidden.code, EXIT.refused);
  t.match(forbidden.stdout, /^ForbiddenRejected  not posted  txn_01JD7Y4Q\n[^]*basis\s+Purchase of 700000 USD minor units exceeds the 500000 limit of rule R-cap-large/);
  const chain = await json(['agent', 'submit', '--transaction', 'txn_01JD7Y6S', '--action', 'purchase.book', '--binding', 'merchant=books-r-us', '--justification', 'Metering more than was consumed',
    '--debit', 'acc_acme_cash:100:USD', '--credit', 'acc_merchant_books:100:USD', '--meter', 'usage_acme_llm:18446744073709551622:USD'], env);
  t.equal(chain.code, EXIT.rejected);
  t.match(chain.body.error, {
    code: 'substrate_rejected', status: 422, body: { kind: 'validation' },
    message: 'Metering 18446744073709551622 would bring the metered total to 18446744073709551622, above the 18446744073709551621 consumed; 0 is already metered and 18446744073709551621 is consumed but not yet metered.',
  });
  const none = await apl(['agent', 'usage', 'usage_acme_llm']);
  t.equal(none.code, EXIT.usage);
  t.match(none.stderr, /needs an attestation[^]*--attestation or APL_ATTESTATION; `apl agent attest` mints/);
  const hidden = await apl(['agent', 'usage', 'usage_globex_llm'], env);
  t.equal(hidden.code, EXIT.rejected);
  t.match(hidden.stderr, /^apl: No usage balance usage_globex_llm is visible to this agent\.\n  Check the id/);
  const stranger = await apl(['agent', 'policy'], { APL_ATTESTATION: 'v4.public.bm90IGEgdG9rZW4' });
  t.equal(stranger.code, EXIT.rejected);
  t.match(stranger.stderr, /Mint a fresh attestation/);
});

t.test('every admin route has its command', async (t) => {
  const key = join(dir, 'issuer/issuer.pub.pem');
  const steps: [string[], RegExp | null][] = [
    [['admin', 'trust-root', 'add', 'other-issuer', key], /trust root\s+other-issuer\nkey id\s+k4\.pid\./],
    [['admin', 'trust-root', 'list'], /acme-agents\s+k4\.pid\.[^]*other-issuer/],
    [['admin', 'trust-root', 'remove', 'other-issuer'], /removed trust root other-issuer/],
    [['admin', 'party', 'add', 'party_cli'], /party party_cli/],
    [['admin', 'party', 'list'], /party_acme[^]*party_cli/],
    [['admin', 'agent', 'bind', 'agent://cli.example/agent/a', 'party_cli'], /agent:\/\/cli\.example\/agent\/a -> party_cli/],
    [['admin', 'agent', 'list'], /agent:\/\/cli\.example\/agent\/a\s+party_cli/],
    [['admin', 'agent', 'unbind', 'agent://cli.example/agent/a'], /is unbound/],
    [['admin', 'account', 'open', 'acc_cli', '--party', 'party_cli'], /acc_cli \(party_cli\)\n\(none\)/],
    [['admin', 'account', 'show', 'acc_acme_cash'], /USD\s+129900\s+0\s+129900/],
    [['admin', 'usage', 'open', 'usage_cli', '--currency', 'EUR'], /usage\s+usage_cli \(EUR\)\nowner\s+none/],
    [['admin', 'usage', 'show', 'usage_acme_llm'], /owner\s+party_acme\nconsumed\s+18446744073709551621/],
    [['admin', 'policy', 'draft', 'docs/examples/policy.json', '--id', 'pol_cli'], /policy\s+pol_cli \(draft\)/],
    [['--as', 'dev-reviewer', 'admin', 'policy', 'review', 'pol_cli', '--comment', 'reads well'], /pol_cli is reviewed/],
    [['--as', 'dev-approver', 'admin', 'policy', 'approve', 'pol_cli'], /pol_cli is approved/],
    [['admin', 'policy', 'dry-run', 'pol_cli', '--limit', '10'], /pol_cli: \d+ judged, \d+ unchanged, 0 would change/],
    [['admin', 'policy', 'dry-run', 'pol_cli', '--limit', '1'], /pol_cli: 1 judged, 1 unchanged, 0 would change, 0 would be refused\n[^]*more: older intents are judged with --before \d+\n$/],
    [['admin', 'policy', 'show', 'pol_cli'], /history:[^]*review\s+dev-reviewer\s+\d+\s+reads well/],
    [['admin', 'policy', 'activate', 'pol_cli'], /pol_cli is active/],
    [['admin', 'policy', 'list'], /active: pol_cli\npolicy\s+state[^]*pol_2026_11\s+superseded/],
    [['admin', 'metrics'], /apl_http_requests_total/],
    [['cluster', 'status'], /node\s+n1 \(leader\)[^]*voters\s+n1\nlearners\s+none\nremoved\s+none\n[^]*member\s+role\s+agent plane\s+peer\s+match index\s+lag\s+contact\nn1\s+leader.*\sok\b/],
    [['cluster', 'transfer', 'n1'], /n1 leads already: nothing moves/],
    [['log', 'digest'], /applied index\s+\d+\ntick\s+\d+\ndigest\s+[0-9a-f]{64}\nstate hash\s+[0-9a-f]{64}/],
  ];
  for (const [args, out] of steps) {
    const r = await apl(args);
    t.equal(r.code, EXIT.ok, `apl ${args.join(' ')}: ${r.stderr}`);
    if (out) t.match(r.stdout, out, `apl ${args.join(' ')}`);
  }
  // dev init again, the policy it activated superseded since: it leaves the operator's choice in force.
  const again = await json(['dev', 'init']);
  t.equal(again.code, EXIT.ok, again.stderr);
  t.match(again.body.made.find((m: { what: string }) => m.what === 'policy activation'), { id: 'pol_2026_11', status: 'superseded' });
  t.match((await apl(['admin', 'policy', 'list'])).stdout, /active: pol_cli\n/, 'the policy in force is still the one activated last');
  // A node of an earlier release, in a rolling upgrade, answers a dry run without its refused list.
  const earlier = await startProxy(node().adminUrl, async (_req, forward) => {
    const r = await forward();
    const body = JSON.parse(r.body) as Record<string, unknown>;
    delete body.refused;
    return { ...r, body: JSON.stringify(body), headers: { 'content-type': 'application/json; charset=utf-8' } };
  });
  t.teardown(() => earlier.close());
  const older = await apl(['admin', 'policy', 'dry-run', 'pol_2026_11', '--limit', '1'], { APL_ADMIN_URL: earlier.url });
  t.equal(older.code, EXIT.ok, older.stderr);
  t.match(older.stdout, /^pol_2026_11: 1 judged, 1 unchanged, 0 would change, refusals not judged \(a node of an earlier release\)/);
  const status = await json(['cluster', 'status']);
  t.match(status.body, { node: 'n1', role: 'leader', voters: ['n1'], learners: [], members: [{ id: 'n1', role: 'leader', voter: true }] });
  // Membership changes have their commands; a standalone node refuses them, and says why.
  const add = await apl(['cluster', 'add', 'n2', '127.0.0.1:7444', 'https://127.0.0.1:8444']);
  t.equal(add.code, EXIT.rejected);
  t.match(add.stderr, /A standalone node has no cluster membership to change[^]*apl cluster status shows the voters, the learners/, 'with advice about membership, not policies');
  const promote = await json(['cluster', 'promote', 'n7']);
  t.equal(promote.code, EXIT.rejected);
  t.match(promote.body.error, { code: 'not_found', status: 404 });
  const remove = await apl(['cluster', 'remove', 'n7']);
  t.equal(remove.code, EXIT.rejected);
  t.match(remove.stderr, /n7 is not a member of the cluster/);
  const bad = await apl(['cluster', 'add', 'N 2', 'nowhere', 'https://127.0.0.1:8444']);
  t.equal(bad.code, EXIT.rejected);
  t.match(bad.stderr, /peer_addr: must be host:port, the port from 1 to 65535/);
  const missing = await apl(['cluster', 'add', 'n2']);
  t.equal(missing.code, EXIT.usage, 'the addresses are required');
});

t.test('list commands page: --limit and --after read one page and say how to read on, --all reads every page', async (t) => {
  for (const id of ['party_page_a', 'party_page_b', 'party_page_c', 'party_page_d']) t.equal((await apl(['admin', 'party', 'add', id])).code, EXIT.ok);
  const every = (await json(['admin', 'party', 'list', '--limit', '1000'])).body;
  t.equal(every.next, null);
  const ids = every.parties.map((p: { id: string }) => p.id);
  t.ok(ids.length >= 6, `${ids.length} parties`);
  const first = await json(['admin', 'party', 'list', '--limit', '2']);
  t.same(first.body.parties.map((p: { id: string }) => p.id), ids.slice(0, 2));
  t.type(first.body.next, 'string');
  const human = await apl(['admin', 'party', 'list', '--limit', '2']);
  t.equal(human.stdout, `party\n${ids[0]}\n${ids[1]}\nmore: the next page is --after ${first.body.next} (or --all for every page)\n`);
  const second = await json(['admin', 'party', 'list', '--limit', '2', '--after', first.body.next]);
  t.same(second.body.parties.map((p: { id: string }) => p.id), ids.slice(2, 4));
  const all = await json(['admin', 'party', 'list', '--all', '--limit', '2']);
  t.same(all.body, { parties: every.parties, next: null }, 'every page, gathered');
  const rest = await json(['admin', 'party', 'list', '--all', '--limit', '2', '--after', first.body.next]);
  t.same(rest.body.parties.map((p: { id: string }) => p.id), ids.slice(2), '--all from a cursor on');
  const allHuman = await apl(['admin', 'party', 'list', '--all', '--limit', '2']);
  t.equal(allHuman.stdout, `party\n${ids.join('\n')}\n`, 'no "more" line after the last page');
  const roots = await json(['admin', 'trust-root', 'list', '--limit', '1', '--all']);
  t.match(roots.body, { trust_roots: [{ issuer: 'acme-agents' }], next: null });
  const agents = await json(['admin', 'agent', 'list', '--limit', '1']);
  t.equal(agents.body.agents.length, 1);
  const policies = await json(['admin', 'policy', 'list', '--limit', '1', '--all']);
  t.equal(policies.body.active, 'pol_cli');
  t.same(policies.body.policies.map((p: { id: string }) => p.id), ['pol_2026_11', 'pol_cli'], 'every policy across pages of one');
  const owing = await apl(['agent', 'submit', '--file', 'docs/examples/intent.json', '--transaction', 'txn_page_owing'], { APL_ATTESTATION: attestation });
  t.equal(owing.code, EXIT.ok, 'a second purchase, owing a second receipt');
  const obligations = await json(['agent', 'obligations', '--state', 'all', '--limit', '1'], { APL_ATTESTATION: attestation });
  t.equal(obligations.body.obligations.length, 1);
  t.type(obligations.body.next, 'string');
  const allObligations = await json(['agent', 'obligations', '--state', 'all', '--limit', '1', '--all'], { APL_ATTESTATION: attestation });
  t.ok(allObligations.body.obligations.length >= 2, 'the obligations of every page');
  t.equal(allObligations.body.next, null);
  const owedPaged = await apl(['agent', 'obligations', '--limit', '1'], { APL_ATTESTATION: attestation });
  t.equal(owedPaged.code, EXIT.usage, 'what is owed is answered whole: a page of it is the caller\'s to fix, before any request');
  t.equal(owedPaged.stderr, 'apl: --limit and --after page --state open, breached, discharged or all; what is owed (the default) is answered whole.\n  Drop them, or give --state.\n');
  for (const bad of ['0', '1001', 'x', '2.5']) {
    const r = await apl(['admin', 'party', 'list', '--limit', bad]);
    t.equal(r.code, EXIT.usage);
    t.equal(r.stderr, `apl: --limit must be an integer from 1 to 1000, not "${bad}".\n`);
  }
  // The dry run pages back through the recorded intents.
  const newest = await json(['admin', 'policy', 'dry-run', 'pol_2026_11', '--limit', '1']);
  t.type(newest.body.next_before, 'number');
  const older = await json(['admin', 'policy', 'dry-run', 'pol_2026_11', '--limit', '1', '--before', String(newest.body.next_before)]);
  t.equal(older.code, EXIT.ok, older.stderr);
  t.equal(older.body.evaluated, 1);
  t.ok(older.body.next_before === null || older.body.next_before < newest.body.next_before, 'further back');
  for (const [flag, bad, says] of [['--before', '0', '--before must be a log index (an integer from 1), not "0".'], ['--limit', '1001', '--limit must be an integer from 1 to 1000, not "1001".']] as const) {
    const r = await apl(['admin', 'policy', 'dry-run', 'pol_2026_11', flag, bad]);
    t.equal(r.code, EXIT.usage);
    t.equal(r.stderr, `apl: ${says}\n`);
  }
  const unknownCursor = await apl(['admin', 'party', 'list', '--after', 'party_zzz']);
  t.equal(unknownCursor.code, EXIT.ok, 'a cursor past the end is an empty last page');
});

t.test('four eyes: the author may not review, and apl says who may', async (t) => {
  await apl(['admin', 'policy', 'draft', 'docs/examples/policy.json', '--id', 'pol_four_eyes']);
  const r = await apl(['admin', 'policy', 'review', 'pol_four_eyes']);
  t.equal(r.code, EXIT.rejected);
  t.equal(r.stderr, 'apl: dev-author may not do ReviewPolicy (it needs the reviewer role).\n  Act as a principal with that role: --as <name> (on a development node dev-author is the author and the operator, who may also read the feed; dev-reviewer the reviewer; dev-approver the approver).\n');
  const nobody = await apl(['--as', 'dev-nobody', 'log', 'digest']);
  t.equal(nobody.code, EXIT.usage);
  t.match(nobody.stderr, /has no principal dev-nobody\.\n  Act as one it has with --as \(dev-author, dev-reviewer, dev-approver\)/);
  const badToken = await json(['log', 'digest'], { APL_ADMIN_TOKEN: 'not-the-token' });
  t.equal(badToken.code, EXIT.rejected);
  t.match(badToken.body.error, { code: 'unauthorized', status: 401, hint: /admin token was refused/ });
});

t.test('apl admin policy draft sends the bundle of its file whole: a description is kept, a misspelt field refused', async (t) => {
  const rules = [{ id: 'R-p', modality: 'permission', priority: 1, match: { action: 'a.*' }, basis: 'x' }];
  const write = (name: string, doc: unknown) => {
    const file = join(dir, name);
    writeFileSync(file, JSON.stringify(doc));
    return file;
  };
  const bundle = await apl(['admin', 'policy', 'draft', write('described.json', { description: 'Spending policy v3', rules }), '--id', 'pol_described']);
  t.equal(bundle.code, EXIT.ok, bundle.stderr);
  const request = await apl(['admin', 'policy', 'draft', write('request.json', { id: 'pol_described_2', bundle: { description: 'Spending policy v3', rules } })]);
  t.equal(request.code, EXIT.ok, request.stderr);
  const a = await json(['admin', 'policy', 'show', 'pol_described']);
  const b = await json(['admin', 'policy', 'show', 'pol_described_2']);
  t.equal(a.body.bundle_hash, b.body.bundle_hash, 'the same bundle, as a file of its own or inside a draft request');
  t.match(JSON.stringify(a.body), /Spending policy v3/, 'the description was sent');
  const typo = await apl(['admin', 'policy', 'draft', write('typo.json', { id: 'pol_typo', rules, descripton: 'typo' })]);
  t.equal(typo.code, EXIT.rejected, 'the node refuses the misspelt field');
  t.match(typo.stderr, /descripton/);
  const extra = await apl(['admin', 'policy', 'draft', write('extra.json', { id: 'pol_extra', bundle: { rules }, extra: 1 })]);
  t.equal(extra.code, EXIT.usage);
  t.match(extra.stderr, /is a draft \{id, bundle\}, which has no "extra"/);
  const neither = await apl(['admin', 'policy', 'draft', write('neither.json', [1])]);
  t.equal(neither.code, EXIT.usage);
  t.match(neither.stderr, /holds no object/);
  const list = await json(['admin', 'policy', 'list', '--limit', '1000']);
  t.notOk(list.body.policies.some((p: { id: string }) => p.id === 'pol_typo' || p.id === 'pol_extra'), 'neither was drafted');
});

t.test('apl log verify checks the export against the node; a tampered export exits 6', async (t) => {
  const live = await apl(['log', 'verify']);
  t.equal(live.code, EXIT.ok, live.stderr);
  t.match(live.stdout, /^The log verifies: \d+ records re-applied; at index \d+ the digest and the state hash are the node's\./);
  t.match(live.stderr, /^verifying the log: \d+ records, [\d.]+ (B|KiB)\n$/, 'the progress display, ended');
  const liveJson = await json(['log', 'verify']);
  t.equal(liveJson.body.ok, true);
  t.equal(liveJson.body.at_node_index.digest, liveJson.body.node.digest);
  const file = join(dir, 'export.ndjson');
  const exported = await apl(['log', 'export', '--out', file]);
  t.equal(exported.code, EXIT.ok, exported.stderr);
  t.match(exported.stderr, /exporting the log: \d+ records, .* written to /);
  const offline = await json(['log', 'verify', '--file', file]);
  t.equal(offline.code, EXIT.ok);
  t.equal(offline.body.ok, true);
  const last = parseJson(readFileSync(file, 'utf8').trimEnd().split('\n').pop()!) as { index: number; entry_hash: string };
  t.match(exported.stdout, `last record: index ${last.index}, entry hash ${last.entry_hash}\nkeep them: apl log verify --file ${file} --index ${last.index} --digest ${last.entry_hash} checks that nothing was cut off\n`, 'export says what to keep');
  const exportedJson = await json(['log', 'export', '--out', file]);
  t.same(exportedJson.body, { file, records: offline.body.records, bytes: exportedJson.body.bytes, last_index: last.index, digest: last.entry_hash });
  const kept = await json(['log', 'verify', '--file', file, '--index', String(last.index), '--digest', last.entry_hash]);
  t.equal(kept.code, EXIT.ok, kept.stderr);
  t.same(kept.body.expected, { digest: last.entry_hash, index: last.index });
  const keptHuman = await apl(['log', 'verify', '--file', file, '--digest', last.entry_hash]);
  t.match(keptHuman.stdout, new RegExp(`digest checked\\s+the recorded one, at index ${last.index}`));
  // A file with its last records cut off is a valid chain: only the recorded digest tells.
  const cut = join(dir, 'cut.ndjson');
  writeFileSync(cut, `${readFileSync(file, 'utf8').trimEnd().split('\n').slice(0, -2).join('\n')}\n`);
  t.equal((await apl(['log', 'verify', '--file', cut])).code, EXIT.ok, 'a prefix verifies alone');
  const empty = join(dir, 'empty.ndjson');
  writeFileSync(empty, '');
  const none = await apl(['log', 'verify', '--file', empty]);
  t.equal(none.code, EXIT.ok, 'a chain of no records is a chain');
  t.match(none.stderr, `apl: ${empty} holds no records: a chain of none verifies. If it should hold a log, check it against the log's digest (apl log verify --file ${empty} --digest <digest>).`, 'but an empty file is pointed out');
  const cutChecked = await apl(['log', 'verify', '--file', cut, '--index', String(last.index), '--digest', last.entry_hash]);
  t.equal(cutChecked.code, EXIT.mismatch);
  const cutLast = (parseJson(readFileSync(cut, 'utf8').trimEnd().split('\n').pop()!) as { index: number }).index;
  t.match(cutChecked.stderr, new RegExp(`\napl: The export verifies, but at index ${last.index} \\(its last record at or before it is index ${cutLast}\\) it leads to digest [0-9a-f]{64}, not the ${last.entry_hash} recorded: records are missing`));
  const cutJson = await json(['log', 'verify', '--file', cut, '--index', String(last.index), '--digest', last.entry_hash]);
  t.match(cutJson.body.error.body, { ok: false, digest: /^[0-9a-f]{64}$/, expected: { digest: last.entry_hash, index: last.index } });
  const cutAtEnd = await apl(['log', 'verify', '--file', cut, '--digest', last.entry_hash]);
  t.equal(cutAtEnd.code, EXIT.mismatch);
  t.match(cutAtEnd.stderr, /at its last record \(index \d+\) it leads to digest/);
  const digestNow = (await json(['log', 'digest'])).body;
  const atNode = await apl(['log', 'verify', '--file', file, '--index', String(digestNow.applied_index), '--digest', digestNow.digest]);
  t.equal(atNode.code, EXIT.ok, `the digest apl log digest reports, at its applied index: ${atNode.stderr}`);
  for (const [flags, message] of [
    [['--digest', 'abc'], /--digest must be 64 lowercase hexadecimal digits/], [['--index', '3'], /--index says where --digest was taken: give --digest too/],
    [['--digest', last.entry_hash, '--index', '-1'], /--index must be an integer from 0/],
  ] as const) {
    const r = await apl(['log', 'verify', '--file', file, ...flags]);
    t.equal(r.code, EXIT.usage);
    t.match(r.stderr, message);
  }
  const liveWithDigest = await apl(['log', 'verify', '--digest', last.entry_hash]);
  t.equal(liveWithDigest.code, EXIT.usage);
  t.match(liveWithDigest.stderr, /--digest and --index check a saved export: give --file/);
  // One canonical JSON record per line: a space is enough to refuse the line.
  const spaced = readFileSync(file, 'utf8').split('\n');
  spaced[2] = spaced[2]!.replace('"index":', '"index": ');
  writeFileSync(join(dir, 'spaced.ndjson'), spaced.join('\n'));
  const notCanonical = await apl(['log', 'verify', '--file', join(dir, 'spaced.ndjson')]);
  t.equal(notCanonical.code, EXIT.mismatch);
  t.match(notCanonical.stderr, /\napl: The export does not verify: line 3: not canonical JSON: it differs from the canonical encoding of its record at character \d+\./);
  const good = readFileSync(file, 'utf8');
  const lines = good.split('\n');
  lines[3] = lines[3]!.replace(/"entry_hash":"[0-9a-f]/, (m) => `${m.slice(0, -1)}${m.endsWith('0') ? '1' : '0'}`);
  writeFileSync(file, lines.join('\n'));
  const tampered = await apl(['log', 'verify', '--file', file]);
  t.equal(tampered.code, EXIT.mismatch);
  t.match(tampered.stderr, /apl: The export does not verify: line 4: the chain breaks at index \d+\./);
  const tamperedJson = await json(['log', 'verify', '--file', file]);
  t.equal(tamperedJson.code, EXIT.mismatch);
  t.match(tamperedJson.body.error, { code: 'mismatch', body: { ok: false, line: 4, reason: /^the chain breaks at index \d+$/ } }, '--json names the line and the reason apart');
  const missing = await apl(['log', 'verify', '--file', join(dir, 'no-such.ndjson')]);
  t.equal(missing.code, EXIT.usage);
  t.match(missing.stderr, /apl: There is no export file \S+no-such\.ndjson\./);
  const directory = await apl(['log', 'verify', '--file', dir]);
  t.equal(directory.code, EXIT.usage, 'a directory is the caller\'s to fix, not a bug');
  t.match(directory.stderr, /apl: Cannot read the export file \S+: EISDIR: illegal operation on a directory, read\./);
  // The command verifies a file byte for byte as the library verifies its text: a carriage return or an empty line fails it.
  writeFileSync(join(dir, 'crlf.ndjson'), `${good.trimEnd().split('\n').join('\r\n')}\r\n`);
  const crlf = await apl(['log', 'verify', '--file', join(dir, 'crlf.ndjson')]);
  t.equal(crlf.code, EXIT.mismatch);
  t.match(crlf.stderr, /apl: The export does not verify: line 1: the line ends with a carriage return: an export's lines end with a line feed alone\./);
  const goodLines = good.trimEnd().split('\n');
  writeFileSync(join(dir, 'blank.ndjson'), `${[goodLines[0], '', ...goodLines.slice(1)].join('\n')}\n`);
  const blank = await apl(['log', 'verify', '--file', join(dir, 'blank.ndjson')]);
  t.equal(blank.code, EXIT.mismatch);
  t.match(blank.stderr, /apl: The export does not verify: line 2: an empty line: an export has one record on every line\./);
  writeFileSync(join(dir, 'no-final-newline.ndjson'), good.trimEnd());
  t.equal((await apl(['log', 'verify', '--file', join(dir, 'no-final-newline.ndjson')])).code, EXIT.ok, 'the last line feed may be left off');
  for (const [out, why] of [[join(dir, 'no-such-dir', 'x.ndjson'), /ENOENT: no such file or directory/], [dir, /EISDIR: illegal operation on a directory/]] as const) {
    const r = await apl(['log', 'export', '--out', out]);
    t.equal(r.code, EXIT.usage, `export --out ${out}: the caller's to fix`);
    t.match(r.stderr, new RegExp(`apl: Cannot write ${out.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}: ${why.source}`));
  }
  const toStdout = await apl(['log', 'export']);
  t.equal(toStdout.stdout.split('\n').filter(Boolean).length, lines.filter(Boolean).length + (toStdout.stdout.split('\n').length - lines.length), 'the export goes to standard output');
});

t.test('wrong usage exits 2, no node exits 5, and help lists the exit codes', async (t) => {
  const unknown = await apl(['bogus']);
  t.equal(unknown.code, EXIT.usage);
  t.match(unknown.stderr, /unknown command 'bogus'/);
  const badLeg = await apl(['agent', 'submit', '--action', 'purchase.book', '--justification', 'x', '--debit', 'acc_acme_cash:12.5:USD'], { APL_ATTESTATION: attestation });
  t.equal(badLeg.code, EXIT.usage);
  t.match(badLeg.stderr, /--debit acc_acme_cash:12\.5:USD: expected <id>:<minor units>:<currency>/);
  const noNode = await apl(['log', 'digest'], { APL_ADMIN_URL: 'https://127.0.0.1:1' });
  t.equal(noNode.code, EXIT.unavailable);
  t.match(noNode.stderr, /ECONNREFUSED[^]*Start a node \(npm start\)/);
  const noCa = await apl(['log', 'digest'], { APL_CA: join(dir, 'nope.pem') });
  t.equal(noCa.code, EXIT.usage);
  t.match(noCa.stderr, /The CA file \S+nope\.pem does not exist/);
  const help = await apl(['--help']);
  t.equal(help.code, EXIT.ok);
  t.match(help.stdout, /Exit codes:\n  0  done[^]*6  verification failed/);
});

t.test('apl feed tail prints the records, filters them, follows the log, and stops on Ctrl-C', async (t) => {
  const human = await apl(['feed', 'tail', '--count', '3']);
  t.equal(human.code, EXIT.ok, human.stderr);
  t.match(human.stdout, /^ +\d+  AddTrustRoot +acme-agents  by dev-author\n +\d+  AddParty +party_acme  by dev-author\n +\d+  \w+/);
  t.equal(human.stdout.split('\n').length, 4, 'three lines');
  t.equal(human.stderr, 'following the feed from index 0\n3 records\n');

  const exported = (await apl(['log', 'export'])).stdout.split('\n');
  const js = await apl(['--json', 'feed', 'tail', '--type', 'intent', '--verdict', 'Permitted', '--count', '2']);
  t.equal(js.code, EXIT.ok, js.stderr);
  const lines = js.stdout.trim().split('\n');
  t.equal(lines.length, 2);
  for (const l of lines) {
    t.match(parseJson(l), { op: { type: 'SubmitIntent' }, result: { value: { outcome: { verdict: 'Permitted' } } } });
    t.ok(exported.includes(l), 'each line is the export\'s record, as it is');
  }
  t.match(parseJson(lines[0]!), { result: { value: { outcome: { transaction: 'txn_01JD7Y3K' } } } });
  t.equal(js.stderr, '', 'nothing on stderr under --json');

  // Following: a record committed after the command started is printed; Ctrl-C ends it with exit 0.
  const applied = (await json(['log', 'digest'])).body.applied_index as number;
  const child = spawn(process.execPath, [APL, 'feed', 'tail', '--from', String(applied + 1), '--type', 'intent'], {
    cwd: REPO, env: { ...withoutApl(), APL_DATA_DIR: dir, APL_ADMIN_URL: node().adminUrl, APL_CA: testCerts().ca }, stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  const seen = (re: RegExp, stream: () => string) => new Promise<void>((resolve) => {
    const check = () => (re.test(stream()) ? resolve() : setTimeout(check, 20));
    check();
  });
  child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
  child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
  const exited = new Promise<number | null>((resolve) => child.on('close', (code) => resolve(code)));
  await seen(/following the feed/, () => stderr);
  const s = await apl(['agent', 'submit', '--file', 'docs/examples/intent.json', '--transaction', 'txn_feed_tail'], { APL_ATTESTATION: attestation });
  t.equal(s.code, EXIT.ok, s.stderr);
  await seen(/txn_feed_tail/, () => stdout);
  child.kill('SIGINT');
  t.equal(await exited, EXIT.ok, 'Ctrl-C stops it cleanly');
  t.match(stdout, new RegExp(`^ +${applied + 1}  SubmitIntent +txn_feed_tail  Permitted  posted\n$`));
  t.equal(stderr, `following the feed from index ${applied + 1} (Ctrl-C stops)\n1 record\n`);

  const bad = await apl(['feed', 'tail', '--from', 'x1']);
  t.equal(bad.code, EXIT.usage);
  t.match(bad.stderr, /^apl: --from must be an integer from 0, not "x1"\./);
  const reviewer = await apl(['--as', 'dev-reviewer', 'feed', 'tail']);
  t.equal(reviewer.code, EXIT.rejected);
  t.match(reviewer.stderr, /^following the feed from index 0 \(Ctrl-C stops\)\napl: dev-reviewer may not read the change feed \(it needs the feed or operator role\)\./);
});
