// Proves the attestation layer against the PASETO v4 reference vectors
// (../shared/testdata/paseto-v4-public.json): the 4-S tokens verify with their key
// before their exp and are refused as expired after it; every expect-fail token is
// refused. Then the claims layer: issuer, audience, subject, capabilities, PEM and
// PASERK keys, k4.pid, and the cache that must not outlive exp or a trust root.
import t from 'tap';
import { readFileSync } from 'node:fs';
import { generateKeyPairSync, sign, type KeyObject } from 'node:crypto';
import { PublicProtocol, type Claims } from 'paseto';
import { GenerateKeyPairFactory, SignFactory, ExportPublicKeyFactory } from 'paseto/v4/public';
import { Attestor, paserkId, toPaserk, unverifiedClaims, verifyPaseto } from './attest.js';

const VECTORS = new URL('../../../../shared/testdata/paseto-v4-public.json', import.meta.url);
interface Vector {
  name: string;
  'expect-fail': boolean;
  'public-key'?: string;
  'public-key-pem'?: string;
  key?: string;
  token: string;
  payload: string | null;
  footer: string;
  'implicit-assertion': string;
}
const vectors = (JSON.parse(readFileSync(VECTORS, 'utf8')) as { tests: Vector[] }).tests;
const paserkOfHex = (hex: string) => `k4.public.${Buffer.from(hex, 'hex').toString('base64url')}`;
const bytes = (s: string) => (s === '' ? undefined : new TextEncoder().encode(s));

t.test('the 4-S vectors verify with their key before exp and are refused as expired after', async (t) => {
  const good = vectors.filter((v) => !v['expect-fail']);
  t.equal(good.length, 3);
  for (const v of good) {
    const paserk = paserkOfHex(v['public-key']!);
    t.equal(toPaserk(v['public-key-pem']!), paserk, `${v.name}: the PEM and hex keys agree`);
    const opts = { footer: bytes(v.footer), implicitAssertion: bytes(v['implicit-assertion']) };
    const before = await verifyPaseto(v.token, paserk, { now: new Date('2021-12-31T23:59:59Z'), ...clean(opts) });
    t.same(before, { ok: true, claims: JSON.parse(v.payload!) }, `${v.name} verifies before its exp`);
    const after = await verifyPaseto(v.token, paserk, { now: new Date(), ...clean(opts) });
    t.same(after, { ok: false, message: 'it has expired' }, `${v.name} is refused as expired now`);
  }
});

t.test('every expect-fail vector is refused', async (t) => {
  const bad = vectors.filter((v) => v['expect-fail']);
  t.ok(bad.length >= 3);
  for (const v of bad) {
    const hex = v['public-key'] ?? v.key!;
    const paserk = paserkOfHex(hex);
    const opts = clean({ footer: bytes(v.footer), implicitAssertion: bytes(v['implicit-assertion']) });
    const r = await verifyPaseto(v.token, paserk, { now: new Date('2021-01-01T00:00:00Z'), ...opts });
    t.equal(r.ok, false, `${v.name} is refused`);
    const attestor = new Attestor({
      audience: 'agent-plane-ledger', cacheEntriesMax: 10, lifetimeMaxSeconds: 86_400, now: () => new Date('2021-01-01T00:00:00Z'),
      trustRoot: async () => ({ issuer: 'x', public_key: paserk, key_id: paserkId(paserk) }),
    });
    t.equal((await attestor.verify(v.token)).ok, false, `${v.name} is refused by the attestor`);
  }
});

function clean<T extends Record<string, unknown>>(o: T): Partial<T> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as Partial<T>;
}

t.test('k4.pid follows PASERK (BLAKE2b-264 over the header and the key)', async (t) => {
  t.equal(paserkId(`k4.public.${'A'.repeat(43)}`), 'k4.pid.S_XQmeEwHbbvRmiyfXfHYpLGjXGzjTRSDoT1YtTakWFE');
  // PASERK's k4.pid-2 vector (its key bytes are no point of the curve: the id does not care).
  t.equal(paserkId(`k4.public.${Buffer.from('707172737475767778797a7b7c7d7e7f808182838485868788898a8b8c8d8e8f', 'hex').toString('base64url')}`), 'k4.pid.9ShR3xc8-qVJ_di0tc9nx0IDIqbatdeM2mqLFBJsKRHs');
});

t.test('public keys are accepted as Ed25519 PEM or k4.public, and nothing else', async (t) => {
  const { publicKey, privateKey } = generateKeyPairSync('ed25519');
  const pem = publicKey.export({ type: 'spki', format: 'pem' }).toString();
  t.match(toPaserk(pem), /^k4\.public\.[A-Za-z0-9_-]{43}$/);
  const secret = privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
  t.throws(() => toPaserk(secret), /is a private key; send the issuer's public key only/, 'a private key is refused, though its public half could be derived');
  t.throws(() => toPaserk(`k4.secret.${'A'.repeat(86)}`), /is a private key/);
  t.equal(toPaserk(toPaserk(pem)), toPaserk(pem));
  const rsa = generateKeyPairSync('rsa', { modulusLength: 1024 }).publicKey.export({ type: 'spki', format: 'pem' }).toString();
  t.throws(() => toPaserk(rsa), /Ed25519/);
  t.throws(() => toPaserk('not a key'), /neither/);
  t.throws(() => toPaserk('k4.public.short'), /not a PASERK/);
  t.throws(() => toPaserk(`k4.public.${'A'.repeat(43)}`), /^is a point of small order/, 'a key of small order is refused, as PASERK');
  const identity = Buffer.concat([Buffer.from('302a300506032b6570032100', 'hex'), Buffer.from(`01${'00'.repeat(31)}`, 'hex')]).toString('base64');
  t.throws(() => toPaserk(`-----BEGIN PUBLIC KEY-----\n${identity}\n-----END PUBLIC KEY-----\n`), /^is a point of small order/, 'and as PEM');
});

const proto = new PublicProtocol(GenerateKeyPairFactory, SignFactory, ExportPublicKeyFactory);

/** LE64 of PASETO's pre-authentication encoding. */
function le64(n: number): Buffer {
  const b = Buffer.alloc(8);
  b.writeBigUInt64LE(BigInt(n));
  return b;
}

/**
 * A v4.public token over any payload text, signed by hand (PASETO v4 §Sign: Ed25519
 * over PAE(h, m, f, i)): the library refuses to sign claims it would refuse to verify.
 */
function signRaw(key: KeyObject, payload: string): string {
  const pieces = [Buffer.from('v4.public.'), Buffer.from(payload), Buffer.alloc(0), Buffer.alloc(0)];
  const pae = Buffer.concat([le64(pieces.length), ...pieces.flatMap((p) => [le64(p.length), p])]);
  return `v4.public.${Buffer.concat([pieces[1]!, sign(null, pae, key)]).toString('base64url')}`;
}

t.test('claims that are signed but not well formed are refused saying what is wrong', async (t) => {
  const { publicKey, privateKey } = generateKeyPairSync('ed25519');
  const paserk = toPaserk(publicKey.export({ type: 'spki', format: 'pem' }).toString());
  const root = { issuer: 'acme-agents', public_key: paserk, key_id: paserkId(paserk) };
  const attestor = new Attestor({ audience: 'agent-plane-ledger', cacheEntriesMax: 2, lifetimeMaxSeconds: 86_400, now: () => new Date('2026-11-22T10:00:00Z'), trustRoot: async () => root });
  const claims = { iss: 'acme-agents', sub: 'agent://acme.example/agent/buyer-7', aud: 'agent-plane-ledger', exp: '2026-11-22T11:00:00Z', cap: ['purchase.*'] };
  t.ok((await attestor.verify(signRaw(privateKey, JSON.stringify(claims)))).ok, 'the hand-signed token verifies as it is');
  for (const exp of ['tomorrow', 1893456000, null]) {
    t.same(await attestor.verify(signRaw(privateKey, JSON.stringify({ ...claims, exp }))), { ok: false, message: 'The attestation was rejected: its exp claim is not an RFC 3339 date-time string.' }, `exp ${JSON.stringify(exp)}`);
  }
});

async function issuer() {
  const { publicKey, secretKey } = await proto.GenerateKeyPair();
  const paserk = await proto.ExportPublicKey(publicKey);
  return { paserk, root: { issuer: 'acme-agents', public_key: paserk, key_id: paserkId(paserk) }, secretKey };
}

t.test('the attestor checks issuer, audience, expiry and claims, and caches until exp', async (t) => {
  const a = await issuer();
  let now = new Date('2026-11-22T10:00:00Z');
  let root: typeof a.root | undefined = a.root;
  const attestor = new Attestor({ audience: 'agent-plane-ledger', cacheEntriesMax: 2, lifetimeMaxSeconds: 86_400, now: () => now, trustRoot: async (i) => (i === 'acme-agents' ? root : undefined) });
  const claims = { iss: 'acme-agents', sub: 'agent://acme.example/agent/buyer-7', aud: 'agent-plane-ledger', exp: '2026-11-22T11:00:00Z', jti: 'j-1', cap: ['purchase.*'] };
  const sign = (c: Record<string, unknown>) => proto.Sign(a.secretKey, c as Claims, { addIssuedAt: false });
  const token = await sign(claims);
  t.same(unverifiedClaims(token), { claims });

  const ok = await attestor.verify(token);
  t.same(ok, { ok: true, attested: { issuer: 'acme-agents', key_id: a.root.key_id, token_id: 'j-1', subject: claims.sub, capabilities: ['purchase.*'], expires_at: Date.parse(claims.exp) } });

  const refusals: [Record<string, unknown> | string, string][] = [
    [{ ...claims, aud: 'someone-else' }, 'it is for another audience'],
    [{ ...claims, iss: 'unknown-issuer' }, 'its issuer is not a trust root'],
    [{ ...claims, exp: '2026-11-22T09:00:00Z' }, 'it has expired'],
    [{ ...claims, exp: '2026-11-23T10:00:01Z' }, 'its exp is more than 86400 seconds ahead, the longest lifetime this node accepts (attestation_lifetime_max_s)'],
    [{ ...claims, exp: '2126-11-22T10:00:00Z' }, 'its exp is more than 86400 seconds ahead, the longest lifetime this node accepts (attestation_lifetime_max_s)'],
    [{ ...claims, aud: undefined }, 'it has no aud claim'],
    [{ ...claims, cap: 'purchase.*' }, 'its cap claim is not a list of at most 64 capabilities (action patterns of at most 128 characters)'],
    [{ ...claims, cap: ['purchase.*', 'Purchase!'] }, 'its capability "Purchase!" is not an action pattern: an action name (lower-case words joined by dots, as purchase.book), a name followed by .* (purchase.*), or * alone'],
    [{ ...claims, cap: ['purchase.b*'] }, 'its capability "purchase.b*" is not an action pattern: an action name (lower-case words joined by dots, as purchase.book), a name followed by .* (purchase.*), or * alone'],
    [{ ...claims, cap: [`a${'.b'.repeat(80)}`] }, 'its cap claim is not a list of at most 64 capabilities (action patterns of at most 128 characters)'],
    [{ ...claims, sub: undefined }, 'it has no sub claim'],
    ['v4.local.abc', 'it is not a v4.public token'],
    [`v4.public.${'A'.repeat(8192)}`, 'it is longer than 8192 characters'],
    ['v4.public.AAAA', 'it is too short to hold claims and a signature'],
    [`v4.public.${Buffer.concat([Buffer.from('[1]'), Buffer.alloc(64)]).toString('base64url')}`, 'its claims are not a JSON object'],
    [`v4.public.${Buffer.concat([Buffer.from('not json'), Buffer.alloc(64)]).toString('base64url')}`, 'its claims are not a JSON object'],
    [`${token.slice(0, -4)}AAAA`, 'its signature or form does not verify'],
  ];
  for (const [c, why] of refusals) {
    const tok = typeof c === 'string' ? c : await sign(Object.fromEntries(Object.entries(c).filter(([, v]) => v !== undefined)));
    t.same(await attestor.verify(tok), { ok: false, message: `The attestation was rejected: ${why}.` }, why);
  }

  t.ok((await attestor.verify(await sign({ ...claims, exp: '2026-11-23T10:00:00Z' }))).ok, 'a token of exactly the longest lifetime is taken');

  const noJti = await attestor.verify(await sign({ ...claims, jti: undefined }));
  t.match(noJti.ok && noJti.attested.token_id, /^sha256:[0-9a-f]{32}$/, 'a digest stands in for a missing jti');

  now = new Date('2026-11-22T11:00:00Z');
  t.same(await attestor.verify(token), { ok: false, message: 'The attestation was rejected: it has expired.' }, 'a cached token expires');
  now = new Date('2026-11-22T10:30:00Z');
  t.ok((await attestor.verify(token)).ok);
  root = undefined;
  t.same(await attestor.verify(token), { ok: false, message: 'The attestation was rejected: its issuer is not a trust root.' }, 'removing the trust root beats the cache');
});

t.test('a token is refused from the instant of its exp, whether it was cached or not', async (t) => {
  const a = await issuer();
  const at = (when: string) => new Attestor({ audience: 'agent-plane-ledger', cacheEntriesMax: 2, lifetimeMaxSeconds: 86_400, now: () => new Date(when), trustRoot: async () => a.root });
  const token = await proto.Sign(a.secretKey, { iss: 'acme-agents', sub: 'agent://acme.example/agent/buyer-7', aud: 'agent-plane-ledger', exp: '2026-11-22T11:00:00Z', cap: ['purchase.*'] } as Claims, { addIssuedAt: false });
  t.ok((await at('2026-11-22T10:59:59.999Z').verify(token)).ok, 'a millisecond before');
  t.same(await at('2026-11-22T11:00:00Z').verify(token), { ok: false, message: 'The attestation was rejected: it has expired.' }, 'at exp, never seen before');
});
