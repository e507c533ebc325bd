/**
 * Development setup: an issuer of attestations (an Ed25519 key, as an agent platform
 * would hold), attestations minted with it, and the bootstrap of a node through the
 * SDK, one step per admin route, each by the principal whose role it needs.
 */
import { createPrivateKey, createPublicKey, generateKeyPairSync, randomBytes, type KeyObject } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { PublicProtocol } from 'paseto';
import { SecretKeyFromCryptoKey, SignFactory } from 'paseto/v4/public';
import { ApiError, PAGE_LIMIT_MAX, type AdminClient } from '@apl/client';
import { UsageError } from './exit.js';

/** The example policy of docs/examples/policy.json: a cap on purchases, and a receipt owed within 5 ticks or a refund duty. */
export const EXAMPLE_POLICY = {
  id: 'pol_2026_11',
  bundle: {
    rules: [
      {
        id: 'R-cap-large', modality: 'prohibition', priority: 10, match: { action: 'purchase.*' },
        when: [{ left: 'amount', op: 'gt', right: '500000', currency: 'USD' }],
        basis: 'Purchases above 5,000.00 USD are forbidden for agents',
      },
      {
        id: 'R-purchase', modality: 'permission', priority: 100, match: { action: 'purchase.*' },
        obligations: [{
          id: 'O-receipt', action: 'receipt.attach', deadline_ticks: 5,
          discharge_when: [{ left: 'evidence', op: 'count_gte', right: 1 }],
          repair: [{ id: 'D-refund', action: 'purchase.refund', deadline_ticks: 3, blocks: ['purchase.*'] }],
        }],
        basis: 'Agents may purchase; a receipt is due within 5 ticks',
      },
    ],
  },
};

export const DEFAULT_CAPABILITIES = ['purchase.*', 'usage.record', 'receipt.attach'];

/** What `apl dev init` makes, by default the worked example's names. */
export interface DevPlan {
  issuer: string;
  party: string;
  agent: string;
  /** accounts: the party's own, and a house account of the merchant. */
  accounts: { id: string; party?: string }[];
  usages: { id: string; currency: string; owner?: string }[];
  policy: { id: string; bundle: unknown };
}

export const DEFAULT_PLAN: DevPlan = {
  issuer: 'acme-agents',
  party: 'party_acme',
  agent: 'agent://acme.example/agent/buyer-7',
  accounts: [{ id: 'acc_acme_cash', party: 'party_acme' }, { id: 'acc_merchant_books' }],
  usages: [{ id: 'usage_acme_llm', currency: 'USD', owner: 'party_acme' }],
  policy: EXAMPLE_POLICY,
};

/** The development issuer on disk: its key, and the names `apl agent attest` defaults to. */
export interface IssuerFiles {
  dir: string;
  key: string;
  pub: string;
  /** profile holds {issuer, agent}: whom attestations are minted for by default. */
  profile: string;
}

export const issuerFiles = (dir: string): IssuerFiles => ({
  dir, key: join(dir, 'issuer-key.pem'), pub: join(dir, 'issuer.pub.pem'), profile: join(dir, 'profile.json'),
});

/** An Ed25519 public key as PASERK `k4.public`: the form the node lists trust roots in. */
function paserkOf(publicKey: KeyObject): string {
  const x = publicKey.export({ format: 'jwk' }).x;
  if (typeof x !== 'string') throw new Error('an Ed25519 public key exports no x');
  return `k4.public.${x}`;
}

/** Reads a key file with `read`; a file that holds no Ed25519 key is the setup's fault, said as such. */
function readKey<T>(file: string, what: string, read: (pem: Buffer) => T): T {
  try {
    return read(readFileSync(file));
  } catch (err) {
    throw new UsageError(`The issuer's ${what} ${file} cannot be read as an Ed25519 key: ${(err as Error).message}.`, 'Remove the issuer directory to make a new issuer, and register it under a new name (apl dev init --issuer <name>).');
  }
}

/**
 * The issuer's key pair: kept when it is on disk, made when neither half is. A
 * missing public half is derived from the private key; a missing private half
 * cannot be, and two halves that do not belong together are refused, since signing
 * with either would make attestations the registered trust root refuses.
 */
export function ensureIssuerKey(f: IssuerFiles): { publicKey: string; paserk: string; made: boolean } {
  const hasKey = existsSync(f.key);
  const hasPub = existsSync(f.pub);
  if (!hasKey && hasPub) {
    throw new UsageError(
      `The issuer's public key ${f.pub} is there but its private key ${f.key} is gone: no attestation can be signed for this issuer any more.`,
      `Remove the directory ${f.dir} to make a new issuer, and register it under a new name (apl dev init --issuer <name>): the node keeps the old key under the old one.`,
    );
  }
  if (!hasKey) {
    mkdirSync(f.dir, { recursive: true });
    const { publicKey, privateKey } = generateKeyPairSync('ed25519');
    writeFileSync(f.key, privateKey.export({ type: 'pkcs8', format: 'pem' }), { mode: 0o600 });
    const pem = publicKey.export({ type: 'spki', format: 'pem' }).toString();
    writeFileSync(f.pub, pem);
    return { publicKey: pem, paserk: paserkOf(publicKey), made: true };
  }
  const derived = readKey(f.key, 'private key', (pem) => createPublicKey(createPrivateKey(pem)));
  const pem = derived.export({ type: 'spki', format: 'pem' }).toString();
  if (!hasPub) {
    writeFileSync(f.pub, pem);
    return { publicKey: pem, paserk: paserkOf(derived), made: false };
  }
  const stored = readKey(f.pub, 'public key', (p) => createPublicKey(p));
  if (!stored.equals(derived)) {
    throw new UsageError(
      `The issuer's public key ${f.pub} does not match its private key ${f.key}: they are not one key pair.`,
      `Remove ${f.pub} to have it derived again from the private key (apl dev init), or remove the directory ${f.dir} to make a new issuer and register it under a new name.`,
    );
  }
  return { publicKey: pem, paserk: paserkOf(derived), made: false };
}

export interface AttestClaims {
  issuer: string;
  subject: string;
  capabilities: string[];
  audience: string;
  ttlSeconds: number;
  jti?: string | undefined;
}

/** Signs a PASETO v4.public capability attestation with the issuer's key; a key that is not an Ed25519 private key is a usage error. */
export async function mintAttestation(keyFile: string, c: AttestClaims): Promise<string> {
  const ed25519 = 'An issuer key is an Ed25519 private key in PEM: openssl genpkey -algorithm ed25519 -out <pem> makes one.';
  let read: KeyObject;
  try {
    read = createPrivateKey(readFileSync(keyFile));
  } catch (err) {
    throw new UsageError(`Cannot read the issuer key ${keyFile}: ${(err as Error).message}.`, ed25519);
  }
  if (read.asymmetricKeyType !== 'ed25519') throw new UsageError(`The issuer key ${keyFile} is ${read.asymmetricKeyType === undefined ? 'not a private key' : `an ${read.asymmetricKeyType.toUpperCase()} key`}, not Ed25519.`, ed25519);
  const pkcs8 = read.export({ type: 'pkcs8', format: 'der' });
  const key = await SecretKeyFromCryptoKey(await crypto.subtle.importKey('pkcs8', pkcs8, 'Ed25519', true, ['sign']));
  const now = Date.now();
  const claims = {
    iss: c.issuer, sub: c.subject, aud: c.audience, iat: new Date(now).toISOString(),
    exp: new Date(now + c.ttlSeconds * 1000).toISOString(), jti: c.jti ?? randomBytes(8).toString('hex'), cap: c.capabilities,
  };
  return new PublicProtocol(SignFactory).Sign(key, claims, { addIssuedAt: false });
}

/** The principals of the four-eyes steps. */
export interface DevPrincipals {
  /** operator adds trust roots, parties, bindings, accounts and usage balances. */
  operator: AdminClient;
  author: AdminClient;
  reviewer: AdminClient;
  approver: AdminClient;
}

export interface Made {
  what: string;
  id: string;
  /** status: made, exists (it was there already), or superseded (a policy that was active, and another is now). */
  status: 'made' | 'exists' | 'superseded';
  by: string;
}

/** Runs one creation; an `already_exists` answer counts as done. */
async function step(made: Made[], what: string, id: string, by: string, run: () => Promise<unknown>): Promise<void> {
  try {
    await run();
    made.push({ what, id, status: 'made', by });
  } catch (err) {
    if (!(err instanceof ApiError && err.code === 'already_exists')) throw err;
    made.push({ what, id, status: 'exists', by });
  }
}

/**
 * Bootstraps a node: trust root, party, agent binding, accounts, usage balances, and
 * the policy drafted, reviewed, approved and activated by three principals. What
 * exists already is left as it is, so running it twice is harmless.
 */
export async function bootstrap(p: DevPrincipals, names: Record<keyof DevPrincipals, string>, plan: DevPlan, key: { publicKey: string; paserk: string }): Promise<Made[]> {
  const made: Made[] = [];
  const op = names.operator;
  await step(made, 'trust root', plan.issuer, op, () => p.operator.addTrustRoot({ issuer: plan.issuer, public_key: key.publicKey }));
  if (made[made.length - 1]!.status === 'exists') await sameTrustRoot(p.operator, plan.issuer, key.paserk);
  await step(made, 'party', plan.party, op, () => p.operator.addParty({ id: plan.party }));
  await step(made, 'agent binding', `${plan.agent} -> ${plan.party}`, op, () => p.operator.bindAgent({ agent: plan.agent, party: plan.party }));
  for (const a of plan.accounts) await step(made, 'account', a.id, op, () => p.operator.openAccount(a));
  for (const u of plan.usages) await step(made, 'usage balance', `${u.id} (${u.currency})`, op, () => p.operator.openUsage(u));
  await policySteps(p, names, plan.policy, made);
  return made;
}

/**
 * Refuses to go on when the trust root registered as `issuer` holds another key than
 * ours: every attestation this issuer signs would then be refused (403).
 */
async function sameTrustRoot(admin: AdminClient, issuer: string, ours: string): Promise<void> {
  for await (const root of admin.allTrustRoots({ limit: PAGE_LIMIT_MAX })) {
    if (root.issuer !== issuer) continue;
    if (root.public_key === ours) return;
    throw new UsageError(
      `The node's trust root ${issuer} holds another key (${root.public_key ?? `key id ${root.key_id}`}) than this issuer's (${ours}): every attestation signed here would be refused.`,
      `Register this issuer under a new name (apl dev init --issuer <name>), or, if the node's key is no longer used, remove it first (apl admin trust-root remove ${issuer}) and run apl dev init again.`,
    );
  }
}

/**
 * Drafts, reviews, approves and activates a policy, skipping the steps it has been
 * through. One superseded since (an operator activated another) is left as it is:
 * activating it again is refused, and the policy in force is the operator's choice.
 */
export async function policySteps(p: DevPrincipals, names: Record<keyof DevPrincipals, string>, policy: { id: string; bundle: unknown }, made: Made[] = []): Promise<Made[]> {
  await step(made, 'policy draft', policy.id, names.author, () => p.author.draftPolicy(policy));
  const order = ['draft', 'reviewed', 'approved', 'active', 'superseded'];
  const state = (await p.author.getPolicy(policy.id)).state;
  const at = order.indexOf(state);
  const lifecycle: [string, keyof DevPrincipals, () => Promise<unknown>][] = [
    ['policy review', 'reviewer', () => p.reviewer.reviewPolicy(policy.id)],
    ['policy approval', 'approver', () => p.approver.approvePolicy(policy.id)],
    ['policy activation', 'approver', () => p.approver.activatePolicy(policy.id)],
  ];
  for (const [k, [what, who, run]] of lifecycle.entries()) {
    if (at > k) made.push({ what, id: policy.id, status: state === 'superseded' && k === lifecycle.length - 1 ? 'superseded' : 'exists', by: names[who] });
    else await step(made, what, policy.id, names[who], run);
  }
  return made;
}
