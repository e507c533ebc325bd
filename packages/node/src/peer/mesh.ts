/**
 * The peer mesh: gRPC over mutual TLS 1.3 between the members of one cluster
 * (proto/peer.proto). It carries Raft messages on one long-lived stream per ordered
 * pair of members, streams the state store to a member behind the log's compaction,
 * and forwards proposals from followers to the primary: operations on one long-lived
 * stream per follower and primary (the certificate is read once, when it opens, not
 * once per operation), membership changes as single calls.
 *
 * Trust: every certificate is signed by the cluster CA; a peer is the node id its
 * certificate names (subject CN, also a DNS name in the SAN), and that id must be a
 * member. A Raft message whose `from` is not the certificate's id, or which names
 * another cluster, is refused, logged and counted; it never reaches Raft.
 *
 * One process per member: every call names the caller's incarnation, which start of a
 * node on its data directory it is (the directory's lock counts them) and a random tag.
 * A member's later start supersedes an earlier one: the calls of the earlier still open
 * are ended, its new calls are refused, and the earlier process, told so, stops. Two
 * processes as one member (a data directory copied and started elsewhere, where its
 * lock does not reach) could each vote in one term; the later start is the one an
 * operator meant to run.
 *
 * Limits: each outgoing stream has a bounded queue. Raft tolerates lost messages, so
 * a full queue drops (and counts) rather than grows, and a broken stream tells Raft
 * the peer is unreachable so it stops streaming appends blindly.
 */
import { randomBytes } from 'node:crypto';
import { createSecureContext, type PeerCertificate } from 'node:tls';
import * as grpc from '@grpc/grpc-js';
import protobuf from 'protobufjs';
import { messageCodec, WireError, type ConfChange, type Message, type MessageCodec, type NodeId } from '@apl/raft';
import type { Logger } from '../log.js';
import type { Metrics } from '../metrics.js';
import type { SnapshotChunk, StorePosition } from '../ledger-store.js';
import { PEER_DESCRIPTOR } from './descriptor.js';

export interface MeshMember {
  id: NodeId;
  /** host:port of the member's peer listener. */
  peer_addr: string;
}

/** What the mesh asks of the replica it serves. */
export interface MeshHandlers {
  step(m: Message): void;
  /** Receives a streamed store and steps the snapshot message once the member holds it. */
  installSnapshot(m: Message, position: Pick<StorePosition, 'applied' | 'term' | 'stateHash'>, chunks: AsyncIterable<SnapshotChunk>): Promise<void>;
  /** Opens this member's store for streaming (LevelDB snapshot: writes go on meanwhile). */
  openSnapshot(): Promise<{ position: StorePosition; chunks: AsyncGenerator<SnapshotChunk> }>;
  /** Appends a forwarded operation to the log (primary only) and says where. */
  propose(operation: Uint8Array): Promise<{ index: number; term: number }>;
  /** Appends a forwarded membership change to the log (primary only) and says where. */
  proposeConfChange(change: ConfChange): Promise<{ index: number; term: number }>;
  reportSnapshot(to: NodeId, status: 'finish' | 'failure'): void;
  reportUnreachable(to: NodeId): void;
  /** A peer has heard from a later start of this member: this process must stop (`details` says what the peer heard). */
  superseded(peer: NodeId, details: string): void;
}

export interface MeshOptions {
  self: NodeId;
  members: MeshMember[];
  clusterId: string;
  host: string;
  port: number;
  tls: { ca: Buffer; cert: Buffer; key: Buffer };
  /** at most this many Raft messages wait for one peer's stream; beyond, they are dropped. */
  queueMessagesMax: number;
  /** a snapshot transfer that takes longer than this fails, and Raft may try again. */
  snapshotTimeoutMs: number;
  log: Logger;
  metrics: Metrics;
  /** a removed member's link stays open this long, so the primary can tell it of its removal (default 15 s). */
  removedLinkMs?: number;
}

/** A refusal by the primary of a forwarded proposal: its `{error, message}` body. */
export class ForwardRefused extends Error {
  constructor(readonly body: { error: string; message: string; leader?: string | null }) {
    super(body.message);
  }
}

/** A forwarded proposal whose fate is unknown: the primary could not be reached or did not answer in time. */
export class ForwardFailed extends Error {}

// ---- the service, from proto/peer.proto ----

const root = protobuf.Root.fromJSON(PEER_DESCRIPTOR as protobuf.INamespace);
const types = {
  batch: root.lookupType('apl.peer.v1.RaftBatch'),
  end: root.lookupType('apl.peer.v1.StreamEnd'),
  chunk: root.lookupType('apl.peer.v1.SnapshotChunk'),
  ack: root.lookupType('apl.peer.v1.SnapshotAck'),
  proposeRequest: root.lookupType('apl.peer.v1.ProposeRequest'),
  proposeReply: root.lookupType('apl.peer.v1.ProposeReply'),
  forwardRequest: root.lookupType('apl.peer.v1.ForwardRequest'),
  forwardReply: root.lookupType('apl.peer.v1.ForwardReply'),
};

interface RaftBatch { messages: Uint8Array[] }
interface WireChunk { message?: Uint8Array; position?: { applied: unknown; term: unknown; stateHash: string } | null; seq: unknown; data: Uint8Array; digest: string; last?: boolean; marksLast?: boolean }
interface SnapshotAck { installed: boolean; reason: string }
interface ProposeRequest { operation: Uint8Array; confChange?: string }
interface ProposeReply { index: unknown; term: unknown }
interface ForwardRequest { id: unknown; operation: Uint8Array }
interface ForwardReply { id: unknown; index: unknown; term: unknown; error: string }

/**
 * The encoded bytes as a Buffer, not copied: protobufjs writes a Buffer under Node.js
 * already, and gRPC copies a message into its frame as it sends it. (A snapshot chunk
 * is a megabyte; each copy is one more allocation outside the heap.)
 */
function asBuffer(bytes: Uint8Array): Buffer {
  return Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

function method<Req, Res>(name: string, requestStream: boolean, req: protobuf.Type, res: protobuf.Type, responseStream = false): grpc.MethodDefinition<Req, Res> {
  return {
    path: `/apl.peer.v1.Peer/${name}`,
    requestStream,
    responseStream,
    originalName: name,
    requestSerialize: (v: Req) => asBuffer(req.encode(req.fromObject(v as object)).finish()),
    requestDeserialize: (b: Buffer) => req.decode(b) as unknown as Req,
    responseSerialize: (v: Res) => asBuffer(res.encode(res.fromObject(v as object)).finish()),
    responseDeserialize: (b: Buffer) => res.decode(b) as unknown as Res,
  };
}

export const PEER_SERVICE = {
  raft: method<RaftBatch, object>('Raft', true, types.batch, types.end),
  snapshot: method<WireChunk, SnapshotAck>('Snapshot', true, types.chunk, types.ack),
  propose: method<ProposeRequest, ProposeReply>('Propose', false, types.proposeRequest, types.proposeReply),
  forward: method<ForwardRequest, ForwardReply>('Forward', true, types.forwardRequest, types.forwardReply, true),
} satisfies grpc.ServiceDefinition;

/** gRPC's own cap on one message; a snapshot chunk is about 1 MiB, an append at most max_size_per_msg. */
const MESSAGE_BYTES_MAX = 16 << 20;
/** a batch on the Raft stream carries at most this many bytes of messages. */
const BATCH_BYTES_MAX = 1 << 20;
/** after a stream to a peer broke, wait this long before opening another. */
const RECONNECT_MS = 100;
/** after a peer answered that it does not serve Forward, operations go to it as Propose calls this long before the stream is tried again. */
const UNARY_FALLBACK_MS = 60_000;
/**
 * gRPC channel options of both ends. Channelz stays on although nothing here reads it:
 * grpc-js (1.14) tracks a server's connections for forceShutdown only with it, so
 * without it a closed mesh would leave its peers' streams open.
 */
const CHANNEL_OPTIONS = {
  'grpc.max_receive_message_length': MESSAGE_BYTES_MAX,
  'grpc.max_send_message_length': MESSAGE_BYTES_MAX,
} as const;
/** a removed member's link stays open this long, so the primary can tell it of its removal. */
const REMOVED_LINK_MS = 15_000;
const ERROR_KEY = 'apl-error';
/** the caller's incarnation, `<starts>.<tag>`, on every call (a caller of an earlier release sends none). */
const INCARNATION_KEY = 'apl-incarnation';
/** the caller's cluster id, on every call: a process of another cluster is refused before its incarnation is looked at. */
const CLUSTER_KEY = 'apl-cluster';
/** on a refusal: the caller is an earlier start of its member than one the callee has heard from. */
const SUPERSEDED_KEY = 'apl-superseded';
/** the refusals of an earlier start of one member are logged at most once in this time. */
const SUPERSEDED_LOG_MS = 10_000;
/** the callers whose last refusal is remembered (refuseRepeated), so that many misaddressed processes keep the map small. */
const REFUSALS_LOGGED_MAX = 64;

/** Which start of a member a process is: its data directory's start count, and a random tag. */
export interface Incarnation {
  starts: number;
  tag: string;
}

export function incarnationText(i: Incarnation): string {
  return `${i.starts}.${i.tag}`;
}

/** An incarnation as a call names it, or null when it is not `<starts>.<16 hex digits>`. */
export function parseIncarnation(text: string): Incarnation | null {
  const m = /^([1-9][0-9]{0,14})\.([0-9a-f]{16})$/.exec(text);
  return m ? { starts: Number(m[1]), tag: m[2]! } : null;
}

/**
 * Above 0 when `a` is the later start. Two processes of one start (one copy of a data
 * directory started twice) are told apart by their tags, the same way by every member,
 * so that every member lets the same one through.
 */
export function compareIncarnations(a: Incarnation, b: Incarnation): number {
  if (a.starts !== b.starts) return a.starts - b.starts;
  return a.tag < b.tag ? -1 : a.tag > b.tag ? 1 : 0;
}

/** What the details of a status say of the peer that sent it: the later start, or null when the status says nothing of one. */
function supersededDetails(status: { code?: number; details?: string; metadata?: grpc.Metadata | null }): string | null {
  if (status.code !== grpc.status.FAILED_PRECONDITION || (status.metadata?.get(SUPERSEDED_KEY).length ?? 0) === 0) return null;
  return status.details ?? '';
}

/** The latest start of a member a callee has heard from, and that start's calls still open. */
interface Heard {
  incarnation: Incarnation;
  /** the address its first call came from */
  peer: string;
  /** each ends one open call with a status */
  calls: Set<(status: grpc.StatusObject) => void>;
  /** when a refusal of an earlier start was last logged */
  loggedAt: number;
}

/** Server credentials that require a client certificate from the cluster CA and TLS 1.3. */
class MutualTls13 extends grpc.ServerCredentials {
  constructor(tls: MeshOptions['tls']) {
    super({ requestCert: true, rejectUnauthorized: true, minVersion: 'TLSv1.3' }, { ca: tls.ca, cert: tls.cert, key: tls.key, minVersion: 'TLSv1.3' });
  }
  _equals(other: grpc.ServerCredentials): boolean {
    return other === this;
  }
}

/**
 * The member a certificate names: its subject CN, which must also be a DNS name of its
 * SAN and a member id. Null for any other certificate.
 */
export function certificateIdentity(cert: PeerCertificate | undefined, members: ReadonlySet<NodeId>): NodeId | null {
  const name = certificateName(cert);
  return name !== null && members.has(name) ? name : null;
}

/** The member id a certificate names (its CN, also among its DNS names), in force or not; or null. */
export function certificateName(cert: PeerCertificate | undefined): NodeId | null {
  const cn = cert?.subject?.CN;
  if (typeof cn !== 'string') return null;
  const dns = (cert!.subjectaltname ?? '').split(',').map((s) => s.trim()).filter((s) => s.startsWith('DNS:')).map((s) => s.slice(4));
  return dns.includes(cn) ? cn : null;
}

/**
 * What a refused caller is told (its log shows it): which member its certificate names
 * when it names one, so that a member removed, or not added yet, reads that it is the
 * one not in the cluster.
 */
export function refusalDetails(name: NodeId | null, self: NodeId): string {
  if (name === null) return 'the certificate names no member of this cluster';
  if (name === self) return `the certificate names ${name}, the member called`;
  return `the certificate names ${name}, which is not a member of this cluster (not added yet, or removed: a removed member never is one again) as ${self} knows it; a member waiting to join knows only the members its configuration lists`;
}

/** What a failed call says, without the empty "Resolution note: " grpc-js ends a connection failure with. */
export function callError(err: Pick<grpc.ServiceError, 'details' | 'message'>): string {
  return (err.details || err.message).replace(/\.? ?Resolution note: ?$/, '');
}

/** A PERMISSION_DENIED status saying why. */
function denied(details: string): grpc.StatusObject {
  return { code: grpc.status.PERMISSION_DENIED, details, metadata: new grpc.Metadata() };
}

export class PeerMesh {
  private readonly codec: MessageCodec;
  /** the members in force whose calls are served (membership changes replace it). */
  private readonly memberIds = new Set<NodeId>();
  private readonly server = new grpc.Server(CHANNEL_OPTIONS);
  private readonly links = new Map<NodeId, Link>();
  private readonly transfers = new Set<NodeId>();
  private readonly retiring = new Map<NodeId, NodeJS.Timeout>();
  private handlers: MeshHandlers | null = null;
  private closed = false;
  /** this process's incarnation, once the data directory's lock has counted its start; until then calls name none. */
  private incarnation: Incarnation | null = null;
  /** this process's random tag: of two processes of one start, the later tag goes on. */
  readonly tag = randomBytes(8).toString('hex');
  /** by member: the latest start of it heard from */
  private readonly heard = new Map<NodeId, Heard>();
  /** when a refusal that a caller repeats was last logged, by reason and caller: once in SUPERSEDED_LOG_MS each (refuseRepeated). */
  private readonly refusalLogged = new Map<string, number>();
  /** the port the listener bound (the configured one, or the one the system chose for 0). */
  port = 0;

  constructor(private readonly o: MeshOptions) {
    this.codec = messageCodec(o.clusterId);
    this.setMembers(o.members);
  }

  /**
   * Follows the members in force: calls are served only from them, and a link opens to
   * each new one. A removed member's link stays open a while, so the primary can tell it
   * of its removal, then closes.
   */
  setMembers(members: readonly MeshMember[]): void {
    this.memberIds.clear();
    for (const m of members) this.memberIds.add(m.id);
    for (const m of members) {
      const link = this.links.get(m.id);
      if (link && link.member.peer_addr === m.peer_addr) {
        clearTimeout(this.retiring.get(m.id));
        this.retiring.delete(m.id);
        continue;
      }
      link?.close();
      if (m.id !== this.o.self) {
        this.links.set(m.id, new Link(m, this.clientFor(m), this.o, {
          unreachable: () => this.handlers?.reportUnreachable(m.id),
          metadata: () => this.callMetadata(),
          superseded: (details) => this.onSuperseded(m.id, details),
        }));
      }
    }
    for (const [id, link] of this.links) {
      if (this.memberIds.has(id) || this.retiring.has(id)) continue;
      this.retiring.set(id, setTimeout(() => {
        this.retiring.delete(id);
        if (this.memberIds.has(id)) return;
        link.close();
        this.links.delete(id);
        // Ends the peer's story in the log: a removed member stopped meanwhile was last
        // logged unreachable, and nothing else would say that it is no longer tried.
        this.o.log.info({ event: 'peer_link_closed', peer: id, peer_addr: link.member.peer_addr, reason: 'removed' },
          `member ${id} at ${link.member.peer_addr} was removed from the cluster: its link is closed and it is no longer tried`);
      }, this.o.removedLinkMs ?? REMOVED_LINK_MS));
    }
  }

  /** Names this process's start (its data directory's lock counted it) on every call from now on. */
  setStarts(starts: number): void {
    this.incarnation = { starts, tag: this.tag };
  }

  /** The metadata of a call this process makes: its incarnation, once known. */
  private callMetadata(): grpc.Metadata {
    const metadata = new grpc.Metadata();
    metadata.set(CLUSTER_KEY, this.o.clusterId);
    if (this.incarnation) metadata.set(INCARNATION_KEY, incarnationText(this.incarnation));
    return metadata;
  }

  /** A peer refused a call of this process as an earlier start of its member: the replica is told, once it listens. */
  private onSuperseded(peer: NodeId, details: string): void {
    if (!this.closed) this.handlers?.superseded(peer, details);
  }

  /** Binds the listener and starts serving the replica. */
  async listen(handlers: MeshHandlers): Promise<void> {
    this.handlers = handlers;
    this.server.addService(PEER_SERVICE, {
      raft: (call: grpc.ServerReadableStream<RaftBatch, object>, done: grpc.sendUnaryData<object>) => this.onRaftStream(call, done),
      snapshot: (call: grpc.ServerReadableStream<WireChunk, SnapshotAck>, done: grpc.sendUnaryData<SnapshotAck>) => void this.onSnapshot(call, done),
      propose: (call: grpc.ServerUnaryCall<ProposeRequest, ProposeReply>, done: grpc.sendUnaryData<ProposeReply>) => void this.onPropose(call, done),
      forward: (call: grpc.ServerDuplexStream<ForwardRequest, ForwardReply>) => this.onForward(call),
    });
    const address = `${this.o.host.includes(':') ? `[${this.o.host}]` : this.o.host}:${this.o.port}`;
    this.port = await new Promise<number>((resolve, reject) => {
      this.server.bindAsync(address, new MutualTls13(this.o.tls), (err, port) => (err ? reject(err) : resolve(port)));
    });
  }

  /** Queues Raft messages for their peers; a snapshot message starts a store transfer. */
  send(messages: readonly Message[]): void {
    for (const m of messages) {
      const link = this.links.get(m.to);
      if (!link || this.closed) continue;
      if (m.type === 'snap') this.sendSnapshot(m, link);
      else link.push(this.codec.encode(m));
    }
  }

  /** Forwards an operation to the primary; resolves with where the primary put it. */
  forward(leader: NodeId, operation: Uint8Array, timeoutMs: number): Promise<{ index: number; term: number }> {
    const link = this.links.get(leader);
    if (!link) return Promise.reject(new ForwardFailed(`${leader} is not a peer`));
    return link.forwarder.forward(operation, timeoutMs);
  }

  /** Forwards a membership change to the primary; resolves with where the primary put it. */
  forwardConfChange(leader: NodeId, change: ConfChange, timeoutMs: number): Promise<{ index: number; term: number }> {
    const link = this.links.get(leader);
    if (!link) return Promise.reject(new ForwardFailed(`${leader} is not a peer`));
    return callPropose(link.client, leader, { operation: new Uint8Array(), confChange: JSON.stringify(change) }, timeoutMs, link.calls);
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const t of this.retiring.values()) clearTimeout(t);
    for (const link of this.links.values()) link.close();
    // Peers hold their streams open for as long as they live: a graceful shutdown
    // would wait for them. Raft loses nothing it cannot resend, so cut them.
    this.server.forceShutdown();
  }

  // ---- incoming ----

  /** The member the call's certificate names, or what to answer it (PERMISSION_DENIED) when that is no other member in force. */
  private caller(call: Pick<grpc.ServerUnaryCall<unknown, unknown>, 'getAuthContext' | 'getPeer'>): { id: NodeId } | { refused: grpc.StatusObject } {
    const name = certificateName(call.getAuthContext().sslPeerCertificate);
    if (name === null || name === this.o.self || !this.memberIds.has(name)) {
      // A primary calls again about ten times a second.
      this.refuseRepeated(name ?? '', 'unknown_member', { peer: call.getPeer(), ...(name === null ? {} : { member: name }) },
        'a peer call under a certificate that names no other member in force was refused. A member added since this one last heard is known here once the log that adds it arrives; '
        + 'but a member waiting to join knows only the members its configuration lists: when the caller is a member in force (apl cluster status names them), list it, with its addresses, in this member\'s members and start it again');
      return { refused: denied(refusalDetails(name, this.o.self)) };
    }
    return { id: name };
  }

  /**
   * Lets a call from member `from` through by the incarnation it names, or says what to
   * answer it. A later start than the one heard from before supersedes it: that start's
   * calls still open are ended (`end` registers this call's, until `release`). An earlier
   * start is refused, FAILED_PRECONDITION with SUPERSEDED_KEY, and its process stops when
   * told. A call that names none (an earlier release) is let through and not followed.
   *
   * A call of another cluster is refused first (PERMISSION_DENIED): a process of another
   * cluster under a certificate of the same CA and the same member id (a staging node
   * whose peer address was mistyped as this cluster's) is not a start of this member, and
   * must neither stop it nor forward operations into its log.
   */
  private admit(from: NodeId, call: { metadata: grpc.Metadata; getPeer(): string }, end?: (status: grpc.StatusObject) => void): { refused: grpc.StatusObject } | { release: () => void } {
    const cluster = call.metadata.get(CLUSTER_KEY);
    if (cluster.length > 0 && cluster[0] !== this.o.clusterId) {
      const theirs = String(cluster[0]);
      // Its process calls again at every reconnect.
      this.refuseRepeated(`${from} ${theirs}`, 'foreign_cluster', { from, peer: call.getPeer(), cluster: theirs }, 'a peer call of another cluster was refused');
      return { refused: denied(`this is ${this.o.self} of cluster ${this.o.clusterId}, and the call is of cluster ${theirs}: a peer address of another cluster points here`) };
    }
    const named = call.metadata.get(INCARNATION_KEY);
    const unfollowed = { release: () => undefined };
    if (named.length === 0) return unfollowed;
    const incarnation = typeof named[0] === 'string' ? parseIncarnation(named[0]) : null;
    const peer = call.getPeer();
    if (incarnation === null) {
      this.refuse('malformed', { from, incarnation: String(named[0]) }, 'a peer call whose incarnation is not <starts>.<tag> was refused');
      return { refused: { code: grpc.status.INVALID_ARGUMENT, details: `the ${INCARNATION_KEY} metadata is not <starts>.<16 hex digits>`, metadata: new grpc.Metadata() } };
    }
    let heard = this.heard.get(from);
    const order = heard ? compareIncarnations(incarnation, heard.incarnation) : 1;
    if (order < 0) {
      const later = heard!;
      this.o.metrics.peerRefused.inc({ reason: 'superseded' });
      const now = Date.now();
      if (now - later.loggedAt >= SUPERSEDED_LOG_MS) {
        later.loggedAt = now;
        this.o.log.error({ event: 'earlier_start_refused', member: from, refused: incarnationText(incarnation), refused_from: peer, running: incarnationText(later.incarnation), running_from: later.peer },
          `a call from start ${incarnation.starts} of member ${from} (from ${peer}) was refused: start ${later.incarnation.starts} of ${from} (from ${later.peer}) has called since. `
          + 'Two processes run as one member, or a data directory was put back from an older copy; the earlier one is told to stop');
      }
      return { refused: this.supersededStatus(from, incarnation, later) };
    }
    if (order > 0) {
      const before = heard;
      heard = { incarnation, peer, calls: new Set(), loggedAt: 0 };
      this.heard.set(from, heard);
      if (before && before.calls.size > 0) {
        this.o.log.warn({ event: 'member_restarted', member: from, before: incarnationText(before.incarnation), now: incarnationText(incarnation), from: peer },
          `start ${incarnation.starts} of member ${from} called (from ${peer}): the calls of its start ${before.incarnation.starts} still open were ended`);
        const status = this.supersededStatus(from, before.incarnation, heard);
        for (const e of [...before.calls]) e(status);
      }
    }
    if (!end) return unfollowed;
    const calls = heard!.calls;
    calls.add(end);
    return { release: () => calls.delete(end) };
  }

  /** What an earlier start of `from` is answered: which start was heard from since, and from where. */
  private supersededStatus(from: NodeId, earlier: Incarnation, later: Heard): grpc.StatusObject {
    const metadata = new grpc.Metadata();
    metadata.set(SUPERSEDED_KEY, incarnationText(later.incarnation));
    const tie = earlier.starts === later.incarnation.starts ? ` (both start ${earlier.starts}: the tag ${later.incarnation.tag} orders after this process's ${earlier.tag})` : '';
    return {
      code: grpc.status.FAILED_PRECONDITION,
      details: `start ${later.incarnation.starts} of ${from} has called ${this.o.self} from ${later.peer}, and this process is start ${earlier.starts}${tie}`,
      metadata,
    };
  }

  private onRaftStream(call: grpc.ServerReadableStream<RaftBatch, object>, done: grpc.sendUnaryData<object>): void {
    const c = this.caller(call);
    if ('refused' in c) {
      done(c.refused);
      return;
    }
    const from = c.id;
    let answered = false;
    let release = () => undefined as unknown;
    const answer = (status: grpc.StatusObject | null) => {
      if (answered) return;
      answered = true;
      release();
      if (status) done(status);
      else done(null, {});
    };
    const admitted = this.admit(from, call, answer);
    if ('refused' in admitted) {
      answer(admitted.refused);
      return;
    }
    release = admitted.release;
    call.on('data', (batch: RaftBatch) => {
      if (answered) return;
      for (const bytes of batch.messages) {
        const m = this.decodeFrom(from, bytes);
        if (m) this.handlers!.step(m);
      }
    });
    call.on('end', () => answer(null));
    call.on('close', () => release());
    call.on('error', () => undefined);
  }

  /** Decodes a Raft message from a peer, or refuses (logs and counts) it and answers null. */
  private decodeFrom(from: NodeId, bytes: Uint8Array): Message | null {
    let m: Message;
    try {
      m = this.codec.decode(bytes);
    } catch (err) {
      const reason = err instanceof WireError && err.code === 'foreign_cluster' ? 'foreign_cluster' : 'malformed';
      this.refuse(reason, { from, why: (err as Error).message }, 'a raft message was refused');
      return null;
    }
    if (m.from !== from || m.to !== this.o.self) {
      this.refuse('sender_mismatch', { certificate: from, from: m.from, to: m.to }, 'a raft message not from its certificate\'s member, or not to this one, was refused');
      return null;
    }
    return m;
  }

  private refuse(reason: string, detail: Record<string, unknown>, text: string): void {
    this.o.metrics.peerRefused.inc({ reason });
    this.o.log.warn({ event: 'peer_refused', reason, ...detail }, text);
  }

  /** A refusal its caller repeats (`caller` names it): counted each time, logged once in SUPERSEDED_LOG_MS. */
  private refuseRepeated(caller: string, reason: string, detail: Record<string, unknown>, text: string): void {
    const key = `${reason} ${caller}`;
    const now = Date.now();
    if (now - (this.refusalLogged.get(key) ?? -Infinity) < SUPERSEDED_LOG_MS) {
      this.o.metrics.peerRefused.inc({ reason });
      return;
    }
    if (this.refusalLogged.size >= REFUSALS_LOGGED_MAX) this.refusalLogged.clear();
    this.refusalLogged.set(key, now);
    this.refuse(reason, detail, text);
  }

  private async onSnapshot(call: grpc.ServerReadableStream<WireChunk, SnapshotAck>, done: grpc.sendUnaryData<SnapshotAck>): Promise<void> {
    const c = this.caller(call);
    if ('refused' in c) {
      done(c.refused);
      return;
    }
    const from = c.id;
    const admitted = this.admit(from, call);
    if ('refused' in admitted) {
      done(admitted.refused);
      return;
    }
    const chunks = call[Symbol.asyncIterator]() as AsyncIterator<WireChunk>;
    try {
      const first = await chunks.next();
      if (first.done || !first.value.message || !first.value.position) throw new Error('the stream does not begin with the snapshot message and the store position');
      const m = this.decodeFrom(from, first.value.message);
      if (!m || m.type !== 'snap' || !m.snapshot) throw new Error('the first chunk carries no snapshot message from this peer');
      const p = first.value.position;
      const position = { applied: u64(p.applied), term: u64(p.term), stateHash: p.stateHash };
      // A stream cut by the sender's death ends as if it were whole (Node.js's HTTP/2
      // ends a stream's reading side when its session closes): the mark tells them apart.
      const marked = first.value.marksLast === true;
      async function* all(): AsyncGenerator<SnapshotChunk> {
        let chunk: WireChunk | undefined = first.value as WireChunk;
        let received = 0;
        let last = false;
        while (chunk) {
          if (last) throw new Error(`snapshot chunk ${u64(chunk.seq)} arrived after the one marked last`);
          last = chunk.last === true;
          received++;
          yield { seq: u64(chunk.seq), data: chunk.data, digest: chunk.digest };
          const next = await chunks.next();
          chunk = next.done ? undefined : next.value;
        }
        if (marked && !last) throw new Error(`the stream ended after ${received} chunks, before the one marked last: it was cut (the sender ${from} stopped, or the connection failed)`);
      }
      await this.handlers!.installSnapshot(m, position, all());
      this.o.metrics.peerSnapshots.inc({ direction: 'received', outcome: 'installed' });
      done(null, { installed: true, reason: '' });
    } catch (err) {
      this.o.metrics.peerSnapshots.inc({ direction: 'received', outcome: 'failed' });
      this.o.log.warn({ event: 'snapshot_receive_failed', from, err: (err as Error).message }, 'a streamed snapshot was not installed');
      done(null, { installed: false, reason: (err as Error).message });
    }
  }

  private async onPropose(call: grpc.ServerUnaryCall<ProposeRequest, ProposeReply>, done: grpc.sendUnaryData<ProposeReply>): Promise<void> {
    const c = this.caller(call);
    const admitted = 'refused' in c ? c : this.admit(c.id, call);
    if ('refused' in admitted) {
      done(admitted.refused);
      return;
    }
    try {
      const conf = call.request.confChange;
      done(null, conf ? await this.handlers!.proposeConfChange(parseConfChange(conf)) : await this.handlers!.propose(call.request.operation));
    } catch (err) {
      const metadata = new grpc.Metadata();
      metadata.set(ERROR_KEY, JSON.stringify(refusalBody(err)));
      done({ code: grpc.status.FAILED_PRECONDITION, details: (err as Error).message, metadata });
    }
  }

  /**
   * A follower's stream of forwarded operations. Its certificate is read once, here;
   * each operation then asks only whether its member is still one (a removed member's
   * stream is ended PERMISSION_DENIED). Each reply carries its request's id.
   */
  private onForward(call: grpc.ServerDuplexStream<ForwardRequest, ForwardReply>): void {
    const c = this.caller(call);
    if ('refused' in c) {
      call.emit('error', c.refused);
      return;
    }
    const from = c.id;
    let open = true;
    let release = () => undefined as unknown;
    const end = (status: grpc.StatusObject) => {
      if (!open) return;
      open = false;
      release();
      call.emit('error', status);
    };
    const admitted = this.admit(from, call, end);
    if ('refused' in admitted) {
      end(admitted.refused);
      return;
    }
    release = admitted.release;
    const reply = (r: ForwardReply) => {
      if (open) call.write(r);
    };
    call.on('data', (r: ForwardRequest) => {
      if (!open) return;
      if (!this.memberIds.has(from)) {
        this.refuse('unknown_member', { peer: call.getPeer(), member: from }, 'a forwarded operation from a member no longer in the cluster was refused');
        end(denied(refusalDetails(from, this.o.self)));
        return;
      }
      this.handlers!.propose(r.operation).then(
        (at) => reply({ id: r.id, index: at.index, term: at.term, error: '' }),
        (err: unknown) => reply({ id: r.id, index: 0, term: 0, error: JSON.stringify(refusalBody(err)) }),
      );
    });
    call.on('end', () => {
      open = false;
      release();
      call.end();
    });
    call.on('error', () => {
      open = false;
      release();
    });
    call.on('close', () => release());
  }

  // ---- outgoing ----

  private clientFor(m: MeshMember): grpc.Client {
    const context = createSecureContext({ ca: this.o.tls.ca, cert: this.o.tls.cert, key: this.o.tls.key, minVersion: 'TLSv1.3' });
    const expected = new Set([m.id]);
    const credentials = grpc.credentials.createFromSecureContext(context, {
      // The peer is known by the id its certificate names, whatever address it is reached at.
      checkServerIdentity: (_host, cert) => (certificateIdentity(cert, expected) === m.id ? undefined : new Error(`the certificate at ${m.peer_addr} does not name member ${m.id}`)),
    });
    return new grpc.Client(m.peer_addr, credentials, {
      ...CHANNEL_OPTIONS,
      // The TLS server name is the member's id, not its address: a name an IP address
      // may not be (RFC 6066; Node.js warns, DEP0123), and the one its certificate holds.
      'grpc.ssl_target_name_override': m.id,
      'grpc.keepalive_time_ms': 10_000,
      'grpc.keepalive_timeout_ms': 5_000,
      'grpc.initial_reconnect_backoff_ms': RECONNECT_MS,
      'grpc.max_reconnect_backoff_ms': 2_000,
    });
  }

  /**
   * Streams this member's store to a peer behind the log's compaction: the Raft
   * message carries the metadata, the chunks carry the store (at an applied index at
   * or beyond it), and Raft learns the outcome through reportSnapshot. One transfer
   * per peer at a time.
   */
  private sendSnapshot(m: Message, link: Link): void {
    if (this.transfers.has(m.to) || !this.handlers) return;
    this.transfers.add(m.to);
    const handlers = this.handlers;
    // How long the transfer took, from here to the peer's answer: while a member that
    // needs the store is part of every quorum, it is how long the cluster cannot commit.
    const started = performance.now();
    const finish = (ok: boolean, why: string) => {
      this.transfers.delete(m.to);
      this.o.metrics.peerSnapshots.inc({ direction: 'sent', outcome: ok ? 'installed' : 'failed' });
      const ms = Math.round(performance.now() - started);
      this.o.log[ok ? 'info' : 'warn']({ event: 'snapshot_sent', to: m.to, index: m.snapshot?.meta.index, ok, why, ms }, ok ? 'snapshot installed by peer' : 'snapshot transfer failed');
      if (!this.closed) handlers.reportSnapshot(m.to, ok ? 'finish' : 'failure');
    };
    void (async () => {
      const { position, chunks } = await handlers.openSnapshot();
      const message = this.codec.encode({ ...m, snapshot: { meta: m.snapshot!.meta, data: new Uint8Array() } });
      const result = new Promise<SnapshotAck>((resolve, reject) => {
        // The call may end before every chunk is written: the peer answers at once when it
        // refuses the transfer, fails it part-way, or goes away. A write waiting for the
        // call to drain then waits for ever (grpc-js emits no 'drain' on an ended call),
        // and with it the read of the store, whose LevelDB snapshot would keep every file
        // it reads on the disk. So the writes stop as soon as the call has ended.
        let ended = false;
        let wake: () => void = () => undefined;
        const call = link.client.makeClientStreamRequest(PEER_SERVICE.snapshot.path, PEER_SERVICE.snapshot.requestSerialize, PEER_SERVICE.snapshot.responseDeserialize, this.callMetadata(), { deadline: Date.now() + this.o.snapshotTimeoutMs }, (err, ack) => {
          ended = true;
          wake();
          if (!err) return resolve(ack!);
          const superseded = supersededDetails(err);
          if (superseded !== null) this.onSuperseded(m.to, superseded);
          reject(err);
        });
        const drained = () => new Promise<void>((r) => {
          wake = r;
          call.once('drain', r);
        }).finally(() => call.off('drain', wake));
        void (async () => {
          let first = true;
          const send = async (c: SnapshotChunk, last: boolean) => {
            const chunk: WireChunk = {
              seq: c.seq, data: c.data, digest: c.digest, last,
              ...(first ? { message, position: { applied: position.applied, term: position.term, stateHash: position.stateHash }, marksLast: true } : {}),
            };
            first = false;
            if (!call.write(chunk)) await drained();
          };
          try {
            // Each chunk is held until the next is read, so that the last goes marked.
            let held: SnapshotChunk | null = null;
            for await (const c of chunks) {
              if (ended) break; // closes the read of the store
              if (held) await send(held, false);
              held = c;
            }
            if (ended) return;
            if (held) await send(held, true);
            if (!ended) call.end();
          } catch (err) {
            call.cancel();
            reject(err as Error);
          }
        })();
      });
      const ack = await result;
      finish(ack.installed, ack.reason);
    })().catch((err: Error) => finish(false, err.message));
  }
}

/** What a link asks of its mesh. */
interface LinkHooks {
  /** the stream broke: Raft is told the peer is unreachable */
  unreachable(): void;
  /** the metadata of a new call (this process's incarnation) */
  metadata(): grpc.Metadata;
  /** the peer refused a call as from an earlier start of this member */
  superseded(details: string): void;
}

/** One outgoing Raft stream to a peer, with its bounded queue. */
class Link {
  private queue: Uint8Array[] = [];
  private call: grpc.ClientWritableStream<RaftBatch> | null = null;
  private waiting = false;
  private scheduled = false;
  private retryAt = 0;
  private closed = false;
  /** whether the peer was found unreachable and not since reached: the log says each change once. */
  private down = false;
  readonly client: grpc.Client;
  readonly forwarder: Forwarder;
  /** what single calls to the peer send and are told */
  readonly calls: CallHooks;

  constructor(
    readonly member: MeshMember,
    client: grpc.Client,
    private readonly o: MeshOptions,
    private readonly hooks: LinkHooks,
  ) {
    this.client = client;
    this.calls = { metadata: hooks.metadata, superseded: hooks.superseded };
    this.forwarder = new Forwarder(member.id, client, this.calls);
    this.watchChannel(client.getChannel().getConnectivityState(false));
  }

  /**
   * Says in the log when a peer found unreachable is reached again (its channel is
   * ready). While it is down the channel is kept trying, at its reconnect backoff (at
   * most 2 s): a member that has nothing to send the peer (a follower, to a former
   * primary back as a follower) would otherwise leave its channel idle, and say the
   * peer was back only when it next sent to it, at the next election.
   */
  private watchChannel(last: grpc.connectivityState): void {
    const channel = this.client.getChannel();
    channel.watchConnectivityState(last, Infinity, () => {
      if (this.closed) return;
      const now = channel.getConnectivityState(false);
      if (now === grpc.connectivityState.SHUTDOWN) return;
      if (now === grpc.connectivityState.READY && this.down) {
        this.down = false;
        this.o.log.info({ event: 'peer_reachable', peer: this.member.id, peer_addr: this.member.peer_addr }, `member ${this.member.id} at ${this.member.peer_addr} is reached again`);
      }
      if (now === grpc.connectivityState.IDLE && this.down) channel.getConnectivityState(true);
      this.watchChannel(now);
    });
  }

  push(bytes: Uint8Array): void {
    if (this.queue.length >= this.o.queueMessagesMax) {
      this.o.metrics.peerDropped.inc({ peer: this.member.id });
      return;
    }
    this.queue.push(bytes);
    if (!this.scheduled) {
      this.scheduled = true;
      setImmediate(() => {
        this.scheduled = false;
        this.flush();
      });
    }
  }

  close(): void {
    this.closed = true;
    this.call?.end();
    this.call = null;
    this.forwarder.close();
    this.client.close();
  }

  /** Writes the queue in batches while the stream takes them; waits for 'drain' when it does not. */
  private flush(): void {
    if (this.closed || this.waiting || this.queue.length === 0) return;
    const call = this.call ?? this.open();
    if (!call) return;
    while (this.queue.length > 0) {
      const messages: Uint8Array[] = [];
      let bytes = 0;
      while (this.queue.length > 0 && (messages.length === 0 || bytes + this.queue[0]!.length <= BATCH_BYTES_MAX)) {
        const m = this.queue.shift()!;
        bytes += m.length;
        messages.push(m);
      }
      if (!call.write({ messages })) {
        this.waiting = true;
        call.once('drain', () => {
          this.waiting = false;
          this.flush();
        });
        return;
      }
    }
  }

  /** Opens the stream, unless one broke moments ago: then the queue waits (and overflows) until the retry time. */
  private open(): grpc.ClientWritableStream<RaftBatch> | null {
    const now = Date.now();
    if (now < this.retryAt) {
      setTimeout(() => this.flush(), this.retryAt - now);
      return null;
    }
    const call = this.client.makeClientStreamRequest(PEER_SERVICE.raft.path, PEER_SERVICE.raft.requestSerialize, PEER_SERVICE.raft.responseDeserialize, this.hooks.metadata(), (err) => {
      if (this.call === call) this.call = null;
      this.waiting = false;
      const superseded = err ? supersededDetails(err) : null;
      if (superseded !== null) this.hooks.superseded(superseded);
      if (err && !this.closed) {
        this.retryAt = Date.now() + RECONNECT_MS;
        this.o.metrics.peerDropped.inc({ peer: this.member.id }, this.queue.length);
        this.queue = [];
        // Once per outage, with what failed: a wrong address, a refused certificate, a peer
        // down. (Told it is superseded, the process stops and says why: the peer was reached.)
        if (!this.down && superseded === null) {
          this.down = true;
          const why = callError(err);
          this.o.log.warn({ event: 'peer_unreachable', peer: this.member.id, peer_addr: this.member.peer_addr, err: why },
            `member ${this.member.id} at ${this.member.peer_addr} cannot be reached: ${why}`);
          this.client.getChannel().getConnectivityState(true);
        }
        this.hooks.unreachable();
      }
    });
    this.call = call;
    return call;
  }
}

/** What a single call or a forwarding stream sends (this process's incarnation) and is told (that it is superseded). */
interface CallHooks {
  metadata(): grpc.Metadata;
  superseded(details: string): void;
}

interface PendingForward {
  operation: Uint8Array;
  deadline: number;
  timer: NodeJS.Timeout;
  resolve(at: { index: number; term: number }): void;
  reject(err: Error): void;
}

/**
 * The operations this member forwards to one peer while that peer is the primary: one
 * stream, opened by the first forward and again by the first after it broke. A forward
 * not answered in its time, or whose stream broke first, fails as ForwardFailed (the
 * primary may or may not have appended it); a refusal arrives as ForwardRefused. A peer
 * that does not serve Forward (an older release) is sent Propose calls instead.
 */
class Forwarder {
  private call: grpc.ClientDuplexStream<ForwardRequest, ForwardReply> | null = null;
  private readonly pending = new Map<number, PendingForward>();
  private nextId = 1;
  /** until this time operations go as Propose calls: the peer answered UNIMPLEMENTED. */
  private unaryUntil = 0;

  constructor(
    private readonly peer: NodeId,
    private readonly client: grpc.Client,
    private readonly hooks: CallHooks,
  ) {}

  forward(operation: Uint8Array, timeoutMs: number): Promise<{ index: number; term: number }> {
    if (Date.now() < this.unaryUntil) return callPropose(this.client, this.peer, { operation }, timeoutMs, this.hooks);
    const call = this.call ?? this.open();
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new ForwardFailed(`the primary ${this.peer} did not answer within ${timeoutMs} ms`));
      }, timeoutMs);
      this.pending.set(id, { operation, deadline: Date.now() + timeoutMs, timer, resolve, reject });
      // The gateway bounds the proposals waiting, so what the stream buffers is bounded too.
      call.write({ id, operation });
    });
  }

  close(): void {
    const call = this.call;
    this.call = null;
    call?.cancel();
    this.failAll(`the link to ${this.peer} closed`);
  }

  private open(): grpc.ClientDuplexStream<ForwardRequest, ForwardReply> {
    const call = this.client.makeBidiStreamRequest(PEER_SERVICE.forward.path, PEER_SERVICE.forward.requestSerialize, PEER_SERVICE.forward.responseDeserialize, this.hooks.metadata());
    call.on('data', (r: ForwardReply) => this.settle(r));
    call.on('error', () => undefined); // its status follows and says why
    call.on('status', (status: grpc.StatusObject) => this.ended(call, status));
    this.call = call;
    return call;
  }

  private settle(r: ForwardReply): void {
    const id = u64(r.id);
    const p = this.pending.get(id);
    if (!p) return; // its time ran out first
    this.pending.delete(id);
    clearTimeout(p.timer);
    if (r.error) p.reject(refusalFrom(r.error, this.peer));
    else p.resolve({ index: u64(r.index), term: u64(r.term) });
  }

  /** The stream ended: what waits on it fails, or, if the peer does not serve Forward, goes as Propose calls. */
  private ended(call: grpc.ClientDuplexStream<ForwardRequest, ForwardReply>, status: grpc.StatusObject): void {
    if (this.call !== call) return;
    this.call = null;
    const superseded = supersededDetails(status);
    if (superseded !== null) this.hooks.superseded(superseded);
    if (status.code !== grpc.status.UNIMPLEMENTED) {
      this.failAll(`the stream to the primary ${this.peer} ended: ${status.details || grpc.status[status.code]}`);
      return;
    }
    // Refused before any request was read: nothing was appended, so each is sent again.
    this.unaryUntil = Date.now() + UNARY_FALLBACK_MS;
    const waiting = [...this.pending.values()];
    this.pending.clear();
    for (const p of waiting) {
      clearTimeout(p.timer);
      callPropose(this.client, this.peer, { operation: p.operation }, Math.max(1, p.deadline - Date.now()), this.hooks).then(p.resolve, p.reject);
    }
  }

  private failAll(why: string): void {
    const waiting = [...this.pending.values()];
    this.pending.clear();
    for (const p of waiting) {
      clearTimeout(p.timer);
      p.reject(new ForwardFailed(why));
    }
  }
}

/** One Propose call: resolves with where the primary appended the proposal. */
function callPropose(client: grpc.Client, leader: NodeId, request: ProposeRequest, timeoutMs: number, hooks: CallHooks): Promise<{ index: number; term: number }> {
  return new Promise((resolve, reject) => {
    client.makeUnaryRequest(PEER_SERVICE.propose.path, PEER_SERVICE.propose.requestSerialize, PEER_SERVICE.propose.responseDeserialize, request, hooks.metadata(), { deadline: Date.now() + timeoutMs }, (err, reply) => {
      if (err) {
        const superseded = supersededDetails(err);
        if (superseded !== null) hooks.superseded(superseded);
        const body = err.metadata?.get(ERROR_KEY)[0];
        reject(typeof body === 'string' ? refusalFrom(body, leader) : new ForwardFailed(`the primary ${leader} did not answer: ${callError(err)}`));
        return;
      }
      resolve({ index: u64(reply!.index), term: u64(reply!.term) });
    });
  });
}

/** The `{error, message}` body a refused proposal is answered with. */
function refusalBody(err: unknown): object {
  return (err as { body?: object }).body ?? { error: 'gateway_error', message: (err as Error).message };
}

/** The primary's refusal read back from the JSON of its body (refusalBody's other end). */
function refusalFrom(text: string, peer: NodeId): ForwardRefused | ForwardFailed {
  try {
    return new ForwardRefused(JSON.parse(text) as ForwardRefused['body']);
  } catch {
    return new ForwardFailed(`the primary ${peer} answered a refusal that is not JSON`);
  }
}

/** A forwarded ConfChange; a malformed one is refused like a malformed operation. */
function parseConfChange(text: string): ConfChange {
  const c = JSON.parse(text) as ConfChange;
  if (!['addLearner', 'promote', 'remove'].includes(c?.type) || typeof c.node !== 'string' || (c.context !== undefined && typeof c.context !== 'string')) {
    throw Object.assign(new Error('the forwarded membership change is malformed'), { body: { error: 'malformed_request', message: 'The forwarded membership change is malformed.' } });
  }
  return c.context === undefined ? { type: c.type, node: c.node } : { type: c.type, node: c.node, context: c.context };
}

/** A decoded uint64 (a number, or a Long beyond 32 bits) as a safe integer. */
function u64(v: unknown): number {
  if (typeof v === 'number') return v;
  const long = v as { high: number; low: number };
  if (long.high >>> 0 >= 0x200000) throw new Error('a 64-bit value beyond 2^53 arrived from a peer');
  return (long.high >>> 0) * 0x1_0000_0000 + (long.low >>> 0);
}
