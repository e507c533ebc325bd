/**
 * Configuration: one zod schema. Values come from the defaults, then a JSON config
 * file (`--config`), then `APL_` environment variables: every key has one, named by
 * its path in capitals (`limits.body_bytes_max` is `APL_LIMITS_BODY_BYTES_MAX`;
 * `agent_port` is `APL_AGENT_PORT`). A variable of a string setting is taken as
 * written; a number, boolean, list or object variable holds JSON. An invalid value
 * is refused with the key (and variable) that holds it. Relative paths in the file
 * resolve against the file's directory; all others against the working directory.
 */
import { readFileSync } from 'node:fs';
import { isAbsolute, resolve } from 'node:path';
import { z } from 'zod';
import { parseWith } from '@apl/core';
import { MEMBER_ID, MEMBER_ID_PHRASE, MemberAddresses } from './membership.js';
import { PLANE_ROLES } from './roles.js';

/** An integer setting in [lo, hi], refused with the range in words. */
const int = (lo: number, hi: number, what = `an integer from ${lo} to ${hi}`) => {
  const phrase = `must be ${what}`;
  return z.number({ error: phrase }).int(phrase).min(lo, phrase).max(hi, phrase);
};
const port = int(0, 65535, 'a port number (0 to 65535)');
const ms = (d: number) => int(1, 3_600_000, 'a number of milliseconds from 1 to 3600000').default(d);
const count = (d: number, max: number) => int(1, max).default(d);

const NodeId = z.string().regex(MEMBER_ID, MEMBER_ID_PHRASE);
const Member = z.strictObject({ id: NodeId, ...MemberAddresses.shape });

const Principal = z.strictObject({
  name: z.string().min(1).max(128),
  token_sha256: z.string().regex(/^[0-9a-f]{64}$/),
  roles: z.array(z.enum(PLANE_ROLES)).min(1),
});

export const ConfigSchema = z.strictObject({
  node_id: NodeId.default('n1'),
  data_dir: z.string().min(1).default('.data/standalone'),
  /** host is the address every listener binds. */
  host: z.string().min(1).default('127.0.0.1'),
  agent_port: port.default(8443),
  admin_port: port.default(9443),
  /** peer_port is where the peer mesh (gRPC, mutual TLS 1.3) listens; used when there are members. */
  peer_port: port.default(7443),
  /** members of the group, this node among them; empty for a standalone node (a group of one). */
  members: z.array(Member).max(9).default([]),
  /** cluster_id names the group; every peer message carries it, and a message of another group is refused. */
  cluster_id: z.string().regex(/^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$/, 'must be a cluster id (letters, digits and _ . : -)').default('agent-plane-ledger'),
  /**
   * cluster_state is `new` when the members are started for the first time together,
   * `existing` when this member rejoins a group that already runs: then an empty store
   * is refused, since a member must never forget what it voted and stored. `join` starts
   * a new member of a running group on an empty store: it waits until an operator adds
   * it (POST /admin/v1/cluster/members), then catches up. `members` are the bootstrap
   * members for `new`; afterwards the members in force are in the log.
   */
  cluster_state: z.enum(['new', 'existing', 'join']).default('new'),
  /** forward_writes: a follower forwards writes to the primary; false answers 421 not_primary. */
  forward_writes: z.boolean().default(true),
  /**
   * agent_plane_thread: the agent plane's TLS, HTTP and parsing run on a thread of their
   * own, so that the thread that runs Raft and `apply` does not (agent-thread.ts); false
   * runs them on that thread (members that share a machine's cores may want this).
   */
  agent_plane_thread: z.boolean().default(true),
  /** PEM files; null means the development files under `<data_dir>/certs`. */
  tls: z.strictObject({
    ca: z.string().nullable().default(null),
    cert: z.string().nullable().default(null),
    key: z.string().nullable().default(null),
  }).prefault({}),
  /** dev_setup makes missing development certificates and admin tokens on start. */
  dev_setup: z.boolean().default(true),
  /**
   * admin_client_certs: the admin plane also requires a client certificate signed by
   * the cluster CA (certs/dev-certs.sh --client <name>), beside the bearer token.
   */
  admin_client_certs: z.boolean().default(false),
  /** admin_tokens_file holds `{name: {token, roles}}`; null means `<data_dir>/admin-tokens.json`. */
  admin_tokens_file: z.string().nullable().default(null),
  /** admin_principals are admin bearer tokens given by their SHA-256. */
  admin_principals: z.array(Principal).default([]),
  audience: z.string().min(1).default('agent-plane-ledger'),
  /** attestation_lifetime_max_s: an attestation whose exp lies further ahead than this is refused (default one day). */
  attestation_lifetime_max_s: int(60, 31_622_400, 'a number of seconds from 60 to 31622400').default(86_400),
  tick_interval_ms: ms(1000),
  commit_timeout_ms: ms(5000),
  /** snapshot_interval_entries: compact the Raft log after this many applied entries. */
  snapshot_interval_entries: count(10_000, 10_000_000),
  /**
   * snapshot_catchup_entries: compaction keeps this many entries before the applied
   * index, so a member briefly behind (a restart, a pause) catches up from the log
   * rather than by a whole store (etcd's SnapshotCatchUpEntries).
   */
  snapshot_catchup_entries: int(0, 10_000_000).default(5_000),
  /**
   * snapshot_hold_entries: while a member the primary has heard from in its term is
   * behind the compaction point (stopped, restarting, paused, cut off, then catching up)
   * and the log still holds its entries, the primary compacts no further until the log
   * has grown by this many entries more than a compaction's usual interval, so that the
   * member catches up from the log rather than by a whole store. The Raft log keeps
   * those entries on disk and in memory. 0: such a member keeps only
   * snapshot_catchup_entries.
   */
  snapshot_hold_entries: int(0, 10_000_000).default(50_000),
  /**
   * ready_lag_entries_max: a member is ready (GET /readyz) while it has applied all but at
   * most this many of the entries it knows committed. A follower applies what the primary
   * commits a few entries behind it as a matter of course; one catching up (a restart, a
   * partition healed) is behind by more, and is not ready until it is back within this.
   */
  ready_lag_entries_max: int(0, 10_000_000).default(1_000),
  /** snapshot_timeout_ms: a state store streamed to a member behind compaction must arrive within this. */
  snapshot_timeout_ms: ms(300_000),
  raft: z.strictObject({
    /**
     * tick_ms: Raft's logical clock. With election_ticks 10 a follower calls an election
     * after 0.5 to 1 s without a leader, so a member's death costs about a second
     * (docs/operations.md, "Failover").
     */
    tick_ms: ms(50),
    election_ticks: count(10, 1000),
    heartbeat_ticks: count(1, 100),
    max_inflight_msgs: count(256, 65_536),
    // An append must fit one gRPC message on the peer mesh (16 MiB).
    max_size_per_msg: count(1 << 20, 8 << 20),
    max_uncommitted_entries: count(10_000, 1_000_000),
    /** wal_segment_bytes: the size of a segment of the Raft log, zero-filled when first made, used again once freed (docs/raft.md). */
    wal_segment_bytes: int(1 << 16, 1 << 30, 'a number of bytes from 65536 to 1073741824').default(64 << 20),
  }).prefault({}),
  store: z.strictObject({
    /** cache_entries_max bounds the decoded records the state store keeps in memory. */
    cache_entries_max: count(50_000, 10_000_000),
    /** write_buffer_bytes is LevelDB's memtable size for the state store (up to twice it in memory). */
    write_buffer_bytes: int(1 << 20, 1 << 30, 'a number of bytes from 1048576 to 1073741824').default(32 << 20),
    /** block_bytes is LevelDB's block size for the state store: larger compresses better and costs more per uncached read. */
    block_bytes: int(1 << 12, 1 << 20, 'a number of bytes from 4096 to 1048576').default(16 << 10),
  }).prefault({}),
  limits: z.strictObject({
    body_bytes_max: count(64 * 1024, 16 << 20),
    entries_per_intent_max: count(64, 256),
    proposals_in_flight_max: count(4096, 1_000_000),
    attestation_cache_entries_max: count(10_000, 1_000_000),
    /** peer_queue_messages_max: Raft messages waiting for one peer's stream; beyond, they are dropped (Raft resends). */
    peer_queue_messages_max: count(4096, 1_000_000),
  }).prefault({}),
  /** feed bounds the change feed (GET /admin/v1/feed, docs/feed.md): its consumers and what each may hold. */
  feed: z.strictObject({
    /** consumers_max is the most feeds one node serves at once; one more answers 503 feed_unavailable. */
    consumers_max: count(64, 10_000),
    /** heartbeat_interval_ms: a feed that has written nothing for this long writes a heartbeat line. */
    heartbeat_interval_ms: ms(5000),
    /** page_records_max is the most journal records a feed reads from the store at a time. */
    page_records_max: count(256, 10_000),
    /** lag_ms_max: a feed whose send buffer stays full this long is cut off with where to resume. */
    lag_ms_max: ms(10_000),
  }).prefault({}),
  /** http: what each listener allows a client, so that slow or many connections cannot starve the others. */
  http: z.strictObject({
    /** headers_timeout_ms: a connection whose request headers (TLS handshake included) are not all in by then is closed. */
    headers_timeout_ms: ms(10_000),
    /** request_timeout_ms: a request whose body is not all in by then is answered 408 and its connection closed. */
    request_timeout_ms: ms(30_000),
    /** keep_alive_timeout_ms: an idle keep-alive connection is closed after this long. */
    keep_alive_timeout_ms: ms(5_000),
    /**
     * write_stall_ms: a streamed answer (the log export) whose client reads nothing for
     * this long while the send buffer is full is cut, and its connection closed.
     */
    write_stall_ms: ms(60_000),
    /** connections_max caps the open connections of each listener; a connection beyond it is closed at once. */
    connections_max: count(1024, 1_000_000),
    /**
     * connections_per_source_max caps the open connections of one client address on each
     * listener, so that one host cannot take all of `connections_max`; a connection beyond
     * it is closed at once.
     */
    connections_per_source_max: count(512, 1_000_000),
  }).prefault({}).refine((h) => h.headers_timeout_ms <= h.request_timeout_ms, { message: 'headers_timeout_ms must not exceed request_timeout_ms', path: ['headers_timeout_ms'] }),
  /** rate_limit: a token bucket per attested agent on POST /api/v1/intents; beyond it, 429 rate_limited with Retry-After. */
  rate_limit: z.strictObject({
    /** agent_intents_per_second is the sustained rate of one agent. */
    agent_intents_per_second: count(500, 1_000_000),
    /** agent_burst is how many intents one agent may send at once after a quiet spell. */
    agent_burst: count(1000, 1_000_000),
    /** agents_max bounds the buckets kept (full ones are dropped first). */
    agents_max: count(100_000, 10_000_000),
    /** refusal_delay_ms: a 429 is answered after this long (at most its Retry-After); 0 answers at once. */
    refusal_delay_ms: int(0, 60_000, 'a number of milliseconds from 0 to 60000').default(500),
  }).prefault({}),
  log_level: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
});

export type Config = z.output<typeof ConfigSchema>;

/** What the schema alone cannot say about the member list. */
function memberProblems(c: Config): string[] {
  if (c.members.length === 0) return [];
  const out: string[] = [];
  if (!c.members.some((m) => m.id === c.node_id)) out.push(`members: this node (${c.node_id}) is not among them (${c.members.map((m) => m.id).join(', ')})`);
  const twice = (key: 'id' | 'peer_addr') => c.members.map((m) => m[key]).filter((v, k, all) => all.indexOf(v) !== k);
  for (const id of new Set(twice('id'))) out.push(`members: ${id} is listed twice`);
  for (const a of new Set(twice('peer_addr'))) out.push(`members: peer address ${a} is listed twice`);
  return out;
}

/** A node's listeners: the setting of each one's port, the port, and what listens there (the peer mesh when there are members). */
export function listeners(c: Config): { key: 'agent_port' | 'admin_port' | 'peer_port'; port: number; what: string }[] {
  return [
    { key: 'agent_port', port: c.agent_port, what: 'the agent plane' },
    { key: 'admin_port', port: c.admin_port, what: 'the admin plane' },
    ...(c.members.length > 0 ? [{ key: 'peer_port' as const, port: c.peer_port, what: 'the peer mesh' }] : []),
  ];
}

/** Two listeners of this node given one port (0, any free port, may repeat). */
function portProblems(c: Config, fromEnv: Map<string, string>): string[] {
  const given = listeners(c).filter((l) => l.port !== 0);
  const named = (k: string) => `${k}${fromEnv.has(k) ? ` (${fromEnv.get(k)})` : ''}`;
  const out: string[] = [];
  for (const [i, a] of given.entries()) {
    const b = given.slice(i + 1).find((l) => l.port === a.port);
    if (b !== undefined) out.push(`${named(a.key)} and ${named(b.key)} are both ${a.port}: each listener needs a port of its own`);
  }
  return out;
}

/** A setting: its key path (`limits.body_bytes_max`) and whether it holds text. */
interface Key {
  path: string[];
  /** text is true for string settings (default a string, or null for a path not given). */
  text: boolean;
  /** list is true for settings that hold a list, which a variable gives as JSON. */
  list: boolean;
}

/** Every setting of the configuration, from the defaults. */
function keys(): Key[] {
  const defaults = ConfigSchema.parse({}) as Record<string, unknown>;
  const out: Key[] = [];
  const walk = (o: Record<string, unknown>, prefix: string[]) => {
    for (const [k, v] of Object.entries(o)) {
      if (v !== null && typeof v === 'object' && !Array.isArray(v)) walk(v as Record<string, unknown>, [...prefix, k]);
      else out.push({ path: [...prefix, k], text: v === null || typeof v === 'string', list: Array.isArray(v) });
    }
  };
  walk(defaults, []);
  return out;
}

export const envName = (path: string[]) => `APL_${path.join('_').toUpperCase()}`;

/**
 * The value of a variable: as written for a string setting (APL_NODE_ID=7 is the
 * node "7"), otherwise JSON when it reads as JSON (numbers, booleans, lists).
 */
function envValue(text: string, key: Key): unknown {
  if (key.text) return text;
  const t = text.trim();
  if (key.list) {
    try {
      return JSON.parse(t);
    } catch (err) {
      throw new ConfigError(`invalid configuration: ${key.path.join('.')} (${envName(key.path)}): must be a JSON array, and ${JSON.stringify(text.length > 40 ? `${text.slice(0, 40)}…` : text)} is not JSON (${(err as Error).message})`);
    }
  }
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

/** Variables of apl, the command line, which a node's environment may hold beside its own. */
const CLI_VARIABLES = new Set(['APL_AGENT_URL', 'APL_ADMIN_URL', 'APL_CA', 'APL_AS', 'APL_ADMIN_TOKEN', 'APL_ATTESTATION']);

/**
 * The `APL_` variables of `env` that set nothing (a setting's name misspelt), each with
 * the setting's variable it is nearest to, if one is near: said when the node starts,
 * since a setting silently left at its default is worse than a word.
 */
export function unknownVariables(env: NodeJS.ProcessEnv): { name: string; nearest: string | null }[] {
  const known = keys().map((k) => envName(k.path));
  return Object.keys(env)
    .filter((name) => name.startsWith('APL_') && !known.includes(name) && !CLI_VARIABLES.has(name))
    .sort()
    .map((name) => {
      const best = known.map((k) => ({ k, d: editDistance(name, k) })).sort((a, b) => a.d - b.d)[0];
      return { name, nearest: best !== undefined && best.d <= 3 ? best.k : null };
    });
}

/**
 * Where this member's own entry of `members` names another port than the one its peer
 * mesh listens on (`peer_port`), what to say: its peers dial the entry's address. That
 * is right only where something forwards that port here (a port mapping), so it is a
 * warning, not a refusal. Null when they agree, or for a standalone node.
 */
export function peerPortMismatch(c: Config): { peer_addr: string; peer_port: number; message: string } | null {
  if (c.members.length <= 1) return null;
  const self = c.members.find((m) => m.id === c.node_id);
  const port = self === undefined ? NaN : Number(/:(\d+)$/.exec(self.peer_addr)?.[1]);
  if (self === undefined || !Number.isInteger(port) || port === c.peer_port) return null;
  return {
    peer_addr: self.peer_addr,
    peer_port: c.peer_port,
    message: `members names ${c.node_id}'s peer address ${self.peer_addr}, but its peer mesh listens on peer_port ${c.peer_port} (${envName(['peer_port'])}): `
      + `the other members dial ${self.peer_addr}, which is right only if that port is forwarded here`,
  };
}

/** Levenshtein distance, for a misspelt variable's nearest name. */
function editDistance(a: string, b: string): number {
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const row = [i];
    for (let j = 1; j <= b.length; j++) row[j] = Math.min(prev[j]! + 1, row[j - 1]! + 1, prev[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
    prev = row;
  }
  return prev[b.length]!;
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
  for (const key of keys()) {
    const name = envName(key.path);
    const value = env[name];
    if (value === undefined) continue;
    fromEnv.set(key.path.join('.'), name);
    let o: unknown = raw;
    for (const k of key.path.slice(0, -1)) {
      const r = o as Record<string, unknown>;
      o = r[k] ??= {};
    }
    // A file that holds something else where a section belongs is reported by the schema.
    if (o !== null && typeof o === 'object' && !Array.isArray(o)) (o as Record<string, unknown>)[key.path[key.path.length - 1]!] = envValue(value, key);
  }
  const parsed = parseWith(ConfigSchema, raw);
  if (!parsed.ok) {
    const problems = parsed.issues.map((i) => {
      const name = variableOf(fromEnv, i.path);
      return `${i.path || 'config'}${name ? ` (${name})` : ''}: ${i.message}`;
    });
    throw new ConfigError(`invalid configuration: ${problems.join('; ')}`);
  }
  const c = parsed.value;
  const problems = [...portProblems(c, fromEnv), ...memberProblems(c)];
  if (problems.length > 0) throw new ConfigError(`invalid configuration: ${problems.join('; ')}`);
  // Relative paths in a file are relative to the file, so one file works from any
  // directory; relative paths from a variable or a default are relative to the
  // working directory, like any path typed in a shell.
  const base = opts.file ? resolve(opts.file, '..') : process.cwd();
  const rel = (key: string, p: string | null) => (p === null || isAbsolute(p) ? p : resolve(fromEnv.has(key) ? process.cwd() : base, p));
  c.data_dir = raw.data_dir === undefined ? resolve(c.data_dir) : rel('data_dir', c.data_dir)!;
  c.tls = { ca: rel('tls.ca', c.tls.ca), cert: rel('tls.cert', c.tls.cert), key: rel('tls.key', c.tls.key) };
  c.admin_tokens_file = rel('admin_tokens_file', c.admin_tokens_file);
  return c;
}

/** The variable that set the value at `path` (`members.0.id` was set by APL_MEMBERS), if one did. */
function variableOf(fromEnv: Map<string, string>, path: string): string | undefined {
  const parts = path.split('.');
  for (let n = parts.length; n > 0; n--) {
    const name = fromEnv.get(parts.slice(0, n).join('.'));
    if (name) return name;
  }
  return undefined;
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
