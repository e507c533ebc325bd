/**
 * The benchmark workload: a ledger bootstrapped with many parties, each with a bound
 * agent, a cash account and a usage balance, a shared merchant account, and a policy
 * whose verdicts the mix exercises. The mix is what agents of a real deployment send:
 *
 *   - 35 % purchases, one in ten above the policy's cap (ForbiddenRejected); a
 *     permitted purchase creates a receipt obligation;
 *   - 35 % receipt attachments that discharge an agent's oldest open obligation
 *     (more than purchases create, so no party piles them up; with none owed,
 *     a usage record instead);
 *   - 25 % usage records that consume, meter and bill in one move;
 *   - 5 % actions no permission covers (NotPermittedRejected, default deny);
 *   - 10 % reads: a recent transaction of the agent, or its cash balance.
 *
 * It runs in the load generator's process only: it chooses requests and reads the
 * answers it needs (a created obligation's id), nothing else.
 */
import { Issuer } from '../../support/node.js';

export const BENCH_POLICY = {
  rules: [
    { id: 'R-cap-large', modality: 'prohibition', priority: 10, match: { action: 'purchase.*' },
      when: [{ left: 'amount', op: 'gt', right: '500000', currency: 'USD' }], basis: 'Purchases above 5,000.00 USD are forbidden for agents' },
    { id: 'R-purchase', modality: 'permission', priority: 100, match: { action: 'purchase.*' },
      obligations: [{ id: 'O-receipt', action: 'receipt.attach', deadline_ticks: 600,
        discharge_when: [{ left: 'evidence', op: 'count_gte', right: 1 }] }],
      basis: 'Agents may purchase; a receipt is due within 600 ticks' },
    { id: 'R-usage', modality: 'permission', priority: 100, match: { action: 'usage.record' }, basis: 'Agents record usage' },
  ],
};

const EVIDENCE = '3a7bd3e2360a3d29eea436fcfb7e44c735d117c42d1c1835420b6b9942dd4f1b';

export interface AgentFixture {
  uri: string;
  party: string;
  cash: string;
  usage: string;
  attestation: string;
  /** obligations the agent owes, oldest first, as the answers named them. */
  owed: string[];
  /** the agent's recent transactions, for reads. */
  recent: string[];
}

export interface Fixtures {
  agents: AgentFixture[];
  policy: string;
}

/** What the bootstrap needs: an admin call as some principal. */
export type AdminCall = (who: 'operator' | 'author' | 'reviewer' | 'approver', path: string, body: unknown) => Promise<{ status: number; text: string }>;

/** Creates the workload's parties, agents, accounts, usage balances and policy. */
export async function bootstrapWorkload(admin: AdminCall, parties: number, runId: string): Promise<Fixtures> {
  const issuer = await Issuer.create(`bench-${runId}`);
  const must = async (who: Parameters<AdminCall>[0], path: string, body: unknown) => {
    const r = await admin(who, path, body);
    if (r.status >= 300) throw new Error(`bootstrap ${path}: ${r.status} ${r.text}`);
  };
  await must('operator', '/admin/v1/trust-roots', { issuer: issuer.name, public_key: issuer.paserk });
  await must('operator', '/admin/v1/accounts', { id: `acc_merchant_${runId}` });
  const agents: AgentFixture[] = [];
  for (let k = 0; k < parties; k++) {
    const party = `party_${runId}_${k}`;
    const uri = `agent://bench.example/agent/${runId}-${k}`;
    await must('operator', '/admin/v1/parties', { id: party });
    await must('operator', '/admin/v1/agents', { agent: uri, party });
    await must('operator', '/admin/v1/accounts', { id: `acc_cash_${runId}_${k}`, party });
    await must('operator', '/admin/v1/usages', { id: `usage_${runId}_${k}`, currency: 'USD', owner: party });
    const attestation = await issuer.sign(uri, { cap: ['purchase.*', 'usage.record', 'receipt.attach', 'transfer.*'], exp: new Date(Date.now() + 24 * 3_600_000).toISOString() });
    agents.push({ uri, party, cash: `acc_cash_${runId}_${k}`, usage: `usage_${runId}_${k}`, attestation, owed: [], recent: [] });
  }
  const policy = `pol_${runId}`;
  await must('author', '/admin/v1/policies', { id: policy, bundle: BENCH_POLICY });
  await must('reviewer', `/admin/v1/policies/${policy}/review`, {});
  await must('approver', `/admin/v1/policies/${policy}/approve`, {});
  await must('approver', `/admin/v1/policies/${policy}/activate`, {});
  return { agents, policy };
}

export type RequestKind = 'purchase' | 'forbidden' | 'receipt' | 'usage' | 'denied' | 'read';

export interface BenchRequest {
  kind: RequestKind;
  method: 'GET' | 'POST';
  path: string;
  body?: string;
  headers: Record<string, string>;
  agent: AgentFixture;
  transaction?: string;
}

/** A deterministic source of the mix: the same seed gives the same requests. */
export class Mix {
  private n = 0;
  private state: number;
  constructor(private readonly f: Fixtures, private readonly runId: string, seed = 1, private readonly readShare = 0.1) {
    this.state = seed >>> 0 || 1;
  }

  private random(): number {
    // xorshift32: enough to spread the mix; the server never sees it.
    let x = this.state;
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    this.state = x >>> 0;
    return this.state / 0x1_0000_0000;
  }

  next(): BenchRequest {
    const agent = this.f.agents[this.n % this.f.agents.length]!;
    this.n++;
    const roll = this.random();
    if (roll < this.readShare) return this.read(agent);
    const r = (roll - this.readShare) / (1 - this.readShare);
    if (r < 0.35) return this.random() < 0.1 ? this.purchase(agent, 700_000, 'forbidden') : this.purchase(agent, 1 + Math.floor(this.random() * 400_000), 'purchase');
    if (r < 0.7 && agent.owed.length > 0) return this.receipt(agent, agent.owed.shift()!);
    if (r < 0.95) return this.usage(agent);
    return this.intent(agent, 'denied', 'transfer.wire', [], {});
  }

  private purchase(agent: AgentFixture, minor: number, kind: RequestKind): BenchRequest {
    return this.intent(agent, kind, 'purchase.book', [
      { account: agent.cash, side: 'Debit', amount: { minor, currency: 'USD' } },
      { account: `acc_merchant_${this.runId}`, side: 'Credit', amount: { minor, currency: 'USD' } },
    ], {});
  }

  private receipt(agent: AgentFixture, obligation: string): BenchRequest {
    return this.intent(agent, 'receipt', 'receipt.attach', [], { obligation });
  }

  private usage(agent: AgentFixture): BenchRequest {
    const minor = 1 + Math.floor(this.random() * 5000);
    const move = { usage: agent.usage, amount: { minor, currency: 'USD' } };
    return this.intent(agent, 'usage', 'usage.record', [], {}, { consume_usage: move, meter_usage: move, bill_usage: move });
  }

  private intent(agent: AgentFixture, kind: RequestKind, action: string, entries: unknown[], bindings: Record<string, string>, extra: Record<string, unknown> = {}): BenchRequest {
    const transaction = `txn_${this.runId}_${this.n}`;
    const body = JSON.stringify({
      agent: agent.uri, attestation: agent.attestation, transaction, entries, ...extra,
      action: { action, bindings }, evidence: [EVIDENCE], justification: `bench ${kind}`, policy: this.f.policy,
    });
    return { kind, method: 'POST', path: '/api/v1/intents', body, headers: { 'content-type': 'application/json' }, agent, transaction };
  }

  private read(agent: AgentFixture): BenchRequest {
    const headers = { authorization: `Bearer ${agent.attestation}` };
    const txn = agent.recent[agent.recent.length - 1];
    const path = txn !== undefined && this.random() < 0.5 ? `/api/v1/transactions/${txn}` : `/api/v1/accounts/${agent.cash}/balance`;
    return { kind: 'read', method: 'GET', path, headers, agent };
  }

  /** Learns from an answer what later requests need: created obligations, recorded transactions. */
  observe(req: BenchRequest, status: number, body: string): void {
    if (req.method !== 'POST' || status !== 200) return;
    const outcome = JSON.parse(body) as { verdict: string; provenance: { obligations_created?: string[] } };
    req.agent.recent.push(req.transaction!);
    if (req.agent.recent.length > 8) req.agent.recent.shift();
    for (const id of outcome.provenance.obligations_created ?? []) req.agent.owed.push(id);
  }
}
