// Proves that `apl dev init` keeps the issuer it has: a lost public key is derived
// again from the private key, never replaced by a new pair; a lost private key, or
// two halves that are not one pair, are refused with what to do, changing nothing; a
// trust root the node holds under the issuer's name with another key is refused,
// before anything else is made; and the "Next" commands it prints carry the agent
// plane, the data directory and the CA it used, so that they work pasted into a shell
// that has none of its settings.
import t from 'tap';
import { createPrivateKey, createPublicKey, generateKeyPairSync } from 'node:crypto';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, unlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseJson } from '@apl/client';
import { EXIT } from '@apl/cli';
import { devNodeFixture, run, withoutApl } from './support/apl.js';
import { testCerts } from './support/node.js';
import { REPO } from './support/process.js';

t.setTimeout(120_000);

const { dir, node, apl } = devNodeFixture(t, 'apl-cli-init-');
const issuer = join(dir, 'issuer');

/** The raw Ed25519 public key (base64url) of a public or private key. */
const raw = (key: Parameters<typeof createPublicKey>[0]) => createPublicKey(key).export({ format: 'jwk' }).x;

t.test('the first run makes the issuer, and its Next commands work pasted into a bare shell', async (t) => {
  const r = await apl(['--json', 'dev', 'init']);
  t.equal(r.code, EXIT.ok, r.stderr);
  const body = parseJson(r.stdout) as { made: { what: string; status: string }[]; next: string[] };
  t.match(body.made[0], { what: 'issuer key', status: 'made' });
  t.equal(body.next.length, 2);
  t.match(body.next[0], new RegExp(`^export APL_ATTESTATION=\\$\\(npx apl --data-dir ${dir} --ca ${testCerts().ca} agent attest\\)$`));
  t.equal(body.next[1], `npx apl --agent-url ${node().agentUrl} --data-dir ${dir} --ca ${testCerts().ca} agent submit --file docs/examples/intent.json`);
  const human = await apl(['dev', 'init']);
  t.match(human.stdout, `Next, as the agent:\n  ${body.next[0]}\n  ${body.next[1]}\n`);
  // The shell has no APL_ variable: the commands carry what they need.
  const pasted = await run('bash', ['-c', `set -e\n${body.next.join('\n')}`], { ...withoutApl(), PATH: `${join(REPO, 'node_modules/.bin')}:${process.env.PATH}` });
  t.equal(pasted.code, 0, pasted.stderr);
  t.match(pasted.stdout, /^Permitted  posted  txn_01JD7Y3K\n/);
});

t.test('a lost public key is derived from the private key, which is kept', async (t) => {
  const key = readFileSync(join(issuer, 'issuer-key.pem'));
  const pub = readFileSync(join(issuer, 'issuer.pub.pem'), 'utf8');
  unlinkSync(join(issuer, 'issuer.pub.pem'));
  const r = await apl(['--json', 'dev', 'init']);
  t.equal(r.code, EXIT.ok, r.stderr);
  t.match((parseJson(r.stdout) as { made: unknown[] }).made, [{ what: 'issuer key', status: 'exists' }, { what: 'trust root', status: 'exists' }]);
  t.same(readFileSync(join(issuer, 'issuer-key.pem')), key, 'the private key is the same');
  t.equal(readFileSync(join(issuer, 'issuer.pub.pem'), 'utf8'), pub, 'the public key is written again, the same');
  t.equal(raw(pub), raw(createPrivateKey(key)), 'and it is the private key\'s');
  const att = await apl(['agent', 'attest']);
  const s = await apl(['agent', 'submit', '--file', 'docs/examples/intent.json', '--transaction', 'txn_after_rederive'], { APL_ATTESTATION: att.stdout.trim() });
  t.equal(s.code, EXIT.ok, `the node still accepts its attestations: ${s.stderr}`);
});

t.test('a capability a node would reject is refused when the attestation is minted', async (t) => {
  for (const cap of ['purchase.b*', 'Purchase.book', 'purchase.*,*.book']) {
    const r = await apl(['agent', 'attest', '--cap', cap]);
    t.equal(r.code, EXIT.usage, cap);
    t.match(r.stderr, /^apl: --cap \S+: not an action pattern; a node would reject the attestation\.\n  A capability is an action name/, cap);
    t.equal(r.stdout, '', 'no attestation is printed');
  }
  const good = await apl(['agent', 'attest', '--cap', 'purchase.book,usage.*,*']);
  t.equal(good.code, EXIT.ok, good.stderr);
});

t.test('a public key without its private key is refused, and nothing is made', async (t) => {
  const other = mkdtempSync(join(tmpdir(), 'apl-cli-init-nokey-'));
  t.teardown(() => rmSync(other, { recursive: true, force: true }));
  mkdirSync(join(other, 'issuer'));
  cpSync(join(issuer, 'issuer.pub.pem'), join(other, 'issuer/issuer.pub.pem'));
  const r = await apl(['dev', 'init', '--party', 'party_nokey'], { APL_DATA_DIR: other, APL_ADMIN_TOKENS_FILE: join(dir, 'admin-tokens.json') });
  t.equal(r.code, EXIT.usage);
  t.match(r.stderr, /^apl: The issuer's public key \S+issuer\.pub\.pem is there but its private key \S+issuer-key\.pem is gone: no attestation can be signed for this issuer any more\.\n  Remove the directory \S+ to make a new issuer, and register it under a new name/);
  t.notOk(existsSync(join(other, 'issuer/issuer-key.pem')), 'no key is made');
  t.notOk(existsSync(join(other, 'issuer/profile.json')));
  const parties = await apl(['--json', 'admin', 'party', 'list', '--all']);
  t.notOk(parties.stdout.includes('party_nokey'), 'the node is not touched');
});

t.test('two halves that are not one key pair are refused, and left as they are', async (t) => {
  const pubFile = join(issuer, 'issuer.pub.pem');
  const ours = readFileSync(pubFile, 'utf8');
  const stranger = generateKeyPairSync('ed25519').publicKey.export({ type: 'spki', format: 'pem' }).toString();
  writeFileSync(pubFile, stranger);
  t.teardown(() => writeFileSync(pubFile, ours));
  const r = await apl(['dev', 'init']);
  t.equal(r.code, EXIT.usage);
  t.match(r.stderr, /^apl: The issuer's public key \S+issuer\.pub\.pem does not match its private key \S+issuer-key\.pem: they are not one key pair\./);
  t.equal(readFileSync(pubFile, 'utf8'), stranger, 'nothing is overwritten');
  writeFileSync(pubFile, 'not a key');
  const unreadable = await apl(['dev', 'init']);
  t.equal(unreadable.code, EXIT.usage);
  t.match(unreadable.stderr, /^apl: The issuer's public key \S+ cannot be read as an Ed25519 key/);
});

t.test('a trust root registered under the issuer\'s name with another key is refused before anything else is made', async (t) => {
  const other = mkdtempSync(join(tmpdir(), 'apl-cli-init-other-'));
  t.teardown(() => rmSync(other, { recursive: true, force: true }));
  const env = { APL_DATA_DIR: other, APL_ADMIN_TOKENS_FILE: join(dir, 'admin-tokens.json') };
  const r = await apl(['dev', 'init', '--party', 'party_other'], env);
  t.not(r.code, EXIT.ok);
  t.equal(r.code, EXIT.usage);
  const ours = `k4.public.${raw(readFileSync(join(other, 'issuer/issuer.pub.pem')))}`;
  const theirs = `k4.public.${raw(readFileSync(join(issuer, 'issuer.pub.pem')))}`;
  t.equal(r.stderr, `apl: The node's trust root acme-agents holds another key (${theirs}) than this issuer's (${ours}): every attestation signed here would be refused.\n`
    + '  Register this issuer under a new name (apl dev init --issuer <name>), or, if the node\'s key is no longer used, remove it first (apl admin trust-root remove acme-agents) and run apl dev init again.\n');
  const parties = await apl(['--json', 'admin', 'party', 'list', '--all']);
  t.notOk(parties.stdout.includes('party_other'), 'no party is made');
  t.notOk(existsSync(join(other, 'issuer/profile.json')), 'no profile names the refused issuer');
  const renamed = await apl(['--json', 'dev', 'init', '--issuer', 'other-agents', '--party', 'party_other'], env);
  t.equal(renamed.code, EXIT.ok, `under a new name it registers: ${renamed.stderr}`);
  t.match((parseJson(renamed.stdout) as { made: unknown[] }).made[1], { what: 'trust root', id: 'other-agents', status: 'made' });
});
