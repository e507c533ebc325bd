/**
 * Configuration: one zod schema. Values come from the defaults, then a JSON config
 * file (`--config`), then `APL_` environment variables: every key has one, named by
 * its path in capitals (`limits.body_bytes_max` is `APL_LIMITS_BODY_BYTES_MAX`;
 * `agent_port` is `APL_AGENT_PORT`). A list or object variable holds JSON. An
 * invalid value is refused with the key (and variable) that holds it.
 */
import { readFileSync } from 'node:fs';
import { isAbsolute, resolve } from 'node:path';
import { z } from 'zod';
import { ROLES, parseWith } from '@apl/core';

const port = z.number().int().min(0).max(65535);
const ms = (d: number) => z.number().int().min(1).max(3_600_000).default(d);
const count = (d: number, max: number) => z.number().int().min(1).max(max).default(d);

const Member = z.strictObject({
  id: z.string().regex(/^[a-z0-9][a-z0-9-]{0,31}$/),
  /** peer_addr is the member's peer-mesh address, host:port. */
  peer_addr: z.string().regex(/^[^\s:]+:\d{1,5}$/),
  /** agent_url is the member's agent-plane base URL, answered in 421 not_primary. */
  agent_url: z.string().url(),
});

const Principal = z.strictObject({
  name: z.string().min(1).max(128),
  token_sha256: z.string().regex(/^[0-9a-f]{64}$/),
  roles: z.array(z.enum(ROLES)).min(1),
});

export const ConfigSchema = z.strictObject({
  node_id: z.string().regex(/^[a-z0-9][a-z0-9-]{0,31}$/).default('n1'),
  data_dir: z.string().min(1).default('.data/standalone'),
  /** host is the address every listener binds. */
  host: z.string().min(1).default('127.0.0.1'),
  agent_port: port.default(8443),
  admin_port: port.default(9443),
  peer_port: port.default(7443),
  /** members of the group; empty for a standalone node (a one-member group). */
  members: z.array(Member).default([]),
  /** PEM files; null means the development files under `<data_dir>/certs`. */
  tls: z.strictObject({
    ca: z.string().nullable().default(null),
    cert: z.string().nullable().default(null),
    key: z.string().nullable().default(null),
  }).prefault({}),
  /** dev_setup makes missing development certificates and admin tokens on start. */
  dev_setup: z.boolean().default(true),
  /** admin_tokens_file holds `{name: {token, roles}}`; null means `<data_dir>/admin-tokens.json`. */
  admin_tokens_file: z.string().nullable().default(null),
  /** admin_principals are admin bearer tokens given by their SHA-256. */
  admin_principals: z.array(Principal).default([]),
  audience: z.string().min(1).default('agent-plane-ledger'),
  tick_interval_ms: ms(1000),
  commit_timeout_ms: ms(5000),
  /** forward_to_primary: a follower forwards writes to the primary instead of answering 421. */
  forward_to_primary: z.boolean().default(true),
  /** snapshot_interval_entries: compact the Raft log after this many applied entries. */
  snapshot_interval_entries: count(10_000, 10_000_000),
  raft: z.strictObject({
    tick_ms: ms(100),
    election_ticks: count(10, 1000),
    heartbeat_ticks: count(1, 100),
    max_inflight_msgs: count(256, 65_536),
    max_size_per_msg: count(1 << 20, 64 << 20),
    max_uncommitted_entries: count(10_000, 1_000_000),
  }).prefault({}),
  limits: z.strictObject({
    body_bytes_max: count(64 * 1024, 16 << 20),
    entries_per_intent_max: count(64, 256),
    proposals_in_flight_max: count(4096, 1_000_000),
    attestation_cache_entries_max: count(10_000, 1_000_000),
  }).prefault({}),
  log_level: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
});

export type Config = z.output<typeof ConfigSchema>;

/** Every key path of the configuration (`limits.body_bytes_max`), from the defaults. */
function keyPaths(): string[][] {
  const defaults = ConfigSchema.parse({}) as Record<string, unknown>;
  const out: string[][] = [];
  const walk = (o: Record<string, unknown>, prefix: string[]) => {
    for (const [k, v] of Object.entries(o)) {
      if (v !== null && typeof v === 'object' && !Array.isArray(v)) walk(v as Record<string, unknown>, [...prefix, k]);
      else out.push([...prefix, k]);
    }
  };
  walk(defaults, []);
  return out;
}

export const envName = (path: string[]) => `APL_${path.join('_').toUpperCase()}`;

function envValue(text: string): unknown {
  const t = text.trim();
  if (/^(-?\d+(\.\d+)?|true|false|null)$/.test(t) || t.startsWith('[') || t.startsWith('{')) {
    try {
      return JSON.parse(t);
    } catch {
      return text;
    }
  }
  return text;
}

export class ConfigError extends Error {
  override readonly name = 'ConfigError';
}

/** Loads the configuration: defaults, then the file, then the environment. */
export function loadConfig(opts: { file?: string | undefined; env?: NodeJS.ProcessEnv } = {}): Config {
  const env = opts.env ?? process.env;
  let raw: Record<string, unknown> = {};
  if (opts.file) {
    try {
      raw = JSON.parse(readFileSync(opts.file, 'utf8')) as Record<string, unknown>;
    } catch (err) {
      throw new ConfigError(`config file ${opts.file}: ${(err as Error).message}`);
    }
    if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) throw new ConfigError(`config file ${opts.file}: must hold a JSON object`);
  }
  const fromEnv = new Map<string, string>();
  for (const path of keyPaths()) {
    const name = envName(path);
    const value = env[name];
    if (value === undefined) continue;
    fromEnv.set(path.join('.'), name);
    let o = raw;
    for (const k of path.slice(0, -1)) o = (o[k] ??= {}) as Record<string, unknown>;
    o[path[path.length - 1]!] = envValue(value);
  }
  const parsed = parseWith(ConfigSchema, raw);
  if (!parsed.ok) {
    const problems = parsed.issues.map((i) => {
      const via = fromEnv.get(i.path) ? ` (${fromEnv.get(i.path)})` : '';
      return `${i.path || 'config'}${via}: ${i.message}`;
    });
    throw new ConfigError(`invalid configuration: ${problems.join('; ')}`);
  }
  const c = parsed.value;
  c.data_dir = resolve(c.data_dir);
  if (opts.file) {
    // Relative paths in a file are relative to the file, so one file works from any directory.
    const base = resolve(opts.file, '..');
    const rel = (p: string | null) => (p === null || isAbsolute(p) ? p : resolve(base, p));
    if (raw.data_dir !== undefined && !fromEnv.has('data_dir')) c.data_dir = resolve(base, String(raw.data_dir));
    c.tls = { ca: rel(c.tls.ca), cert: rel(c.tls.cert), key: rel(c.tls.key) };
    c.admin_tokens_file = rel(c.admin_tokens_file);
  }
  return c;
}

/** The TLS files a node uses: the configured ones, or the development ones. */
export function tlsFiles(c: Config): { ca: string; cert: string; key: string } {
  const dir = resolve(c.data_dir, 'certs');
  return {
    ca: c.tls.ca ?? resolve(dir, 'ca.pem'),
    cert: c.tls.cert ?? resolve(dir, `${c.node_id}.pem`),
    key: c.tls.key ?? resolve(dir, `${c.node_id}-key.pem`),
  };
}

export function tokensFile(c: Config): string {
  return c.admin_tokens_file ?? resolve(c.data_dir, 'admin-tokens.json');
}
