#!/usr/bin/env node
// Development attestations: make an Ed25519 issuer key, and sign PASETO v4.public
// capability attestations with it, as an agent platform would.
//
//   node scripts/attest.mjs keygen <dir>
//       writes <dir>/issuer-key.pem (private, mode 0600) and <dir>/issuer.pub.pem,
//       and prints the body for POST /admin/v1/trust-roots
//   node scripts/attest.mjs sign --key <issuer-key.pem> --iss <issuer> --sub <agent-uri>
//       [--cap purchase.*,receipt.attach] [--aud agent-plane-ledger] [--ttl 3600] [--jti <id>]
//       prints the token
import { createPrivateKey, generateKeyPairSync, randomBytes } from 'node:crypto';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { PublicProtocol } from 'paseto';
import { SecretKeyFromCryptoKey, SignFactory } from 'paseto/v4/public';

const [command, ...rest] = process.argv.slice(2);

if (command === 'keygen' && rest[0]) {
  const dir = rest[0];
  mkdirSync(dir, { recursive: true });
  const { publicKey, privateKey } = generateKeyPairSync('ed25519');
  writeFileSync(join(dir, 'issuer-key.pem'), privateKey.export({ type: 'pkcs8', format: 'pem' }), { mode: 0o600 });
  const pub = publicKey.export({ type: 'spki', format: 'pem' });
  writeFileSync(join(dir, 'issuer.pub.pem'), pub);
  process.stdout.write(`${JSON.stringify({ issuer: 'acme-agents', public_key: pub })}\n`);
} else if (command === 'sign') {
  const { values: v } = parseArgs({
    args: rest,
    options: {
      key: { type: 'string' }, iss: { type: 'string' }, sub: { type: 'string' }, cap: { type: 'string', default: 'purchase.*,usage.record,receipt.attach' },
      aud: { type: 'string', default: 'agent-plane-ledger' }, ttl: { type: 'string', default: '3600' }, jti: { type: 'string' },
    },
  });
  if (!v.key || !v.iss || !v.sub) usage();
  const pkcs8 = createPrivateKey(readFileSync(v.key)).export({ type: 'pkcs8', format: 'der' });
  const key = await SecretKeyFromCryptoKey(await crypto.subtle.importKey('pkcs8', pkcs8, 'Ed25519', true, ['sign']));
  const now = Date.now();
  const claims = {
    iss: v.iss, sub: v.sub, aud: v.aud, iat: new Date(now).toISOString(),
    exp: new Date(now + Number(v.ttl) * 1000).toISOString(), jti: v.jti ?? randomBytes(8).toString('hex'),
    cap: v.cap.split(',').filter(Boolean),
  };
  process.stdout.write(`${await new PublicProtocol(SignFactory).Sign(key, claims, { addIssuedAt: false })}\n`);
} else {
  usage();
}

function usage() {
  process.stderr.write('usage: node scripts/attest.mjs keygen <dir>\n       node scripts/attest.mjs sign --key <pem> --iss <issuer> --sub <agent-uri> [--cap a,b] [--aud aud] [--ttl seconds] [--jti id]\n');
  process.exit(2);
}
