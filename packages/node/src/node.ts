/**
 * A running node: the replica, the attestation verifier, and the agent and admin
 * planes on their own HTTPS listeners. `startNode` is what `npm start` runs and what
 * the integration tests start on free ports.
 */
import { X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { createSecureContext } from 'node:tls';
import { fileURLToPath } from 'node:url';
import type { Applied, Operation } from '@apl/core';
import type { ConfChange } from '@apl/raft';
import { adminApp, type AdminPrincipal } from './admin-plane.js';
import { Attestor } from './attest.js';
import { ConfigError, envName, type Config, tlsFiles } from './config.js';
import { ApiError, type ErrorCode } from './errors.js';
import { Feeds } from './feed.js';
import { ForwardFailed, ForwardRefused, PeerMesh } from './peer/mesh.js';
import { agentFrontEnd } from './agent-front.js';
import { AgentThread } from './agent-thread.js';
import { agentBackend, type AgentBackend } from './gateway.js';
import { closeListener, limitedServer, listen, listenerUrl } from './listener.js';
import { createLogger, lineWriter, type Logger } from './log.js';
import { memberContext, membersInForce, type MemberView } from './membership.js';
import { Metrics, countRefusals } from './metrics.js';
import type { WrapDb } from './ledger-store.js';
import { withServer } from './openapi.js';
import { Queries } from './queries.js';
import { RateLimiter } from './rate-limit.js';
import { NotLeaderError, Replica, UnreadableOperation, type Transport } from './replica.js';

const PACKAGE_DIR = resolve(dirname(fileURLToPath(import.meta.url)), '..');
export const OPENAPI_FILES = {
  agent: resolve(PACKAGE_DIR, 'openapi/agent-plane.json'),
  admin: resolve(PACKAGE_DIR, 'openapi/admin-plane.json'),
};

export interface RunningNode {
  config: Config;
  replica: Replica;
  metrics: Metrics;
  agentUrl: string;
  adminUrl: string;
  log: Logger;
  close(): Promise<void>;
}

/** A group of one has nobody to talk to. */
const noPeers: Transport = {
  send(messages) {
    if (messages.length > 0) throw new Error(`a one-member group produced ${messages.length} messages`);
  },
};

export async function startNode(c: Config, principals: AdminPrincipal[], opts: { log?: Logger; wrapDb?: WrapDb; onFatal?: (message: string) => void } = {}): Promise<RunningNode> {
  const log = opts.log ?? createLogger(c.log_level, c.node_id);
  // A thread main.ts started early for the agent plane, not wanted here.
  if (!c.agent_plane_thread) AgentThread.discardEarly();
  const metrics = new Metrics();
  const tls = tlsFiles(c);
  const { cert, key, ca, validTo } = readTls(tls, certificateMember(c), c.node_id);
  metrics.certExpiry.set(Math.floor(validTo.getTime() / 1000));
  const clustered = c.members.length > 1;
  const mesh = clustered
    ? new PeerMesh({
      self: c.node_id, members: c.members, clusterId: c.cluster_id, host: c.host, port: c.peer_port,
      tls: { ca, cert, key },
      queueMessagesMax: c.limits.peer_queue_messages_max,
      snapshotTimeoutMs: c.snapshot_timeout_ms,
      log, metrics,
    })
    : null;
  /** The members in force with their addresses (the configured ones until the log says otherwise). */
  let inForce: MemberView[] = c.members.map((m) => ({ ...m, voter: true }));
  /** The agent-plane address of a member, for 421 `primary_client_addr`. */
  const agentUrlOf = (id: string | null | undefined) => inForce.find((m) => m.id === id)?.agent_url ?? null;
  const notPrimary = (leader: string | null | undefined) => {
    const at = agentUrlOf(leader);
    // With no primary to name, the answer says why and what to do meanwhile.
    const message = at === null ? 'This replica is not the primary, and no primary is known: an election is under way, or a majority is out of reach. Retry shortly; reads with consistency=local are served meanwhile.' : 'This replica is not the primary.';
    return new ApiError('not_primary', message, { primary_client_addr: at });
  };
  const replica = await Replica.open({
    id: c.node_id,
    peers: clustered ? c.members.map((m) => m.id) : [c.node_id],
    peerContext: Object.fromEntries(c.members.map((m) => [m.id, memberContext(m)])),
    onMembers: (conf) => {
      const known = membersInForce(conf, c.members);
      // A member not yet added knows no configuration: it serves the configured members' calls meanwhile.
      if (known.length === 0) return;
      inForce = known;
      mesh?.setMembers(known);
    },
    clusterId: c.cluster_id,
    clusterState: c.cluster_state,
    dataDir: c.data_dir,
    raft: c.raft,
    tickIntervalMs: c.tick_interval_ms,
    commitTimeoutMs: c.commit_timeout_ms,
    proposalsInFlightMax: c.limits.proposals_in_flight_max,
    snapshotIntervalEntries: c.snapshot_interval_entries,
    snapshotCatchupEntries: c.snapshot_catchup_entries,
    snapshotHoldEntries: c.snapshot_hold_entries,
    readyLagEntriesMax: c.ready_lag_entries_max,
    cacheEntriesMax: c.store.cache_entries_max,
    writeBufferBytes: c.store.write_buffer_bytes,
    blockBytes: c.store.block_bytes,
    transport: mesh ?? noPeers,
    standalone: !clustered,
    ...(mesh && c.forward_writes ? {
      forward: async (leader: string, bytes: Uint8Array, timeoutMs: number) => {
        try {
          const at = await mesh.forward(leader, bytes, timeoutMs);
          metrics.forwarded.inc({ outcome: 'appended' });
          return at;
        } catch (err) {
          metrics.forwarded.inc({ outcome: err instanceof ForwardRefused ? 'refused' : 'unconfirmed' });
          throw err;
        }
      },
    } : {}),
    ...(mesh ? { forwardConfChange: (leader: string, change: ConfChange, timeoutMs: number) => mesh.forwardConfChange(leader, change, timeoutMs) } : {}),
    log,
    metrics,
    ...(opts.wrapDb ? { wrapDb: opts.wrapDb } : {}),
    ...(opts.onFatal ? { onFatal: opts.onFatal } : {}),
  });
  const queries = new Queries(replica.store);
  const attestor = new Attestor({
    audience: c.audience,
    cacheEntriesMax: c.limits.attestation_cache_entries_max,
    lifetimeMaxSeconds: c.attestation_lifetime_max_s,
    now: () => new Date(),
    trustRoot: (issuer) => queries.trustRoot(issuer),
  });
  const submit = async (op: Operation): Promise<Applied> => {
    try {
      return await replica.propose(op);
    } catch (err) {
      if (err instanceof NotLeaderError) throw notPrimary(err.leader);
      if (err instanceof UnreadableOperation) throw new ApiError('malformed_request', `The ${op.type} operation is not valid.`, { issues: err.issues });
      if (err instanceof ForwardRefused) {
        if (err.body.error === 'not_primary') throw notPrimary(err.body.leader);
        throw new ApiError(err.body.error as ErrorCode, err.body.message);
      }
      if (err instanceof ForwardFailed) {
        // Why it was not confirmed: no answer in time, or the link to the primary broke (it may have died).
        throw new ApiError('commit_unavailable', `The primary did not confirm the proposal (${err.message}); it may or may not have been recorded. Retry with the same transaction id, or read the transaction.`);
      }
      throw err;
    }
  };
  const readBarrier = async (): Promise<void> => {
    try {
      await replica.readBarrier();
    } catch (err) {
      if (err instanceof NotLeaderError) throw notPrimary(err.leader);
      throw err;
    }
  };
  if (mesh) {
    // Every call names this start of the member from now on: a later start elsewhere supersedes this one.
    mesh.setStarts(replica.starts);
    await mesh.listen({
      step: (m) => replica.step(m),
      installSnapshot: (m, position, chunks) => replica.installSnapshot(m, position, chunks),
      openSnapshot: () => replica.openSnapshot(),
      propose: async (bytes) => {
        try {
          return replica.appendForwarded(bytes);
        } catch (err) {
          if (err instanceof NotLeaderError) throw Object.assign(err, { body: { error: 'not_primary', message: 'This replica is not the primary.', leader: err.leader } });
          if (err instanceof UnreadableOperation) throw Object.assign(err, { body: { error: 'malformed_request', message: err.message } });
          throw err;
        }
      },
      proposeConfChange: async (change) => {
        try {
          return await replica.appendConfChange(change);
        } catch (err) {
          if (err instanceof NotLeaderError) throw Object.assign(err, { body: { error: 'not_primary', message: 'This replica is not the primary.', leader: err.leader } });
          throw err;
        }
      },
      reportSnapshot: (to, status) => replica.reportSnapshot(to, status),
      reportUnreachable: (to) => replica.reportUnreachable(to),
      superseded: (peer, details) => replica.supersede(peer, details),
    });
  }
  const node = {
    queries,
    submit,
    readBarrier,
    refuseRead: () => replica.refuseRead(),
    isPrimary: () => replica.isLeader(),
    health: () => {
      const s = replica.status();
      const detail: Record<string, unknown> = { node: c.node_id, role: replica.role(), leader: s.leader, commit_index: s.commit, applied_index: replica.appliedIndex };
      const ready = replica.ready();
      const membership = replica.membership();
      if (membership) detail.reason = membership;
      if (replica.failure) detail.reason = `the replica stopped: ${replica.failure.message}`;
      // Every 503 says why, so that a probe's log tells an SRE what to look at.
      if (!ready && detail.reason === undefined) {
        detail.reason = s.leader === null
          ? 'no primary is known: an election is under way, or this replica cannot reach a majority of the voters'
          : replica.catchingUp(s)
            ? `this replica is applying the log: ${replica.appliedIndex} of ${s.commit} committed entries applied (it serves once within ${c.ready_lag_entries_max}, ready_lag_entries_max)`
            : 'the node is shutting down';
      }
      return { ready, detail };
    },
  };
  replica.start();
  const tlsOptions = { cert, key, minVersion: 'TLSv1.2' as const };
  // Each listener is bound before its plane is built, so that the plane's OpenAPI
  // document names the address really bound (port 0 picks one). The plane is attached
  // in the same turn as the bind completes, before the event loop can accept a
  // connection; the document is prepared once and sent as it is on every request.
  const backend = agentBackend({
    node, attestor, log,
    rateLimit: new RateLimiter({ ratePerSecond: c.rate_limit.agent_intents_per_second, burst: c.rate_limit.agent_burst, keysMax: c.rate_limit.agents_max, refusalDelayMs: c.rate_limit.refusal_delay_ms, now: () => performance.now() }),
  });
  // A listener that cannot bind (an address in use) fails the start; what was opened is closed first.
  const undo = async (err: unknown, agentPlane?: AgentPlane): Promise<never> => {
    await agentPlane?.close();
    await replica.close();
    await mesh?.close();
    throw err;
  };
  const agent = await (c.agent_plane_thread ? agentThread(c, backend, { cert, key }, log, metrics) : agentHere(c, backend, tlsOptions, log, metrics)).catch((err: unknown) => undo(err));
  const agentUrl = agent.url;
  const feeds = new Feeds({
    applied: () => replica.journalIndex,
    journal: (from) => replica.store.journal(from),
    onApplied: (listener) => replica.onApplied(listener),
    removed: () => replica.removedAt !== null,
  }, { consumersMax: c.feed.consumers_max, heartbeatIntervalMs: c.feed.heartbeat_interval_ms, pageRecordsMax: c.feed.page_records_max, lagMsMax: c.feed.lag_ms_max }, log, metrics);
  const adminTls = c.admin_client_certs ? { ...tlsOptions, ca, requestCert: true, rejectUnauthorized: true } : tlsOptions;
  const adminServer = await listen(limitedServer(adminTls, c.http), c.admin_port, c.host, countRefusals(metrics, 'admin')).catch((err: unknown) => undo(err, agent));
  const adminUrl = listenerUrl(c.host, adminServer, advertisedBy(c)?.admin_url);
  adminServer.on('request', adminApp({
    node: {
      ...node,
      position: () => replica.store.position,
      journal: () => replica.store.journal(),
      cluster: () => {
        const status = replica.status();
        // A member waiting to be added knows no configuration: it lists no members in
        // force, rather than the configured ones as voters beside `voters: []`.
        const members = !clustered ? [{ id: c.node_id, voter: true, agent_url: agentUrl, admin_url: adminUrl, peer_addr: null }]
          : status.conf.voters.length === 0 ? [] : inForce;
        return { status, role: replica.role(), members };
      },
      changeMembership: async (change) => {
        if (!mesh) throw new ApiError('invalid_transition', 'A standalone node has no cluster membership to change: run members with peers (docs/cluster.md).');
        try {
          return await replica.changeMembership(change);
        } catch (err) {
          if (err instanceof NotLeaderError) throw notPrimary(err.leader);
          if (err instanceof ForwardRefused) {
            if (err.body.error === 'not_primary') throw notPrimary(err.body.leader);
            throw new ApiError(err.body.error as ErrorCode, err.body.message);
          }
          if (err instanceof ForwardFailed) throw new ApiError('commit_unavailable', 'The primary did not confirm the membership change in time; it may or may not have taken effect. GET /admin/v1/cluster shows the members in force.');
          throw err;
        }
      },
      transferLeadership: (to) => {
        try {
          replica.transferLeadership(to);
        } catch (err) {
          if (err instanceof NotLeaderError) throw notPrimary(err.leader);
          throw err;
        }
      },
    },
    principals, feeds, log, metrics,
    bodyBytesMax: c.limits.body_bytes_max,
    writeStallMs: c.http.write_stall_ms,
    openapi: withServer(readFileSync(OPENAPI_FILES.admin, 'utf8'), adminUrl),
  }));
  log.info({ event: 'node_started', agent: agentUrl, admin: adminUrl, ...(mesh ? { peer: mesh.port, members: inForce.map((m) => m.id) } : {}) }, 'node started');
  let closing: Promise<void> | null = null;
  return {
    config: c,
    replica,
    metrics,
    agentUrl,
    adminUrl,
    log,
    close: () => (closing ??= (async () => {
      // While the planes still serve: a primary hands over first, so a rolling restart costs no election.
      await replica.handOver();
      await feeds.close();
      await Promise.all([agent.close(), closeListener(adminServer)]);
      await replica.close();
      await mesh?.close();
      log.info({ event: 'node_stopped' }, 'node stopped');
    })()),
  };
}

/** The agent plane's listener, at `url`, until closed. */
interface AgentPlane {
  url: string;
  close(): Promise<void>;
}

/** The agent plane on a thread of its own (agent-thread.ts); its request lines go to this node's log. */
async function agentThread(c: Config, backend: AgentBackend, tls: { cert: Buffer; key: Buffer }, log: Logger, metrics: Metrics): Promise<AgentPlane> {
  const thread = await AgentThread.start({
    host: c.host, port: c.agent_port, advertised: advertisedBy(c)?.agent_url ?? null, cert: tls.cert, key: tls.key, http: c.http,
    bodyBytesMax: c.limits.body_bytes_max, entriesPerIntentMax: c.limits.entries_per_intent_max,
    openapiFile: OPENAPI_FILES.agent, logLevel: log.level, nodeId: c.node_id,
  }, backend, lineWriter(log), (err) => {
    log.fatal({ event: 'agent_plane_failed', err: err.message }, "the agent plane's thread stopped: this node serves no agents until it is restarted");
  });
  metrics.countHttpElsewhere(() => thread.metricsJson());
  return { url: thread.url, close: () => thread.close() };
}

/** This member's own entry of the configured members, with the addresses it advertises; undefined for a standalone node without one. */
function advertisedBy(c: Config): Config['members'][number] | undefined {
  return c.members.find((m) => m.id === c.node_id);
}

/** The member a cluster node's certificate must name (its node id); undefined for a standalone node. */
export function certificateMember(c: Config): string | undefined {
  return c.members.length > 1 ? c.node_id : undefined;
}

/**
 * Reads and checks the TLS files, before anything listens: the CA holds a certificate,
 * the certificate and key are one pair, the certificate is valid now, and, when
 * `member` is given (a cluster member), it names that member as the peers check it
 * (subject CN, also a DNS name). A node that would start and then be refused by its
 * peers or clients stops instead, naming the setting and the file. `validTo` is when
 * the certificate expires.
 */
export function readTls(files: { ca: string; cert: string; key: string }, member?: string, nodeId = member): { ca: Buffer; cert: Buffer; key: Buffer; validTo: Date } {
  const read = (what: string, file: string) => {
    try {
      return readFileSync(file);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      const next = code === 'ENOENT' ? `; put it there, or make development certificates: certs/dev-certs.sh ${dirname(file)} ${nodeId ?? '<node_id>'} (dev_setup: true makes them in the data directory)` : '';
      throw new ConfigError(`${what} (${envName(what.split('.'))}): ${file} cannot be read (${code ?? (err as Error).message})${next}`);
    }
  };
  const ca = read('tls.ca', files.ca);
  const cert = read('tls.cert', files.cert);
  const key = read('tls.key', files.key);
  const blocks = ca.toString('latin1').match(/-----BEGIN CERTIFICATE-----[^-]+-----END CERTIFICATE-----/g) ?? [];
  const certs = blocks.flatMap((b) => {
    try {
      return [new X509Certificate(b)];
    } catch {
      return [];
    }
  });
  if (certs.length === 0) throw new ConfigError(`tls.ca: ${files.ca} holds no certificate (PEM, -----BEGIN CERTIFICATE-----)`);
  try {
    createSecureContext({ cert, key });
  } catch (err) {
    throw new ConfigError(`tls.cert and tls.key: ${files.cert} and ${files.key} cannot be used together (${(err as Error).message})`);
  }
  const leaf = new X509Certificate(cert);
  checkCertificate(leaf, files.cert, member);
  return { ca, cert, key, validTo: new Date(leaf.validTo) };
}

/** A certificate a node would start with and then be refused by its peers and clients: refused at the start instead. */
function checkCertificate(leaf: X509Certificate, file: string, member: string | undefined): void {
  const now = Date.now();
  const [from, to] = [new Date(leaf.validFrom), new Date(leaf.validTo)];
  if (to.getTime() <= now) throw new ConfigError(`tls.cert: ${file} expired on ${to.toISOString()}; peers and clients refuse it. Issue a new certificate (docs/operations.md, "Certificates").`);
  if (from.getTime() > now) throw new ConfigError(`tls.cert: ${file} is not valid until ${from.toISOString()}; peers and clients refuse it until then (is this machine's clock right?).`);
  if (member === undefined) return;
  const cn = /^CN=(.*)$/m.exec(leaf.subject)?.[1];
  const dns = (leaf.subjectAltName ?? '').split(',').map((n) => n.trim()).filter((n) => n.startsWith('DNS:')).map((n) => n.slice(4));
  if (cn !== member || !dns.includes(member)) {
    throw new ConfigError(`tls.cert: ${file} names ${cn === undefined ? 'no common name' : `CN=${cn}`}${dns.length > 0 ? ` (DNS ${dns.join(', ')})` : ''}, not member ${member}: `
      + `its peers take a member to be the one its certificate names (subject CN, also a DNS name of its SAN), and would refuse this one's messages. Give member ${member}'s own certificate.`);
  }
}

/** The agent plane on this thread (`agent_plane_thread: false`). */
async function agentHere(c: Config, backend: AgentBackend, tls: { cert: Buffer; key: Buffer; minVersion: 'TLSv1.2' }, log: Logger, metrics: Metrics): Promise<AgentPlane> {
  const server = await listen(limitedServer(tls, c.http), c.agent_port, c.host, countRefusals(metrics, 'agent'));
  const url = listenerUrl(c.host, server, advertisedBy(c)?.agent_url);
  // The plane is attached in the same turn as the bind completes, before the event loop
  // can accept a connection; its document names the address really bound (port 0 picks one).
  server.on('request', agentFrontEnd({
    backend, log, metrics,
    bodyBytesMax: c.limits.body_bytes_max,
    entriesPerIntentMax: c.limits.entries_per_intent_max,
    openapi: withServer(readFileSync(OPENAPI_FILES.agent, 'utf8'), url, { entriesPerIntentMax: c.limits.entries_per_intent_max }),
  }));
  return { url, close: () => closeListener(server) };
}


