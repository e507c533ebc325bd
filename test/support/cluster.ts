/**
 * Test support: a cluster of real server processes on 127.0.0.1, each with its own
 * data directory, free ports for its three listeners and the test CA's certificate
 * for its id. Members can be killed, stopped, restarted and paused; every process is
 * killed when the test process exits.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { removeOnExit } from './cleanup.js';
import { nodeEnv, spawnNode, type NodeProcess } from './process.js';
import { Client, Issuer, TOKENS, testCerts, type Response } from './node.js';
import { contract } from './contract.js';

export interface Member {
  id: string;
  peer_addr: string;
  agent_url: string;
  admin_url: string;
  ports: { agent: number; admin: number; peer: number };
}

/** One member's planes, as the test sees them (a TestNode-like handle for bootstrap()). */
export interface MemberHandle {
  id: string;
  agent: Client;
  admin: Client;
  issuer: Issuer;
  adm(who: keyof typeof TOKENS, method: string, path: string, body?: unknown): Promise<Response>;
  api(method: string, path: string, opts?: { body?: unknown; raw?: string; token?: string; headers?: Record<string, string> }): Promise<Response>;
}

export interface Cluster {
  members: Member[];
  dirs: Record<string, string>;
  issuer: Issuer;
  handle(id: string): MemberHandle;
  process(id: string): NodeProcess | null;
  start(id: string, env?: Record<string, string>): Promise<NodeProcess>;
  kill(id: string): Promise<void>;
  stop(id: string): Promise<void>;
  /** The member every live member names as leader, once they agree; throws after `timeoutMs`. */
  leader(timeoutMs?: number): Promise<string>;
  close(): Promise<void>;
}

/**
 * An operator's admin request to member `id`, sent again every 200 ms while it is refused
 * for a moment only: no answer, no primary known (421, 503), or a membership change that
 * must wait (409: one change at a time, a primary that has not yet committed an entry of
 * its term, a learner not caught up, a leadership transfer). Answers the last response,
 * after `timeoutMs` at most.
 */
export async function adminRetried(c: Cluster, id: string, method: string, path: string, body?: unknown, timeoutMs = 20_000): Promise<Response | { status: 0; text: string; body: null }> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const r = await c.handle(id).adm('operator', method, path, body).catch((err: Error) => ({ status: 0 as const, text: err.message, body: null }));
    const waits = r.status === 0 || r.status === 421 || r.status === 503 || (r.status === 409 && /one change at a time|entry of its term|not caught up|transfer/.test(r.text));
    if (!waits || Date.now() > deadline) return r;
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Waits until member `id` answers /readyz 200; throws, with its log, after `timeoutMs`. */
export async function waitReady(c: Cluster, id: string, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while ((await c.handle(id).agent.request('GET', '/readyz').catch(() => null))?.status !== 200) {
    if (Date.now() > deadline) throw new Error(`${id} is not ready: ${c.process(id)?.output()}`);
    await sleep(50);
  }
}

/** Waits until member `id` has logged a line matching `pattern`; throws, with its log, after 10 s. */
export async function waitLogged(c: Cluster, id: string, pattern: RegExp): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (!pattern.test(c.process(id)!.output())) {
    if (Date.now() > deadline) throw new Error(`${id} did not log ${pattern}: ${c.process(id)!.output()}`);
    await sleep(50);
  }
}

/** The first group of `pattern` in member `id`'s /metrics, as a number; 0 when it does not match. */
export async function metricOf(c: Cluster, id: string, pattern: RegExp): Promise<number> {
  const r = await c.handle(id).admin.request('GET', '/metrics', { token: TOKENS.operator });
  const m = pattern.exec(r.text);
  return m ? Number(m[1]) : 0;
}

export interface Digest {
  applied_index: number;
  state_hash: string;
  digest: string;
}

/** The digests of the primary and of a member, once the member has applied what the primary had (within 5 s). */
export async function caughtUp(c: Cluster, leader: string, member: string): Promise<{ a: Digest; b: Digest }> {
  const digest = async (id: string) => (await c.handle(id).adm('operator', 'GET', '/admin/v1/log/digest')).body as Digest;
  const a = await digest(leader);
  let b = await digest(member);
  for (let k = 0; b.applied_index < a.applied_index && k < 100; k++) {
    await sleep(50);
    b = await digest(member);
  }
  return { a, b };
}

/** The ports handed out by this process, never handed out twice. */
const handedOut = new Set<number>();
const PORT_RANGE = { low: 20_000, high: 32_767 };

/**
 * A port that is free now, for a listener whose address must be known before it
 * starts (a cluster member's, listed in the others' configuration). It is drawn at
 * random below the kernel's ephemeral range (32768 and up on Linux), where no
 * outgoing connection and no `listen(0)` of a parallel test can take it between this
 * check and the member's bind; two test files drawing the same port is left to
 * `startCluster`'s retry.
 */
export async function freePort(): Promise<number> {
  for (;;) {
    const port = PORT_RANGE.low + Math.floor(Math.random() * (PORT_RANGE.high - PORT_RANGE.low + 1));
    if (handedOut.has(port)) continue;
    const free = await new Promise<boolean>((resolve) => {
      const s = createServer();
      s.once('error', () => resolve(false));
      s.listen(port, '127.0.0.1', () => s.close(() => resolve(true)));
    });
    if (!free) continue;
    handedOut.add(port);
    return port;
  }
}

/**
 * Starts `ids` as one cluster; `env` adds APL_ settings to every member. `spares` get
 * ports, a data directory and a certificate but are not started nor listed to the
 * others: `start(spare)` starts one with cluster_state join, to be added at run time.
 */
export async function startCluster(opts: StartOptions = {}): Promise<Cluster> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await startClusterOnce(opts);
    } catch (e) {
      // Another test file bound one of the drawn ports first: draw them all again.
      if (attempt < 3 && String(e).includes('EADDRINUSE')) continue;
      throw e;
    }
  }
}

interface StartOptions {
  ids?: string[];
  spares?: string[];
  env?: Record<string, string | undefined>;
  clusterId?: string;
  /** the address member `from` reaches member `to` at (a proxy, to partition them); default its peer listener. */
  peerAddr?: (from: string, to: Member) => string | Promise<string>;
  /** the members' main.js (default: this checkout's), to run another build. */
  mainJs?: string;
  /** called with each log line of a member's but its request lines, from every start. */
  onEvent?: (id: string, line: string) => void;
}

async function startClusterOnce(opts: StartOptions): Promise<Cluster> {
  const ids = opts.ids ?? ['n1', 'n2', 'n3'];
  const spares = opts.spares ?? [];
  const certs = testCerts();
  const members: Member[] = [];
  for (const id of [...ids, ...spares]) {
    const ports = { agent: await freePort(), admin: await freePort(), peer: await freePort() };
    members.push({ id, ports, peer_addr: `127.0.0.1:${ports.peer}`, agent_url: `https://127.0.0.1:${ports.agent}`, admin_url: `https://127.0.0.1:${ports.admin}` });
  }
  const dirs = Object.fromEntries([...ids, ...spares].map((id) => [id, removeOnExit(mkdtempSync(join(tmpdir(), `apl-cluster-${id}-`)))]));
  const issuer = await Issuer.create();
  const processes = new Map<string, NodeProcess>();
  const clients = new Map<string, { agent: Client; admin: Client }>();
  const lists = new Map<string, string>();
  for (const from of [...ids, ...spares]) {
    const view = [];
    // A spare knows the bootstrap members and itself; the others learn of it from the log.
    for (const m of members.filter((x) => ids.includes(x.id) || x.id === from)) {
      const peer_addr = m.id !== from && opts.peerAddr ? await opts.peerAddr(from, m) : m.peer_addr;
      view.push({ id: m.id, peer_addr, agent_url: m.agent_url, admin_url: m.admin_url });
    }
    lists.set(from, JSON.stringify(view));
  }
  const memberList = (from: string) => lists.get(from)!;

  const envOf = (m: Member, extra: Record<string, string>) => nodeEnv(dirs[m.id]!, {
    APL_NODE_ID: m.id,
    APL_AGENT_PORT: String(m.ports.agent),
    APL_ADMIN_PORT: String(m.ports.admin),
    APL_PEER_PORT: String(m.ports.peer),
    APL_MEMBERS: memberList(m.id),
    APL_CLUSTER_ID: opts.clusterId ?? 'apl-test-cluster',
    APL_TLS_CERT: join(certs.dir, `${m.id}.pem`),
    APL_TLS_KEY: join(certs.dir, `${m.id}-key.pem`),
    APL_TICK_INTERVAL_MS: '3600000',
    ...opts.env,
    ...extra,
  });
  const member = (id: string) => {
    const m = members.find((x) => x.id === id);
    if (!m) throw new Error(`${id} is not a member`);
    return m;
  };
  const start = async (id: string, extra: Record<string, string> = {}) => {
    const join: Record<string, string> = spares.includes(id) ? { APL_CLUSTER_STATE: 'join' } : {};
    const onEvent = opts.onEvent;
    const p = await spawnNode(envOf(member(id), { ...join, ...extra }), {
      startTimeoutMs: 30_000,
      ...(opts.mainJs === undefined ? {} : { mainJs: opts.mainJs }),
      ...(onEvent === undefined ? {} : { onEvent: (line: string) => onEvent(id, line) }),
    });
    processes.set(id, p);
    return p;
  };
  const clientsOf = (id: string) => {
    let c = clients.get(id);
    if (!c) {
      const m = member(id);
      c = { agent: new Client(m.agent_url, certs.ca), admin: new Client(m.admin_url, certs.ca) };
      clients.set(id, c);
    }
    return c;
  };
  const cluster: Cluster = {
    members, dirs, issuer,
    handle: (id) => {
      const c = clientsOf(id);
      const checked = async (plane: 'agent' | 'admin', p: Promise<Response>, method: string, path: string) => {
        const r = await p;
        contract(plane, method, path, r);
        return r;
      };
      return {
        id, agent: c.agent, admin: c.admin, issuer,
        adm: (who, method, path, body) => checked('admin', c.admin.request(method, path, { body, token: TOKENS[who] }), method, path),
        api: (method, path, o = {}) => checked('agent', c.agent.request(method, path, o), method, path),
      };
    },
    process: (id) => processes.get(id) ?? null,
    start,
    kill: async (id) => {
      await processes.get(id)?.kill();
      processes.delete(id);
    },
    stop: async (id) => {
      await processes.get(id)?.stop();
      processes.delete(id);
    },
    leader: async (timeoutMs = 10_000) => {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const views = await Promise.all([...processes.keys()].map(async (id) => {
          const r = await clientsOf(id).admin.request('GET', '/admin/v1/cluster', { token: TOKENS.operator }).catch(() => null);
          return r?.status === 200 ? (r.body as { leader: string | null; role: string; node: string }) : null;
        }));
        const leaders = new Set(views.map((v) => v?.leader ?? null));
        const [only] = leaders;
        if (leaders.size === 1 && only && views.some((v) => v?.node === only && v.role === 'leader')) return only;
        if (Date.now() > deadline) throw new Error(`no agreed leader within ${timeoutMs} ms: ${JSON.stringify(views)}`);
        await new Promise((r) => setTimeout(r, 50));
      }
    },
    close: async () => {
      for (const c of clients.values()) {
        c.agent.close();
        c.admin.close();
      }
      await Promise.all([...processes.values()].map((p) => p.kill()));
      processes.clear();
      for (const d of Object.values(dirs)) rmSync(d, { recursive: true, force: true });
    },
  };
  const started = await Promise.allSettled(ids.map((id) => start(id)));
  const failed = started.find((r) => r.status === 'rejected');
  if (failed) {
    await cluster.close();
    throw failed.reason;
  }
  return cluster;
}
