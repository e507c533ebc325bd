/**
 * Whether 32 bytes can be the public key of an issuer: the canonical encoding of a
 * point of the Ed25519 curve (RFC 8032, 5.1.3) whose order is not small.
 *
 * A trust root is registered once and trusted for every token its issuer signs. Bytes
 * that decode to no point are refused by every verification, and a point of small order
 * (the identity, or one of the seven others whose multiple by 8 is it) is a key no
 * private key stands behind: either would be a trust root under which no token is ever
 * good, found only when the first agent is refused. Registration refuses both, saying
 * which. The arithmetic is affine, with BigInt: a registration is rare, and it runs in
 * microseconds.
 */

const P = (1n << 255n) - 19n;
const mod = (a: bigint) => ((a % P) + P) % P;

function pow(base: bigint, exp: bigint): bigint {
  let result = 1n;
  let b = mod(base);
  for (let e = exp; e > 0n; e >>= 1n) {
    if (e & 1n) result = (result * b) % P;
    b = (b * b) % P;
  }
  return result;
}

const inv = (a: bigint) => pow(a, P - 2n);
const D = mod(-121665n * inv(121666n));
/** A square root of -1 modulo p. */
const SQRT_M1 = pow(2n, (P - 1n) / 4n);

type Point = { x: bigint; y: bigint };

/** Decodes a point (RFC 8032, 5.1.3), or says why the bytes are none. */
function decode(bytes: Uint8Array): Point | string {
  if (bytes.length !== 32) return `is ${bytes.length} bytes; an Ed25519 public key is 32`;
  let y = 0n;
  for (let i = 31; i >= 0; i--) y = (y << 8n) | BigInt(bytes[i]!);
  const sign = y >> 255n;
  y &= (1n << 255n) - 1n;
  if (y >= P) return 'is not a canonical encoding of an Ed25519 point';
  const u = mod(y * y - 1n);
  const v = mod(D * y * y + 1n);
  const x2 = (u * inv(v)) % P;
  let x = pow(x2, (P + 3n) / 8n);
  if ((x * x) % P !== x2) x = (x * SQRT_M1) % P;
  if ((x * x) % P !== x2) return 'is not a point of the Ed25519 curve';
  if (x === 0n && sign === 1n) return 'is not a canonical encoding of an Ed25519 point';
  if ((x & 1n) !== sign) x = P - x;
  return { x, y };
}

function add(a: Point, b: Point): Point {
  const t = (D * a.x * b.x % P) * (a.y * b.y % P) % P;
  return {
    x: mod((a.x * b.y + a.y * b.x) * inv(1n + t)),
    y: mod((a.y * b.y + a.x * b.x) * inv(1n - t)),
  };
}

/** Why the bytes cannot be an issuer's public key, or null when they can. */
export function ed25519KeyProblem(bytes: Uint8Array): string | null {
  const point = decode(bytes);
  if (typeof point === 'string') return point;
  let q = point;
  for (let i = 0; i < 3; i++) q = add(q, q);
  if (q.x === 0n && q.y === 1n) return 'is a point of small order, which no private key stands behind: no token signed for it could ever be verified';
  return null;
}
