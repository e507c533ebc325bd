/**
 * Test support: a standalone node on free ports of 127.0.0.1 with its own data
 * directory, a lossless HTTPS client that trusts the node's CA, an issuer of
 * attestations, the standard fixtures, and the contract check of every response
 * against the committed OpenAPI documents.
 */
import { execFileSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { Agent, request } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PublicProtocol, type Claims } from 'paseto';
import { ExportPublicKeyFactory, GenerateKeyPairFactory, SignFactory, type SecretKey } from 'paseto/v4/public';
import { parseJson, stringifyJson } from '@apl/core';
import { CERT_SCRIPT, ConfigSchema, createLogger, startNode, type AdminPrincipal, type Config, type Logger, type RunningNode, type WrapDb } from '@apl/node';
import { removeOnExit } from './cleanup.js';
import { contract } from './contract.js';

let certDir: string | null = null;

/** One CA and node certificate per test process, made by the project's own script. */
export function testCerts(): { dir: string; ca: string; cert: string; key: string } {
  if (!certDir) {
    certDir = mkdtempSync(join(tmpdir(), 'apl-certs-'));
    execFileSync('bash', [CERT_SCRIPT, certDir, 'n1', 'n2', 'n3', 'n4', 'n5'], { stdio: 'ignore' });
    removeOnExit(certDir); // on a signal too (a benchmark stopped with Ctrl-C), not only at a normal exit
  }
  return { dir: certDir, ca: join(certDir, 'ca.pem'), cert: join(certDir, 'n1.pem'), key: join(certDir, 'n1-key.pem') };
}

export const TOKENS = {
  author: randomBytes(18).toString('base64url'),
  reviewer: randomBytes(18).toString('base64url'),
  approver: randomBytes(18).toString('base64url'),
  operator: randomBytes(18).toString('base64url'),
  /** A principal with every policy role, to show that four eyes hold for one person too. */
  multi: randomBytes(18).toString('base64url'),
  /** A settlement rail's credential: the feed role alone. */
  feed: randomBytes(18).toString('base64url'),
};

const principal = (name: string, token: string, roles: AdminPrincipal['roles']): AdminPrincipal => ({
  name, roles, token_sha256: createHash('sha256').update(token).digest('hex'),
});
export const PRINCIPALS: AdminPrincipal[] = [
  principal('alice', TOKENS.author, ['author']),
  principal('bob', TOKENS.reviewer, ['reviewer']),
  principal('carol', TOKENS.approver, ['approver']),
  principal('ops', TOKENS.operator, ['operator']),
  principal('dana', TOKENS.multi, ['author', 'reviewer', 'approver']),
  principal('rail', TOKENS.feed, ['feed']),
];

export interface Response {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  text: string;
  /** body parsed losslessly: integers beyond 2^53 are bigint. */
  body: any;
}

export class Client {
  private readonly agent: Agent;
  constructor(private readonly base: string, ca: string) {
    this.agent = new Agent({ ca: readFileSync(ca), keepAlive: true, maxSockets: 16 });
  }

  request(method: string, path: string, opts: { body?: unknown; raw?: string | Buffer; token?: string; headers?: Record<string, string> } = {}): Promise<Response> {
    const payload = opts.raw ?? (opts.body === undefined ? undefined : stringifyJson(opts.body));
    const headers: Record<string, string> = { ...(payload === undefined ? {} : { 'content-type': 'application/json' }), ...opts.headers };
    if (opts.token) headers.authorization = `Bearer ${opts.token}`;
    return this.send(method, path, headers, payload, false);
  }

  private send(method: string, path: string, headers: Record<string, string>, payload: string | Buffer | undefined, retried: boolean): Promise<Response> {
    return new Promise((resolve, reject) => {
      const req = request(`${this.base}${path}`, { method, agent: this.agent, headers }, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          let body: unknown = undefined;
          if (/^application\/json\b/.test(String(res.headers['content-type'])) && text.length > 0) body = parseJson(text);
          resolve({ status: res.statusCode!, headers: res.headers, text, body });
        });
      });
      req.on('error', (err: NodeJS.ErrnoException) => {
        // As the SDK does (packages/client, transport.ts): a kept-alive connection the
        // server closed while idle fails the first write on it; the request never
        // reached the server, so it is sent again, once. (Seen once in the crash test,
        // a socket hang-up on a read after its long checks between two requests.)
        if (!retried && req.reusedSocket && err.code === 'ECONNRESET') this.send(method, path, headers, payload, true).then(resolve, reject);
        else reject(err);
      });
      if (payload !== undefined) req.write(payload);
      req.end();
    });
  }

  close(): void {
    this.agent.destroy();
  }
}

/** An issuer of attestations with an Ed25519 key. */
export class Issuer {
  private static readonly v4 = new PublicProtocol(GenerateKeyPairFactory, SignFactory, ExportPublicKeyFactory);
  private constructor(readonly name: string, readonly paserk: string, private readonly secret: SecretKey) {}

  static async create(name = 'acme-agents'): Promise<Issuer> {
    const { publicKey, secretKey } = await Issuer.v4.GenerateKeyPair();
    return new Issuer(name, await Issuer.v4.ExportPublicKey(publicKey), secretKey);
  }

  /** Signs an attestation for `agent`; `claims` override the defaults. */
  sign(agent: string, claims: Record<string, unknown> = {}): Promise<string> {
    const c: Record<string, unknown> = {
      iss: this.name, sub: agent, aud: 'agent-plane-ledger', jti: randomBytes(6).toString('hex'),
      exp: new Date(Date.now() + 3_600_000).toISOString(), cap: ['purchase.*', 'usage.record', 'receipt.attach'], ...claims,
    };
    for (const k of Object.keys(c)) if (c[k] === undefined) delete c[k];
    return Issuer.v4.Sign(this.secret, c as Claims, { addIssuedAt: false });
  }
}

export const AGENT_A = 'agent://acme.example/agent/buyer-7';
export const AGENT_B = 'agent://globex.example/agent/ops-1';
export const AGENT_UNBOUND = 'agent://acme.example/agent/stranger';
export const EVIDENCE = '3a7bd3e2360a3d29eea436fcfb7e44c735d117c42d1c1835420b6b9942dd4f1b';

export const POLICY = {
  rules: [
    { id: 'R-cap-large', modality: 'prohibition', priority: 10, match: { action: 'purchase.*' },
      when: [{ left: 'amount', op: 'gt', right: '500000', currency: 'USD' }], basis: 'Purchases above 5,000.00 USD are forbidden for agents' },
    { id: 'R-purchase', modality: 'permission', priority: 100, match: { action: 'purchase.*' },
      obligations: [{ id: 'O-receipt', action: 'receipt.attach', deadline_ticks: 5,
        discharge_when: [{ left: 'evidence', op: 'count_gte', right: 1 }],
        repair: [{ id: 'D-refund', action: 'purchase.refund', deadline_ticks: 3, blocks: ['purchase.*'] }] }],
      basis: 'Agents may purchase; a receipt is due within 5 ticks' },
    { id: 'R-usage', modality: 'permission', priority: 100, match: { action: 'usage.record' }, basis: 'Agents record usage' },
  ],
};

export interface TestNode {
  node: RunningNode;
  config: Config;
  agent: Client;
  admin: Client;
  issuer: Issuer;
  /** Sends an admin request as a principal (author, reviewer, approver, operator) and checks it against the contract. */
  adm(who: keyof typeof TOKENS, method: string, path: string, body?: unknown): Promise<Response>;
  /** Sends an agent-plane request and checks it against the contract. */
  api(method: string, path: string, opts?: { body?: unknown; raw?: string | Buffer; token?: string; headers?: Record<string, string> }): Promise<Response>;
  close(): Promise<void>;
}

/** Starts a node on free ports; `overrides` are configuration keys. */
export async function startTestNode(overrides: Record<string, unknown> = {}, dataDir?: string, log?: Logger, wrapDb?: WrapDb): Promise<TestNode> {
  const certs = testCerts();
  const dir = dataDir ?? mkdtempSync(join(tmpdir(), 'apl-node-'));
  const config = ConfigSchema.parse({
    data_dir: dir, agent_port: 0, admin_port: 0, dev_setup: false,
    tls: { ca: certs.ca, cert: certs.cert, key: certs.key },
    tick_interval_ms: 3_600_000, log_level: 'silent', ...overrides,
    // Small Raft log segments, as nodeEnv sets them for a process.
    raft: { wal_segment_bytes: 1 << 20, ...(overrides.raft as object | undefined) },
  });
  const node = await startNode(config, PRINCIPALS, { log: log ?? createLogger('silent', config.node_id), ...(wrapDb ? { wrapDb } : {}) });
  const agent = new Client(node.agentUrl, certs.ca);
  const admin = new Client(node.adminUrl, certs.ca);
  const checked = async (plane: 'agent' | 'admin', p: Promise<Response>, method: string, path: string) => {
    const r = await p;
    contract(plane, method, path, r);
    return r;
  };
  return {
    node, config, agent, admin, issuer: await Issuer.create(),
    adm: (who, method, path, body) => checked('admin', admin.request(method, path, { body, token: TOKENS[who] }), method, path),
    api: (method, path, opts = {}) => checked('agent', agent.request(method, path, opts), method, path),
    close: async () => {
      agent.close();
      admin.close();
      await node.close();
      if (!dataDir) rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** Trust root, two parties with agents, accounts and usage balances, and POLICY in force as pol_1. */
export async function bootstrap(t: Pick<TestNode, 'adm' | 'issuer'>): Promise<void> {
  const steps: [keyof typeof TOKENS, string, unknown][] = [
    ['operator', '/admin/v1/trust-roots', { issuer: t.issuer.name, public_key: t.issuer.paserk }],
    ['operator', '/admin/v1/parties', { id: 'party_acme' }],
    ['operator', '/admin/v1/parties', { id: 'party_globex' }],
    ['operator', '/admin/v1/agents', { agent: AGENT_A, party: 'party_acme' }],
    ['operator', '/admin/v1/agents', { agent: AGENT_B, party: 'party_globex' }],
    ['operator', '/admin/v1/accounts', { id: 'acc_acme_cash', party: 'party_acme' }],
    ['operator', '/admin/v1/accounts', { id: 'acc_globex_cash', party: 'party_globex' }],
    ['operator', '/admin/v1/accounts', { id: 'acc_merchant_books' }],
    ['operator', '/admin/v1/usages', { id: 'usage_acme_llm', currency: 'USD', owner: 'party_acme' }],
    ['operator', '/admin/v1/usages', { id: 'usage_globex_llm', currency: 'USD', owner: 'party_globex' }],
    ['operator', '/admin/v1/usages', { id: 'usage_unowned', currency: 'USD' }],
    ['author', '/admin/v1/policies', { id: 'pol_1', bundle: POLICY }],
    ['reviewer', '/admin/v1/policies/pol_1/review', {}],
    ['approver', '/admin/v1/policies/pol_1/approve', {}],
    ['approver', '/admin/v1/policies/pol_1/activate', {}],
  ];
  for (const [who, path, body] of steps) {
    // A 503 commit_unavailable (a cluster's election under load) is retried, as its
    // message says; a 409 on a retry means the first attempt was recorded after all.
    for (let attempt = 0; ; attempt++) {
      const r = await t.adm(who, 'POST', path, body);
      if (r.status < 300 || (attempt > 0 && r.status === 409)) break;
      if (r.status !== 503 || attempt === 4) throw new Error(`bootstrap ${path}: ${r.status} ${r.text}`);
      await new Promise((done) => setTimeout(done, 200));
    }
  }
}

let seq = 0;
/** An intent envelope of agent A paying `minor` USD to the merchant, with overrides. */
export function envelope(attestation: string, over: Record<string, unknown> = {}): Record<string, unknown> {
  const minor = (over.minor as bigint | number | undefined) ?? 129900;
  const rest = { ...over };
  delete rest.minor;
  return {
    agent: AGENT_A,
    attestation,
    transaction: `txn_${process.pid}_${++seq}`,
    entries: [
      { account: 'acc_acme_cash', side: 'Debit', amount: { minor, currency: 'USD' } },
      { account: 'acc_merchant_books', side: 'Credit', amount: { minor, currency: 'USD' } },
    ],
    action: { action: 'purchase.book', bindings: { merchant: 'books-r-us' } },
    evidence: [EVIDENCE],
    justification: 'Buying the reference book the user asked for',
    policy: 'pol_1',
    ...rest,
  };
}
