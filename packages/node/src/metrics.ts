/**
 * Prometheus metrics (served at GET /metrics on the admin plane). One registry per
 * node, so that tests running several nodes in one process do not mix them.
 *
 * The agent plane's requests are counted on its own thread (agent-thread.ts), in a
 * registry of the two HTTP metrics only; the exposition adds that thread's counts to
 * the node's own (the admin plane's requests) by label, as prom-client's cluster
 * aggregation does.
 */
import { AggregatorRegistry, Counter, Gauge, Histogram, Registry, collectDefaultMetrics, type MetricObjectWithValues, type MetricValue } from 'prom-client';

/**
 * Why a listener refused a connection, or closed it, before a request reached its plane
 * (listener.ts): beyond `http.connections_max`; beyond `http.connections_per_source_max`
 * from one client address; a TLS handshake that never finished; a
 * request Node.js could not read as HTTP (400); one not all in by its time-out (408);
 * an `Expect` header other than 100-continue (417).
 */
export const CONNECTION_REFUSALS = ['connections_max', 'connections_per_source', 'tls_handshake', 'malformed_request', 'request_timeout', 'expectation_failed'] as const;
export type ConnectionRefusal = (typeof CONNECTION_REFUSALS)[number];

/** Counts the connections a plane's listener refuses (listener.ts `listen`); the plane's series start at 0. */
export function countRefusals(m: { httpRefused: Counter<'plane' | 'reason'> }, plane: 'agent' | 'admin'): (reason: ConnectionRefusal) => void {
  for (const reason of CONNECTION_REFUSALS) m.httpRefused.inc({ plane, reason }, 0);
  return (reason) => m.httpRefused.inc({ plane, reason });
}

/** The metrics of every HTTP request, and of the connections refused before one, registered on `registry`. */
export function httpMetrics(registry: Registry) {
  return {
    httpRequests: new Counter({
      name: 'apl_http_requests_total', help: 'HTTP requests answered, by plane, route and status.',
      labelNames: ['plane', 'route', 'status'] as const, registers: [registry],
    }),
    httpDuration: new Histogram({
      name: 'apl_http_request_duration_seconds', help: 'Time to answer an HTTP request, by plane, route and status.',
      labelNames: ['plane', 'route', 'status'] as const, buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
      registers: [registry],
    }),
    httpRefused: new Counter({
      name: 'apl_http_connections_refused_total',
      help: 'Connections a listener refused or closed before a request reached its plane, by plane and reason.',
      labelNames: ['plane', 'reason'] as const, registers: [registry],
    }),
  };
}

/** A registry's metrics as `getMetricsAsJSON` gives them (what crosses between threads). */
export type MetricsJson = MetricObjectWithValues<MetricValue<string>>[];

/**
 * Three of prom-client's process metrics are gauges named as counters are
 * (`_total`): a tool that checks names (promtool's `check metrics`, an OpenMetrics
 * parser) takes them for counters. Each is the sum over `type` of the gauge of the same
 * name without `_total` (`sum(nodejs_active_handles)`), which stays; these are left out.
 */
const GAUGES_NAMED_AS_COUNTERS = ['nodejs_active_handles_total', 'nodejs_active_requests_total', 'nodejs_active_resources_total'];

export class Metrics {
  /** Every metric of the node but the two HTTP metrics. */
  readonly registry = new Registry();
  /** The HTTP metrics of the requests this thread answers. */
  private readonly http = new Registry();
  private readonly httpOwn = httpMetrics(this.http);
  readonly httpRequests = this.httpOwn.httpRequests;
  readonly httpDuration = this.httpOwn.httpDuration;
  readonly httpRefused = this.httpOwn.httpRefused;
  /** Other threads' HTTP metrics, added in the exposition. */
  private httpElsewhere: (() => Promise<MetricsJson>) | null = null;
  readonly intents = new Counter({
    name: 'apl_intents_total', help: 'Intents judged at the commit point, by verdict or error code.',
    labelNames: ['outcome'] as const, registers: [this.registry],
  });
  readonly fsyncs = new Counter({ name: 'apl_log_fsyncs_total', help: 'Synced writes of the replicated log.', registers: [this.registry] });
  readonly fsyncDuration = new Histogram({
    name: 'apl_log_fsync_duration_seconds', help: 'Time of one synced write of the replicated log.',
    buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1], registers: [this.registry],
  });
  readonly applyStage = new Histogram({
    name: 'apl_apply_stage_duration_seconds',
    help: 'Time of one batch of committed entries in each stage: prefetch (loading what it reads), apply (judging and encoding), store_write (until its LevelDB batch has landed).',
    labelNames: ['stage'] as const, buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1], registers: [this.registry],
  });
  readonly readyDuration = new Histogram({
    name: 'apl_raft_ready_duration_seconds', help: 'Time the driver spends on one Raft Ready: persist, send, apply, advance.',
    buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1], registers: [this.registry],
  });
  readonly entriesApplied = new Counter({ name: 'apl_log_entries_applied_total', help: 'Log entries applied to the state machine.', registers: [this.registry] });
  readonly appliedIndex = new Gauge({ name: 'apl_log_applied_index', help: 'Index of the last applied log entry.', registers: [this.registry] });
  readonly commitIndex = new Gauge({ name: 'apl_raft_commit_index', help: 'Raft commit index.', registers: [this.registry] });
  readonly term = new Gauge({ name: 'apl_raft_term', help: 'Raft term.', registers: [this.registry] });
  readonly isLeader = new Gauge({ name: 'apl_raft_is_leader', help: '1 on the primary, 0 elsewhere.', registers: [this.registry] });
  readonly proposalsInFlight = new Gauge({ name: 'apl_proposals_in_flight', help: 'Proposals waiting for their commit.', registers: [this.registry] });
  readonly tick = new Gauge({ name: 'apl_ledger_tick', help: 'The ledger tick.', registers: [this.registry] });
  readonly certExpiry = new Gauge({ name: 'apl_tls_cert_expiry_timestamp_seconds', help: 'When the node\'s TLS certificate expires (Unix time); it is read at start only.', registers: [this.registry] });
  readonly storeCacheEntries = new Gauge({ name: 'apl_store_cache_entries', help: 'Records held in the state store cache.', registers: [this.registry] });
  readonly peerRefused = new Counter({
    name: 'apl_peer_refused_total', help: 'Peer calls and Raft messages refused, by reason (foreign_cluster, unknown_member, sender_mismatch, malformed, superseded: a call from an earlier start of a member than one heard from).',
    labelNames: ['reason'] as const, registers: [this.registry],
  });
  readonly peerDropped = new Counter({
    name: 'apl_peer_messages_dropped_total', help: 'Raft messages dropped because the queue to a peer was full or its stream broke.',
    labelNames: ['peer'] as const, registers: [this.registry],
  });
  readonly peerSnapshots = new Counter({
    name: 'apl_peer_snapshots_total', help: 'State store snapshots streamed to or from peers, by direction and outcome.',
    labelNames: ['direction', 'outcome'] as const, registers: [this.registry],
  });
  readonly forwarded = new Counter({
    name: 'apl_forwarded_proposals_total', help: 'Proposals a follower forwarded to the primary, by outcome.',
    labelNames: ['outcome'] as const, registers: [this.registry],
  });
  readonly feedConsumers = new Gauge({ name: 'apl_feed_consumers', help: 'Change feeds being served.', registers: [this.registry] });
  readonly feedRecords = new Counter({ name: 'apl_feed_records_total', help: 'Journal records written to change feeds.', registers: [this.registry] });
  readonly feedEnds = new Counter({
    name: 'apl_feed_ends_total', help: 'Change feeds ended, by reason: consumer_left, feed_lagging, shutting_down, member_removed, internal_error.',
    labelNames: ['reason'] as const, registers: [this.registry],
  });

  constructor() {
    collectDefaultMetrics({ register: this.registry });
    for (const name of GAUGES_NAMED_AS_COUNTERS) this.registry.removeSingleMetric(name);
    // The series of a closed set of labels exist from the start, at 0: a rate or an
    // alert on one of them sees "none yet" rather than no series at all.
    for (const reason of ['foreign_cluster', 'unknown_member', 'sender_mismatch', 'malformed', 'superseded']) this.peerRefused.inc({ reason }, 0);
    for (const direction of ['sent', 'received']) for (const outcome of ['installed', 'failed']) this.peerSnapshots.inc({ direction, outcome }, 0);
    for (const outcome of ['appended', 'refused', 'unconfirmed']) this.forwarded.inc({ outcome }, 0);
    for (const reason of ['consumer_left', 'feed_lagging', 'shutting_down', 'member_removed', 'internal_error']) this.feedEnds.inc({ reason }, 0);
  }

  /** Adds another thread's HTTP metrics to the exposition (the agent plane's thread). */
  countHttpElsewhere(read: () => Promise<MetricsJson>): void {
    this.httpElsewhere = read;
  }

  get contentType(): string {
    return this.registry.contentType;
  }

  /** The Prometheus text of every metric, the HTTP ones summed over the threads that count them. */
  async exposition(): Promise<string> {
    const http = this.httpElsewhere === null
      ? this.http
      : AggregatorRegistry.aggregate([await this.http.getMetricsAsJSON(), await this.httpElsewhere()]);
    return Registry.merge([this.registry, http as Registry]).metrics();
  }
}
