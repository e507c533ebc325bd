/**
 * The administrative plane (its own HTTPS listener): trust roots, parties, agent
 * bindings, accounts, usage balances, the policy lifecycle, the cluster, and the
 * log's digest and export for auditors.
 *
 * Callers present `Authorization: Bearer <token>`; the token's SHA-256 is compared in
 * constant time with each configured principal's. Mutations go through the
 * replicated log like intents do, with the principal's name and roles in the
 * operation, so the commit point enforces roles and four eyes on every replica.
 */
import type { Express, Request, Response } from 'express';
import { createHash, timingSafeEqual } from 'node:crypto';
import {
  AccountId, AgentUri, Issuer, PartyId, PolicyId, TABLES, UsageId, compileBundle, dryRun, mayPropose, unmatchableValues, policyView, roleRefusal, usageReport, accountView,
  type AdminOperation, type Applied, type Operation, type Party, type Policy, type Principal, type TrustRoot,
} from '@apl/core';
import type { ConfChange, Status } from '@apl/raft';
import { memberContext } from './membership.js';
import { paserkId, toPaserk } from './attest.js';
import { ApiError } from './errors.js';
import { z } from 'zod';
import { bearerToken, errorHandler, JSON_TYPE, jsonBody, noBody, noQuery, notFound, parseRequest, planeApp, queryOf, sendJson, streamLines } from './http.js';
import { feedHandler, type Feeds } from './feed.js';
import type { Logger } from './log.js';
import type { Metrics } from './metrics.js';
import { PAGE_LIMIT_DEFAULT, type Queries } from './queries.js';
import type { StorePosition } from './ledger-store.js';
import type { MemberRole } from './replica.js';
import { feedOnlyRefusal, logPrincipal, type PlaneRole } from './roles.js';
import {
  AccountRequest, BindingRequest, DryRunRequest, LifecycleRequest, loneSurrogates, MemberParam, MemberRequest, pageQuery, PartyRequest, PolicyRequest,
  ReadQuery, TransferRequest, TrustRootRequest, UsageRequest,
} from './wire.js';

// Path parameters that name what a mutation changes. They go into the log, so they
// are held to the log's own field schemas before anything is proposed.
const IssuerParam = z.strictObject({ issuer: Issuer });
const AgentParam = z.strictObject({ agent_uri: AgentUri });
const PolicyParam = z.strictObject({ id: PolicyId });
const AccountParam = z.strictObject({ id: AccountId });
const UsageParam = z.strictObject({ id: UsageId });
// The query of each list: its cursor is an id of what it lists.
const TrustRootsQuery = pageQuery(Issuer, 'an issuer name');
const PartiesQuery = pageQuery(PartyId, 'a party id');
const AgentsQuery = pageQuery(AgentUri, 'an agent URI');
const PoliciesQuery = pageQuery(PolicyId, 'a policy id');

/** An admin operation before the caller and the version are filled in. */
type Unsigned<T> = T extends unknown ? Omit<T, 'v' | 'by'> : never;

export interface AdminPrincipal {
  name: string;
  token_sha256: string;
  roles: PlaneRole[];
}

export interface AdminNode {
  queries: Queries;
  submit(op: Operation): Promise<Applied>;
  readBarrier(): Promise<void>;
  /** Throws when this replica serves no reads at all (removed from the group), local ones included. */
  refuseRead(): void;
  /** The state store's position: applied index, chain head, state hash. */
  position(): StorePosition;
  journal(): AsyncIterable<string>;
  /** the members in force with their addresses (peer_addr null for a standalone node). */
  cluster(): { status: Status; role: MemberRole; members: { id: string; voter: boolean; agent_url: string; admin_url?: string; peer_addr: string | null }[] };
  transferLeadership(to: string): void;
  /** a membership change through the log, resolved once it is applied here. */
  changeMembership(change: ConfChange): Promise<{ index: number }>;
}

export interface AdminOptions {
  node: AdminNode;
  principals: AdminPrincipal[];
  /** feeds serves GET /admin/v1/feed (feed.ts). */
  feeds: Feeds;
  bodyBytesMax: number;
  /** a streamed answer (the log export) whose client reads nothing for this long is cut (http.write_stall_ms). */
  writeStallMs: number;
  openapi: string;
  log: Logger;
  metrics: Metrics;
}

export function adminApp(o: AdminOptions): Express {
  const app = planeApp('admin', o.log, o.metrics);
  const body = jsonBody(o.bodyBytesMax);
  /** A mutation's request: no query, a JSON body. */
  const mutation = [noQuery, ...body];
  const hashes = o.principals.map((p) => ({ p, digest: Buffer.from(p.token_sha256, 'hex') }));

  app.get('/metrics', async (_req, res) => {
    res.status(200).type(o.metrics.contentType).send(await o.metrics.exposition());
  });
  app.get('/admin/openapi.json', (_req, res) => {
    res.status(200).type(JSON_TYPE).send(o.openapi);
  });

  app.use('/admin/v1', (req, res, next) => {
    const token = bearerToken(req, (why) => new ApiError('unauthorized', `No admin token was read: ${why} (Authorization: Bearer <token>).`));
    if (token === null) return next(new ApiError('unauthorized', 'An admin token is required (Authorization: Bearer <token>).'));
    const digest = createHash('sha256').update(token).digest();
    // Compare with every principal so the time taken does not say which one matched.
    let found: AdminPrincipal | null = null;
    for (const { p, digest: d } of hashes) if (timingSafeEqual(d, digest)) found = p;
    if (!found) return next(new ApiError('unauthorized', 'The admin token is not valid.'));
    // A rail's credential (the feed role alone) reads the feed and nothing else.
    const confined = req.path === '/feed' ? null : feedOnlyRefusal(found.name, found.roles);
    if (confined) return next(new ApiError('forbidden', confined));
    res.locals.principal = logPrincipal(found.name, found.roles);
    res.locals.principalName = found.name;
    res.locals.roles = found.roles;
    next();
  });

  /** Proposes an admin operation by the caller and answers its result. */
  const mutate = async (res: Response, op: Unsigned<AdminOperation>, created: boolean) => {
    const by = res.locals.principal as Principal;
    const full = { ...op, v: 1, by } as AdminOperation;
    if (!mayPropose(by, full.type)) throw new ApiError('forbidden', roleRefusal(by, full.type));
    const applied = await o.node.submit(full);
    if (!applied.result.ok) throw ApiError.from(applied.result.error);
    sendJson(res, created ? 201 : 200, applied.result.value);
  };
  const q = o.node.queries;
  /** The query of a read that takes no other parameter. */
  const readQuery = (req: Request) => parseRequest(ReadQuery, queryOf(req), 'query');
  /**
   * Makes local state current unless the query asked for consistency=local, and says
   * which in the Consistency header, as the agent plane's reads do.
   */
  const barrier = async (res: Response, query: z.infer<typeof ReadQuery>) => {
    o.node.refuseRead();
    const local = query.consistency === 'local';
    if (!local) await o.node.readBarrier();
    res.setHeader('Consistency', local ? 'local' : 'linearizable');
  };
  /** A page of a table's records, for a list route; `view` shapes each item. */
  const listed = async <T>(req: Request, res: Response, schema: ReturnType<typeof pageQuery>, prefix: string, view: (id: string, v: T) => unknown) => {
    const query = parseRequest(schema, queryOf(req), 'query');
    await barrier(res, query);
    const page = await q.list<T>(prefix, { after: query.after, limit: query.limit ?? PAGE_LIMIT_DEFAULT });
    return { items: page.items.map(([id, v]) => view(id, v)), next: page.next };
  };

  app.post('/admin/v1/trust-roots', ...mutation, async (req, res) => {
    const r = parseRequest(TrustRootRequest, req.body, 'trust root');
    let public_key: string;
    try {
      public_key = toPaserk(r.public_key);
    } catch (err) {
      throw new ApiError('malformed_request', 'The trust root is not valid.', { issues: [{ path: 'public_key', message: (err as Error).message }] });
    }
    await mutate(res, { type: 'AddTrustRoot', issuer: r.issuer, public_key, key_id: paserkId(public_key) }, true);
  });
  app.delete('/admin/v1/trust-roots/:issuer', noQuery, ...noBody, async (req, res) => {
    const { issuer } = parseRequest(IssuerParam, req.params, 'path');
    await mutate(res, { type: 'RemoveTrustRoot', issuer }, false);
  });
  app.get('/admin/v1/trust-roots', async (req, res) => {
    const { items, next } = await listed<TrustRoot>(req, res, TrustRootsQuery, TABLES.root.prefix, (_, t) => ({ issuer: t.issuer, key_id: t.key_id, public_key: t.public_key }));
    sendJson(res, 200, { trust_roots: items, next });
  });

  app.post('/admin/v1/parties', ...mutation, async (req, res) => mutate(res, { type: 'AddParty', ...parseRequest(PartyRequest, req.body, 'party') }, true));
  app.get('/admin/v1/parties', async (req, res) => {
    const { items, next } = await listed<Party>(req, res, PartiesQuery, TABLES.party.prefix, (id) => ({ id }));
    sendJson(res, 200, { parties: items, next });
  });
  app.post('/admin/v1/agents', ...mutation, async (req, res) => mutate(res, { type: 'BindAgent', ...parseRequest(BindingRequest, req.body, 'agent binding') }, true));
  app.delete('/admin/v1/agents/:agent_uri', noQuery, ...noBody, async (req, res) => {
    const { agent_uri } = parseRequest(AgentParam, req.params, 'path');
    await mutate(res, { type: 'UnbindAgent', agent: agent_uri }, false);
  });
  app.get('/admin/v1/agents', async (req, res) => {
    const { items, next } = await listed<string>(req, res, AgentsQuery, TABLES.agent.prefix, (agent, party) => ({ agent, party }));
    sendJson(res, 200, { agents: items, next });
  });
  app.post('/admin/v1/accounts', ...mutation, async (req, res) => {
    const { party, ...r } = parseRequest(AccountRequest, req.body, 'account');
    await mutate(res, { type: 'OpenAccount', ...r, ...(party == null ? {} : { party }) }, true);
  });
  app.get('/admin/v1/accounts/:id', async (req, res) => {
    const { id } = parseRequest(AccountParam, req.params, 'path');
    await barrier(res, readQuery(req));
    const a = await q.account(id);
    if (!a) throw new ApiError('unknown_account', `No account ${id} exists.`);
    sendJson(res, 200, accountView(a));
  });
  app.post('/admin/v1/usages', ...mutation, async (req, res) => {
    const { owner, ...r } = parseRequest(UsageRequest, req.body, 'usage balance');
    await mutate(res, { type: 'OpenUsage', ...r, ...(owner == null ? {} : { owner }) }, true);
  });
  app.get('/admin/v1/usages/:id', async (req, res) => {
    const { id } = parseRequest(UsageParam, req.params, 'path');
    await barrier(res, readQuery(req));
    const u = await q.usage(id);
    if (!u) throw new ApiError('unknown_usage', `No usage balance ${id} exists.`);
    sendJson(res, 200, { ...usageReport(u), owner: u.owner });
  });

  app.post('/admin/v1/policies', ...mutation, async (req, res) => {
    const draft = parseRequest(PolicyRequest, req.body, 'policy');
    // The commit point checks the bundle as compileBundle does; a new draft is also held
    // here, before it is proposed, to right sides that can never match (unmatchableValues),
    // listed after whatever else is wrong with it.
    const notText = loneSurrogates(draft.bundle);
    if (notText.length > 0) throw new ApiError('invalid_policy', `Policy ${draft.id} is not valid: ${notText[0]!.path} ${notText[0]!.message}`, { issues: notText });
    const unmatchable = unmatchableValues(draft.bundle);
    if (unmatchable.length > 0) {
      const compiled = compileBundle(draft.bundle);
      const issues = [...(compiled.ok ? [] : compiled.issues), ...unmatchable];
      throw new ApiError('invalid_policy', `Policy ${draft.id} is not valid: ${issues[0]!.message}`, { issues });
    }
    await mutate(res, { type: 'DraftPolicy', ...draft }, true);
  });
  for (const [step, type] of [['review', 'ReviewPolicy'], ['approve', 'ApprovePolicy'], ['activate', 'ActivatePolicy']] as const) {
    app.post(`/admin/v1/policies/:id/${step}`, ...mutation, async (req, res) => {
      const { id } = parseRequest(PolicyParam, req.params, 'path');
      const r = parseRequest(LifecycleRequest, req.body === undefined ? {} : req.body, `${step} request`);
      await mutate(res, { type, id, ...r }, false);
    });
  }
  app.get('/admin/v1/policies', async (req, res) => {
    const { items, next } = await listed<Policy>(req, res, PoliciesQuery, TABLES.policy.prefix, (_, p) => policyView(p));
    sendJson(res, 200, { active: await q.activePolicyId(), policies: items, next });
  });
  app.get('/admin/v1/policies/:id', async (req, res) => {
    const { id } = parseRequest(PolicyParam, req.params, 'path');
    await barrier(res, readQuery(req));
    const p = await q.policy(id);
    if (!p) throw new ApiError('unknown_policy', `No policy ${id} exists.`);
    sendJson(res, 200, policyView(p));
  });
  app.post('/admin/v1/policies/:id/dry-run', ...body, async (req, res) => {
    const { id } = parseRequest(PolicyParam, req.params, 'path');
    const r = parseRequest(DryRunRequest, req.body === undefined ? {} : req.body, 'dry-run request');
    await barrier(res, readQuery(req));
    const p = await q.policy(id);
    if (!p) throw new ApiError('unknown_policy', `No policy ${id} exists.`);
    const page = await q.recorded({ before: r.before, limit: r.limit ?? PAGE_LIMIT_DEFAULT });
    // The page is the most recent first; judge it oldest first, as it was recorded.
    const d = dryRun([...page.items].reverse(), p.bundle, p.id);
    if (!d.ok) throw new ApiError('invalid_policy', `Policy ${p.id} is not valid.`, { issues: d.issues });
    sendJson(res, 200, { policy: p.id, ...d.report, next_before: page.nextBefore });
  });

  const clusterView = () => {
    const { status: s, role, members } = o.node.cluster();
    return {
      node: s.id, role, term: s.term, leader: s.leader, commit_index: s.commit, applied_index: o.node.position().applied,
      voters: s.conf.voters, learners: s.conf.learners, removed: s.conf.removed,
      members: members.map((m) => ({
        id: m.id, agent_url: m.agent_url, admin_url: m.admin_url ?? null, peer_addr: m.peer_addr,
        role: m.id === s.leader ? 'leader' : m.voter ? 'follower' : 'learner',
        voter: m.voter,
        match_index: s.progress?.[m.id]?.match ?? null,
        lag: s.progress?.[m.id] ? Math.max(0, s.commit - s.progress[m.id]!.match) : null,
        // A member killed or cut off stays a voter; only its silence tells (Raft's check-quorum bookkeeping).
        reachable: s.progress ? m.id === s.id || (s.progress[m.id]?.recentActive ?? false) : null,
      })),
    };
  };
  app.get('/admin/v1/cluster', noQuery, (_req, res) => sendJson(res, 200, clusterView()));
  // Membership changes: each one an entry of the log, answered once it is applied here.
  const operator = (res: Response): Principal => {
    const by = res.locals.principal as Principal;
    if (!by.roles.includes('operator')) throw new ApiError('forbidden', `${by.name} may not change the cluster's membership (it needs the operator role).`);
    return by;
  };
  const changeMembers = async (res: Response, change: ConfChange, status: number) => {
    const by = operator(res);
    const { index } = await o.node.changeMembership(change);
    o.log.info({ event: 'membership_changed', by: by.name, change: { type: change.type, node: change.node }, index }, 'membership changed');
    sendJson(res, status, { change: change.type, id: change.node, index, ...clusterView() });
  };
  app.post('/admin/v1/cluster/members', ...mutation, async (req, res) => {
    operator(res);
    const r = parseRequest(MemberRequest, req.body, 'member request');
    const { members } = o.node.cluster();
    if (members.some((m) => m.id === r.id)) throw new ApiError('already_exists', `${r.id} is already a member of the cluster.`, { id: r.id });
    await changeMembers(res, { type: 'addLearner', node: r.id, context: memberContext(r) }, 201);
  });
  app.post('/admin/v1/cluster/members/:id/promote', noQuery, ...noBody, async (req, res) => {
    operator(res);
    const { id } = parseRequest(MemberParam, req.params, 'member');
    const { status } = o.node.cluster();
    if (!status.conf.learners.includes(id)) {
      throw status.conf.voters.includes(id)
        ? new ApiError('invalid_transition', `${id} is already a voter.`, { id })
        : new ApiError('not_found', `${id} is not a member of the cluster; add it first (POST /admin/v1/cluster/members).`, { id });
    }
    await changeMembers(res, { type: 'promote', node: id }, 200);
  });
  app.delete('/admin/v1/cluster/members/:id', noQuery, ...noBody, async (req, res) => {
    operator(res);
    const { id } = parseRequest(MemberParam, req.params, 'member');
    const { status } = o.node.cluster();
    if (!status.conf.voters.includes(id) && !status.conf.learners.includes(id)) throw new ApiError('not_found', `${id} is not a member of the cluster.`, { id });
    await changeMembers(res, { type: 'remove', node: id }, 200);
  });
  app.post('/admin/v1/cluster/transfer-leadership', ...mutation, async (req, res) => {
    const by = res.locals.principal as Principal;
    if (!by.roles.includes('operator')) throw new ApiError('forbidden', `${by.name} may not transfer leadership (it needs the operator role).`);
    const r = parseRequest(TransferRequest, req.body, 'transfer request');
    const { status } = o.node.cluster();
    if (!status.conf.voters.includes(r.to)) {
      throw new ApiError('invalid_transition', `${r.to} is not a voter of the group (voters: ${status.conf.voters.join(', ')}).`, { id: r.to });
    }
    // Naming the primary asks for what already holds, on the primary or on a follower
    // that knows it: nothing moves, and the answer says so (200) rather than promising a
    // transfer (202).
    if (r.to === status.leader) return sendJson(res, 200, { leader: status.leader, transferring_to: null });
    o.node.transferLeadership(r.to);
    sendJson(res, 202, { leader: status.leader, transferring_to: r.to });
  });

  app.get('/admin/v1/log/digest', async (req, res) => {
    await barrier(res, readQuery(req));
    const pos = o.node.position();
    sendJson(res, 200, { applied_index: pos.applied, tick: pos.tick, digest: pos.head, state_hash: pos.stateHash });
  });
  app.get('/admin/v1/feed', feedHandler(o.feeds));
  app.get('/admin/v1/log/export', async (req, res) => {
    await barrier(res, readQuery(req));
    res.status(200).type('application/x-ndjson; charset=utf-8');
    const started = performance.now();
    const end = await streamLines(res, o.node.journal(), o.writeStallMs);
    if (end === 'stalled') {
      o.log.warn({ event: 'export_cut', ms: Math.round(performance.now() - started), stall_ms: o.writeStallMs }, `the log export's client read nothing for ${o.writeStallMs} ms: its connection is closed`);
    }
  });

  app.use(notFound);
  app.use(errorHandler(o.log));
  return app;
}
