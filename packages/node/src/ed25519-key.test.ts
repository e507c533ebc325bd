// Proves the check of an issuer's key: every key Node.js generates, and the public keys
// of the PASETO v4 vectors, are points of large order; the eight points of small order
// are refused as such, in their canonical encodings; bytes that decode to no point, a
// y coordinate not reduced, and a negative zero are refused as not a point or not
// canonical; and about half of random 32-byte strings decode to no point, as theory says.
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import t from 'tap';
import { ed25519KeyProblem } from './ed25519-key.js';

const VECTORS = new URL('../../../../shared/testdata/paseto-v4-public.json', import.meta.url);
const hex = (h: string) => Buffer.from(h, 'hex');

t.test('generated keys and the vectors\' keys are accepted', async (t) => {
  for (let i = 0; i < 200; i++) {
    const x = generateKeyPairSync('ed25519').publicKey.export({ format: 'jwk' }).x!;
    if (ed25519KeyProblem(Buffer.from(x, 'base64url')) !== null) t.fail(`generated key ${x} refused`);
  }
  const vectors = JSON.parse(readFileSync(VECTORS, 'utf8')) as { tests: { name: string; 'public-key'?: string }[] };
  const keys = vectors.tests.map((v) => v['public-key']).filter((k): k is string => typeof k === 'string' && /^[0-9a-f]{64}$/.test(k));
  t.ok(keys.length > 0, `${keys.length} vector keys`);
  for (const k of keys) t.equal(ed25519KeyProblem(hex(k)), null, k);
});

t.test('the eight points of small order are refused as such', async (t) => {
  const smallOrder = [
    '0100000000000000000000000000000000000000000000000000000000000000', // the identity
    'ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f', // order 2
    '0000000000000000000000000000000000000000000000000000000000000000', // order 4
    '0000000000000000000000000000000000000000000000000000000000000080', // order 4
    '26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05', // order 8
    '26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc85',
    'c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a',
    'c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac03fa',
  ];
  for (const k of smallOrder) t.match(ed25519KeyProblem(hex(k)), /^is a point of small order/, k);
});

t.test('bytes that are no canonical point are refused, saying which', async (t) => {
  t.match(ed25519KeyProblem(hex('02' + '00'.repeat(31))), /^is not a point of the Ed25519 curve$/, 'y = 2 has no x');
  t.match(ed25519KeyProblem(hex('ee' + 'ff'.repeat(30) + '7f')), /^is not a canonical encoding/, 'y = p + 1, not reduced');
  t.match(ed25519KeyProblem(hex('01' + '00'.repeat(30) + '80')), /^is not a canonical encoding/, 'x = 0 with the sign bit set');
  t.match(ed25519KeyProblem(new Uint8Array(31)), /^is 31 bytes; an Ed25519 public key is 32$/);
  let none = 0;
  for (let i = 0; i < 400; i++) if (ed25519KeyProblem(randomBytes(32)) === 'is not a point of the Ed25519 curve') none++;
  t.ok(none > 140 && none < 260, `${none} of 400 random strings are no point (about half are)`);
});
