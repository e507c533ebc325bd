/**
 * The administrative plane: one method per route, as a principal (the bearer token
 * given). Mutations go through the replicated log; a 421 from a replica that cannot
 * take them is followed across the configured addresses (transport.ts).
 */
import type { IncomingMessage } from 'node:http';
import { createInterface } from 'node:readline';
import { call, errorOf, query, seg } from './call.js';
import { TransportError } from './errors.js';
import { follow, type FeedOptions, type FeedRecord } from './feed.js';
import type { components, operations } from './generated/admin-plane.js';
import { INT128_PLANS } from './generated/contract.js';
import { assertRuntime, type Plan } from './json.js';
import { pageQuery, pages, type PageOptions } from './pages.js';
import { Transport, answerOf, isUntaken, type TransportOptions } from './transport.js';

type S = components['schemas'];
/** The JSON body of an operation's answer with `status`. */
type Body<Op extends keyof operations, Status extends number = 200> = operations[Op]['responses'] extends { [K in Status]: { content: { 'application/json': infer B } } } ? B : never;

export type TrustRoot = S['TrustRoot'];
export type Party = S['Party'];
export type Binding = S['Binding'];
export type AdminAccount = S['AccountBalance'];
export type AdminUsageReport = S['AdminUsageReport'];
export type AdminPolicy = S['Policy'];
export type DryRunReport = S['DryRunReport'];
export type Cluster = S['Cluster'];
export type Digest = S['Digest'];
export type Transfer = S['Transfer'];
export type MembershipChange = S['MembershipChange'];
export type PolicyList = Body<'listPolicies'>;
export type TrustRootList = Body<'listTrustRoots'>;
export type PartyList = Body<'listParties'>;
export type BindingList = Body<'listAgents'>;

export interface AdminClientOptions extends Omit<TransportOptions, 'urls'> {
  /** url is the admin-plane base URL, or one per replica. */
  url: string | readonly string[];
  /** token is the principal's admin token. */
  token: string;
}

const plan = (op: keyof operations): Plan | undefined => (INT128_PLANS.admin as Record<string, Plan>)[op];

export interface ExportOptions {
  /** onProgress is told the bytes received so far, as they arrive. */
  onProgress?: (bytes: number) => void;
}

export class AdminClient {
  readonly transport: Transport;
  private readonly token: string;

  constructor(o: AdminClientOptions) {
    assertRuntime();
    this.transport = new Transport({ ...o, urls: typeof o.url === 'string' ? [o.url] : o.url });
    this.token = o.token;
  }

  addTrustRoot(body: S['TrustRootRequest']): Promise<TrustRoot> {
    return this.send('POST', '/admin/v1/trust-roots', 'addTrustRoot', body);
  }
  /** One page of the trust roots, in issuer order. */
  async listTrustRoots(o: PageOptions = {}): Promise<TrustRootList> {
    return this.send('GET', `/admin/v1/trust-roots${query(pageQuery(o))}`, 'listTrustRoots');
  }
  /** Every trust root, a page at a time from `after` on (pages.ts). */
  allTrustRoots(o: PageOptions = {}): AsyncGenerator<TrustRoot> {
    return pages((after) => this.listTrustRoots({ ...o, after }), (p) => p.trust_roots, o.after);
  }
  removeTrustRoot(issuer: string): Promise<TrustRoot> {
    return this.send('DELETE', `/admin/v1/trust-roots/${seg(issuer)}`, 'removeTrustRoot');
  }
  addParty(body: S['PartyRequest']): Promise<Party> {
    return this.send('POST', '/admin/v1/parties', 'addParty', body);
  }
  /** One page of the parties, in id order. */
  async listParties(o: PageOptions = {}): Promise<PartyList> {
    return this.send('GET', `/admin/v1/parties${query(pageQuery(o))}`, 'listParties');
  }
  /** Every party, a page at a time from `after` on. */
  allParties(o: PageOptions = {}): AsyncGenerator<Party> {
    return pages((after) => this.listParties({ ...o, after }), (p) => p.parties, o.after);
  }
  bindAgent(body: S['BindingRequest']): Promise<Binding> {
    return this.send('POST', '/admin/v1/agents', 'bindAgent', body);
  }
  /** One page of the agent bindings, in agent order. */
  async listAgents(o: PageOptions = {}): Promise<BindingList> {
    return this.send('GET', `/admin/v1/agents${query(pageQuery(o))}`, 'listAgents');
  }
  /** Every agent binding, a page at a time from `after` on. */
  allAgents(o: PageOptions = {}): AsyncGenerator<Binding> {
    return pages((after) => this.listAgents({ ...o, after }), (p) => p.agents, o.after);
  }
  unbindAgent(agent: string): Promise<Binding> {
    return this.send('DELETE', `/admin/v1/agents/${seg(agent)}`, 'unbindAgent');
  }
  openAccount(body: S['AccountRequest']): Promise<AdminAccount> {
    return this.send('POST', '/admin/v1/accounts', 'openAccount', body);
  }
  getAccount(id: string): Promise<AdminAccount> {
    return this.send('GET', `/admin/v1/accounts/${seg(id)}`, 'getAccount');
  }
  openUsage(body: S['UsageRequest']): Promise<AdminUsageReport> {
    return this.send('POST', '/admin/v1/usages', 'openUsage', body);
  }
  getUsage(id: string): Promise<AdminUsageReport> {
    return this.send('GET', `/admin/v1/usages/${seg(id)}`, 'getUsageAdmin');
  }
  draftPolicy(body: S['PolicyRequest']): Promise<AdminPolicy> {
    return this.send('POST', '/admin/v1/policies', 'draftPolicy', body);
  }
  /** One page of the policies, in id order, and the active one. */
  async listPolicies(o: PageOptions = {}): Promise<PolicyList> {
    return this.send('GET', `/admin/v1/policies${query(pageQuery(o))}`, 'listPolicies');
  }
  /** Every policy, a page at a time from `after` on (the active one's id is `listPolicies().active`). */
  allPolicies(o: PageOptions = {}): AsyncGenerator<AdminPolicy> {
    return pages((after) => this.listPolicies({ ...o, after }), (p) => p.policies, o.after);
  }
  getPolicy(id: string): Promise<AdminPolicy> {
    return this.send('GET', `/admin/v1/policies/${seg(id)}`, 'getPolicy');
  }
  reviewPolicy(id: string, body: S['LifecycleRequest'] = {}): Promise<AdminPolicy> {
    return this.send('POST', `/admin/v1/policies/${seg(id)}/review`, 'reviewPolicy', body);
  }
  approvePolicy(id: string, body: S['LifecycleRequest'] = {}): Promise<AdminPolicy> {
    return this.send('POST', `/admin/v1/policies/${seg(id)}/approve`, 'approvePolicy', body);
  }
  activatePolicy(id: string, body: S['LifecycleRequest'] = {}): Promise<AdminPolicy> {
    return this.send('POST', `/admin/v1/policies/${seg(id)}/activate`, 'activatePolicy', body);
  }
  dryRunPolicy(id: string, body: S['DryRunRequest'] = {}): Promise<DryRunReport> {
    return this.send('POST', `/admin/v1/policies/${seg(id)}/dry-run`, 'dryRunPolicy', body);
  }
  getCluster(): Promise<Cluster> {
    return this.send('GET', '/admin/v1/cluster', 'getCluster');
  }
  /** Asks the primary to hand over to a member; `transferring_to` is null when it already leads. */
  transferLeadership(body: S['TransferRequest']): Promise<Transfer> {
    return this.send('POST', '/admin/v1/cluster/transfer-leadership', 'transferLeadership', body);
  }
  /** Adds a member as a learner (operator); answered once the change is applied on the member asked. */
  addMember(body: S['MemberRequest']): Promise<MembershipChange> {
    return this.send('POST', '/admin/v1/cluster/members', 'addMember', body);
  }
  /** Promotes a learner that has caught up to a voter (operator). */
  promoteMember(id: string): Promise<MembershipChange> {
    return this.send('POST', `/admin/v1/cluster/members/${seg(id)}/promote`, 'promoteMember');
  }
  /** Removes a member, voter or learner (operator); the primary hands over first when it is the one removed. */
  removeMember(id: string): Promise<MembershipChange> {
    return this.send('DELETE', `/admin/v1/cluster/members/${seg(id)}`, 'removeMember');
  }
  /** The hash-chain head, the applied index, the tick and the state hash. */
  getDigest(): Promise<Digest> {
    return this.send('GET', '/admin/v1/log/digest', 'getDigest');
  }
  /** Prometheus metrics, as text. */
  async metrics(): Promise<string> {
    return (await call<string>(this.transport, 'GET', '/metrics', { text: true })).value;
  }

  /**
   * The log as it streams in, one NDJSON line at a time (`{index, op, result,
   * entry_hash}` as canonical JSON text), never held whole.
   */
  async *exportLog(o: ExportOptions = {}): AsyncGenerator<string> {
    const res = await this.openExport();
    let bytes = 0;
    res.on('data', (c: Buffer) => {
      bytes += c.length;
      o.onProgress?.(bytes);
    });
    const lines = createInterface({ input: res, crlfDelay: Infinity });
    try {
      for await (const line of lines) yield line;
    } catch (err) {
      // An export cut off part-way is no answer, as for any other call.
      if (err instanceof TransportError) throw err;
      throw new TransportError(this.transport.url, (err as NodeJS.ErrnoException).code ?? 'ECONNRESET', `the export was cut off: ${(err as Error).message}`, { cause: err });
    } finally {
      lines.close();
      res.destroy();
    }
  }

  /**
   * The export's answer, once it is 200. A replica that answers 422 `gateway_error`
   * (removed from the cluster, stopping: nothing of it is the caller's) is passed over
   * for the next configured one, as the transport passes it over for a whole answer.
   */
  private async openExport(): Promise<IncomingMessage> {
    const tried = new Set<string>();
    let url: string | undefined;
    for (;;) {
      const res = await this.transport.open('GET', '/admin/v1/log/export', { headers: { authorization: `Bearer ${this.token}`, accept: 'application/x-ndjson' } }, url);
      if (res.statusCode === 200) return res;
      const answer = await answerOf(res, url ?? this.transport.url);
      tried.add(answer.url);
      url = isUntaken(answer) ? this.transport.urls.find((u) => !tried.has(u)) : undefined;
      if (url === undefined) throw errorOf(answer);
    }
  }

  /**
   * The change feed from `from` on, live: `for await (const r of admin.feed({ from }))`.
   * It reconnects and resumes by itself after a disconnect, and ends when `signal`
   * aborts (feed.ts says what it guarantees). Needs the feed or operator role.
   */
  feed(o: FeedOptions = {}): AsyncGenerator<FeedRecord> {
    return follow(this.transport, this.token, o);
  }

  close(): void {
    this.transport.close();
  }

  private async send<T>(method: string, path: string, op: keyof operations, body?: unknown): Promise<T> {
    return (await call<T>(this.transport, method, path, { token: this.token, body, plan: plan(op) })).value;
  }
}
