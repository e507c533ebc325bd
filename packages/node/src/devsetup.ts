/**
 * First start on a developer's machine: development certificates (made by
 * certs/dev-certs.sh with openssl) and three admin principals, so that four eyes can
 * be honoured on a laptop too. Nothing here runs when `dev_setup` is false.
 */
import { execFileSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { z } from 'zod';
import { type Config, ConfigError, tlsFiles, tokensFile } from './config.js';
import type { AdminPrincipal } from './admin-plane.js';
import { PLANE_ROLES } from './roles.js';

export const CERT_SCRIPT = resolve(dirname(fileURLToPath(import.meta.url)), '../../../certs/dev-certs.sh');

const TokensFile = z.record(z.string().min(1), z.strictObject({ token: z.string().min(16), roles: z.array(z.enum(PLANE_ROLES)).min(1) }));

const DEV_PRINCIPALS: [string, AdminPrincipal['roles']][] = [
  ['dev-author', ['author', 'operator']],
  ['dev-reviewer', ['reviewer']],
  ['dev-approver', ['approver']],
];

/**
 * Whether the development setup will make the TLS files: it is on, no file is
 * configured (they go in the data directory), and one of them is missing. Files it
 * will not make must be there and usable before the data directory is touched.
 */
export function devSetupMakesTls(c: Config): boolean {
  if (!c.dev_setup || c.tls.cert !== null || c.tls.key !== null || c.tls.ca !== null) return false;
  const tls = tlsFiles(c);
  return [tls.ca, tls.cert, tls.key].some((f) => !existsSync(f));
}

/** Makes what a first start needs; returns what it made, for the banner. */
export function devSetup(c: Config): string[] {
  if (!c.dev_setup) return [];
  const made: string[] = [];
  const tls = tlsFiles(c);
  if (devSetupMakesTls(c)) {
    execFileSync('bash', [CERT_SCRIPT, dirname(tls.cert), c.node_id], { stdio: ['ignore', 'ignore', 'inherit'] });
    made.push(`development CA and certificate in ${dirname(tls.cert)}`);
  }
  const tokens = tokensFile(c);
  if (writeDevTokens(tokens)) made.push(`development admin tokens in ${tokens}`);
  return made;
}

/** Writes the development principals' tokens to `path` unless it exists; says whether it wrote. */
export function writeDevTokens(path: string): boolean {
  if (existsSync(path)) return false;
  mkdirSync(dirname(path), { recursive: true });
  const file = Object.fromEntries(DEV_PRINCIPALS.map(([name, roles]) => [name, { token: randomBytes(24).toString('base64url'), roles }]));
  writeFileSync(path, `${JSON.stringify(file, null, 2)}\n`, { mode: 0o600 });
  return true;
}

/** The admin principals: those configured by token hash, and those of the tokens file. */
export function loadPrincipals(c: Config): AdminPrincipal[] {
  const principals: AdminPrincipal[] = [...c.admin_principals];
  const file = tokensFile(c);
  // A file named in the configuration must be there: without it the node would start
  // with none of the principals it was meant to have, and say nothing.
  if (c.admin_tokens_file !== null && !existsSync(file)) throw new ConfigError(`admin_tokens_file: ${file} does not exist`);
  if (existsSync(file)) {
    let parsed;
    try {
      parsed = TokensFile.safeParse(JSON.parse(readFileSync(file, 'utf8')));
    } catch (err) {
      throw new ConfigError(`admin tokens file ${file}: ${(err as Error).message}`);
    }
    if (!parsed.success) throw new ConfigError(`admin tokens file ${file}: ${parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`);
    for (const [name, p] of Object.entries(parsed.data)) {
      principals.push({ name, roles: p.roles, token_sha256: createHash('sha256').update(p.token).digest('hex') });
    }
  }
  const names = new Set<string>();
  // A token names one principal: with two, one of them could never act.
  const byToken = new Map<string, string>();
  for (const p of principals) {
    if (names.has(p.name)) throw new ConfigError(`admin principal ${p.name} is configured twice`);
    names.add(p.name);
    const other = byToken.get(p.token_sha256);
    if (other !== undefined) throw new ConfigError(`admin principals ${other} and ${p.name} have the same token (token_sha256 ${p.token_sha256}); give each its own`);
    byToken.set(p.token_sha256, p.name);
  }
  return principals;
}
