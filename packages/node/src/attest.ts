/**
 * Attestations: PASETO v4.public tokens (Ed25519) that prove an agent may act.
 *
 * Verification is the costliest step of an intent, and agents reuse one token for
 * many intents, so verified tokens are cached until their `exp` (a bounded cache;
 * the oldest entry goes first). A cached token is still refused once expired or
 * once its issuer's trust root is removed or re-keyed.
 *
 * Claims (DESIGN §6): `iss` names a trust root, `sub` is the agent URI, `aud` is the
 * configured audience, `exp` is required, `jti` identifies the token (a digest of
 * the token stands in when it is absent), `cap` lists capability patterns.
 *
 * A token whose `exp` lies further ahead than `attestation_lifetime_max_s` (config) is
 * refused: a token without a near end is a credential that outlives the key hygiene
 * of its issuer, and a stolen one would act for as long as it says.
 */
import { createHash, createPublicKey } from 'node:crypto';
import { blake2b } from '@noble/hashes/blake2.js';
import { PublicProtocol, type PasetoError } from 'paseto';
import { ImportPublicKeyFactory, VerifyFactory, type PublicKey } from 'paseto/v4/public';
import { ACTION_NAME, type TrustRoot } from '@apl/core';
import { ed25519KeyProblem } from './ed25519-key.js';

const v4 = new PublicProtocol(VerifyFactory, ImportPublicKeyFactory);

const TOKEN_FORM = /^v4\.public\.[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)?$/;
const TOKEN_LENGTH_MAX = 8192;
const CAPABILITY = new RegExp(`^(\\*|${ACTION_NAME.source.slice(1, -1)}(\\.\\*)?)$`);

/** The facts a verified attestation establishes. */
export interface Attested {
  issuer: string;
  key_id: string;
  token_id: string;
  subject: string;
  capabilities: string[];
  expires_at: number;
}

export type Verification = { ok: true; attested: Attested } | { ok: false; message: string };

/** Converts an Ed25519 public key (PEM or PASERK k4.public) to PASERK k4.public. */
export function toPaserk(publicKey: string): string {
  const text = publicKey.trim();
  if (text.startsWith('k4.public.')) {
    if (!/^k4\.public\.[A-Za-z0-9_-]{43}$/.test(text)) throw new Error('is not a PASERK k4.public key');
    return usable(text);
  }
  // createPublicKey derives the public half of a private key: the ledger would keep
  // the right key, but the issuer's signing key would have travelled to it.
  if (/-----BEGIN [A-Z ]*PRIVATE KEY-----/.test(text) || text.startsWith('k4.secret.')) {
    throw new Error('is a private key; send the issuer\'s public key only (PEM "PUBLIC KEY" or PASERK k4.public), and treat this private key as exposed');
  }
  let key;
  try {
    key = createPublicKey(text);
  } catch {
    throw new Error('is neither a PEM public key nor a PASERK k4.public key');
  }
  if (key.asymmetricKeyType !== 'ed25519') throw new Error(`is a ${key.asymmetricKeyType} key; v4.public needs Ed25519`);
  const jwk = key.export({ format: 'jwk' });
  return usable(`k4.public.${jwk.x}`);
}

/** The key, if its bytes can be an issuer's (ed25519-key.ts); else why not. */
function usable(paserk: string): string {
  const problem = ed25519KeyProblem(Buffer.from(paserk.slice('k4.public.'.length), 'base64url'));
  if (problem !== null) throw new Error(problem);
  return paserk;
}

/** The PASERK id of a k4.public key: `k4.pid.` + base64url(BLAKE2b-264("k4.pid." + paserk)). */
export function paserkId(paserk: string): string {
  const d = blake2b(new TextEncoder().encode(`k4.pid.${paserk}`), { dkLen: 33 });
  return `k4.pid.${Buffer.from(d).toString('base64url')}`;
}

/**
 * The claims of a v4.public token, read without verifying them (to find the issuer),
 * or why there are none to read.
 */
export function unverifiedClaims(token: string): { claims: Record<string, unknown> } | { unreadable: string } {
  const body = token.split('.')[2];
  const raw = Buffer.from(body ?? '', 'base64url');
  if (raw.length <= 64) return { unreadable: 'it is too short to hold claims and a signature' };
  try {
    const claims: unknown = JSON.parse(raw.subarray(0, raw.length - 64).toString('utf8'));
    if (claims !== null && typeof claims === 'object' && !Array.isArray(claims)) return { claims: claims as Record<string, unknown> };
  } catch {
    // not JSON: answered below
  }
  return { unreadable: 'its claims are not a JSON object' };
}

/** Verifies signature and time claims of a token with a k4.public key. */
export async function verifyPaseto(
  token: string,
  paserk: string,
  opts: { now: Date; audience?: string; implicitAssertion?: Uint8Array; footer?: Uint8Array },
): Promise<{ ok: true; claims: Record<string, unknown> } | { ok: false; message: string }> {
  try {
    const key = await importKey(paserk);
    const { claims } = await v4.Verify(key, token, {
      now: opts.now,
      ...(opts.audience === undefined ? {} : { audience: opts.audience }),
      ...(opts.implicitAssertion === undefined ? {} : { implicitAssertion: opts.implicitAssertion }),
      ...(opts.footer === undefined ? {} : { footer: opts.footer }),
    });
    return { ok: true, claims: claims as Record<string, unknown> };
  } catch (err) {
    return { ok: false, message: describe(err as PasetoError & { claim?: string }) };
  }
}

function describe(err: PasetoError & { claim?: string }): string {
  if (err.code === 'ERR_PASETO_CLAIM_VALIDATION') {
    if (/RFC 3339/.test(err.message)) return `its ${err.claim ?? 'time'} claim is not an RFC 3339 date-time string`;
    if (err.claim === 'exp') return /missing|required/i.test(err.message) ? 'it has no exp claim' : 'it has expired';
    if (err.claim === 'aud') return 'it is for another audience';
    if (err.claim === 'nbf') return 'it is not valid yet';
    if (err.claim === 'iat') return 'it was issued in the future';
    return `its ${err.claim ?? 'claims'} claim is not valid`;
  }
  if (err.code === 'ERR_PASETO_INVALID_TOKEN') return 'its signature or form does not verify';
  return 'it could not be verified';
}

const keys = new Map<string, Promise<PublicKey>>();
function importKey(paserk: string): Promise<PublicKey> {
  let k = keys.get(paserk);
  if (!k) {
    k = v4.ImportPublicKey(paserk as `k4.public.${string}`);
    k.catch(() => keys.delete(paserk));
    if (keys.size >= 1024) keys.delete(keys.keys().next().value!);
    keys.set(paserk, k);
  }
  return k;
}

export interface AttestorOptions {
  audience: string;
  cacheEntriesMax: number;
  /** The most seconds from now that a token's `exp` may lie ahead. */
  lifetimeMaxSeconds: number;
  now: () => Date;
  /** The registered trust root of an issuer (read from the state store). */
  trustRoot: (issuer: string) => Promise<TrustRoot | undefined>;
}

/** Verifies attestations against the registered trust roots, with a bounded cache. */
export class Attestor {
  private readonly cache = new Map<string, Attested>();
  constructor(private readonly opts: AttestorOptions) {}

  async verify(token: string): Promise<Verification> {
    if (token.length > TOKEN_LENGTH_MAX) return reject(`it is longer than ${TOKEN_LENGTH_MAX} characters`);
    if (!TOKEN_FORM.test(token)) return reject('it is not a v4.public token');
    const now = this.opts.now();
    const cached = this.cache.get(token);
    if (cached) {
      const root = await this.opts.trustRoot(cached.issuer);
      if (cached.expires_at <= now.getTime()) {
        this.cache.delete(token);
        return reject('it has expired');
      }
      if (root?.key_id === cached.key_id) return { ok: true, attested: cached };
      this.cache.delete(token);
    }
    const read = unverifiedClaims(token);
    if ('unreadable' in read) return reject(read.unreadable);
    const { claims } = read;
    const iss = claims.iss;
    if (typeof iss !== 'string') return reject('it names no issuer');
    const root = await this.opts.trustRoot(iss);
    if (!root) return reject('its issuer is not a trust root');
    const verified = await verifyPaseto(token, root.public_key, { now, audience: this.opts.audience });
    if (!verified.ok) {
      // The claims are unverified here, but only the wording of the refusal depends on them.
      return reject(verified.message === 'it is for another audience' && claims.aud === undefined ? 'it has no aud claim' : verified.message);
    }
    const attested = attestedFrom(verified.claims, root, token);
    if (typeof attested === 'string') return reject(attested);
    // The paseto package takes a token at the very instant of its exp; the cache above
    // does not, and neither does this: one token, one answer, cached or not.
    if (attested.expires_at <= now.getTime()) return reject('it has expired');
    if (attested.expires_at - now.getTime() > this.opts.lifetimeMaxSeconds * 1000) {
      return reject(`its exp is more than ${this.opts.lifetimeMaxSeconds} seconds ahead, the longest lifetime this node accepts (attestation_lifetime_max_s)`);
    }
    this.remember(token, attested);
    return { ok: true, attested };
  }

  private remember(token: string, a: Attested): void {
    if (this.cache.size >= this.opts.cacheEntriesMax) this.cache.delete(this.cache.keys().next().value!);
    this.cache.set(token, a);
  }
}

function reject(why: string): Verification {
  return { ok: false, message: `The attestation was rejected: ${why}.` };
}

function attestedFrom(claims: Record<string, unknown>, root: TrustRoot, token: string): Attested | string {
  const { sub, cap, jti, exp } = claims;
  if (typeof sub !== 'string' || sub.length === 0) return 'it has no sub claim';
  if (!Array.isArray(cap) || cap.length > 64 || !cap.every((c) => typeof c === 'string' && c.length <= 128)) {
    return 'its cap claim is not a list of at most 64 capabilities (action patterns of at most 128 characters)';
  }
  const malformed = (cap as string[]).find((c) => !CAPABILITY.test(c));
  if (malformed !== undefined) {
    return `its capability ${JSON.stringify(malformed)} is not an action pattern: an action name (lower-case words joined by dots, as purchase.book), a name followed by .* (purchase.*), or * alone`;
  }
  if (jti !== undefined && (typeof jti !== 'string' || jti.length === 0 || jti.length > 256)) return 'its jti claim is not valid';
  return {
    issuer: root.issuer,
    key_id: root.key_id,
    token_id: typeof jti === 'string' ? jti : `sha256:${createHash('sha256').update(token).digest('hex').slice(0, 32)}`,
    subject: sub,
    capabilities: cap as string[],
    expires_at: Date.parse(exp as string),
  };
}
