/**
 * A listener's HTTPS server with the limits that keep one client from starving the
 * others (config `http`): the TLS handshake and the request headers must be in within
 * `headers_timeout_ms` (a slow-loris connection that trickles its headers is closed),
 * the whole request within `request_timeout_ms`, an idle keep-alive connection is
 * closed after `keep_alive_timeout_ms`, at most `connections_max` connections are
 * open at once (Node.js closes one beyond it as soon as it is accepted), and at most
 * `connections_per_source_max` of them from one client address (closed as accepted too).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { createServer, type Server, type ServerOptions } from 'node:https';
import { createRequire } from 'node:module';
import type { AddressInfo, Socket } from 'node:net';
import type { Config } from './config.js';
import { JSON_TYPE, endLingering } from './http.js';
import type { ConnectionRefusal } from './metrics.js';

/**
 * The most bytes of a request line and headers Node.js reads (--max-http-header-size).
 * Read through require: an ES import of node:http evaluates every export it has, and
 * its WebSocket and event classes load Node.js's fetch implementation, about 50 ms on
 * each thread that starts a plane, for nothing a node uses.
 */
const { maxHeaderSize } = createRequire(import.meta.url)('node:http') as typeof import('node:http');

/** Told of each connection a listener refuses or closes before a request reaches its plane (counted in the metrics). */
export type OnRefused = (reason: ConnectionRefusal) => void;

/** How often Node.js checks open requests against the timeouts, at most; at least 4 checks per headers timeout. */
const CHECK_INTERVAL_MAX_MS = 1000;

/**
 * How long a listener that closes waits for the requests it is answering before it
 * cuts their connections: longer than a write waits for its commit (5 s by default).
 */
export const CLOSE_GRACE_MS = 10_000;

/** The answers each server is writing, and whether it is closing (closeListener). */
const draining = new WeakMap<Server, { closing: boolean; open: Set<ServerResponse> }>();

export function limitedServer(tls: ServerOptions, h: Config['http']): Server {
  const server = createServer({
    ...tls,
    // Node.js offers http/1.1 alone, and ends the handshake of a client that asks for
    // http/1.0 by ALPN (curl -0) with an alert: the planes speak both (decisions.md).
    ALPNProtocols: ['http/1.1', 'http/1.0'],
    handshakeTimeout: h.headers_timeout_ms,
    headersTimeout: h.headers_timeout_ms,
    requestTimeout: h.request_timeout_ms,
    keepAliveTimeout: h.keep_alive_timeout_ms,
    // Node.js would answer a request without Host 400 with no body; planeApp answers it with one.
    requireHostHeader: false,
    connectionsCheckingInterval: Math.max(10, Math.min(CHECK_INTERVAL_MAX_MS, Math.floor(h.headers_timeout_ms / 4))),
  });
  server.maxConnections = h.connections_max;
  capPerSource(server, h.connections_per_source_max);
  const state = { closing: false, open: new Set<ServerResponse>() };
  draining.set(server, state);
  // Registered before the plane's own listener: a request that arrives while the
  // server closes is answered, on a connection that then closes.
  server.on('request', (_req: IncomingMessage, res: ServerResponse) => {
    if (state.closing) res.shouldKeepAlive = false;
    state.open.add(res);
    res.once('close', () => state.open.delete(res));
  });
  return server;
}

/** Emitted by a listener for each connection it closes beyond `http.connections_per_source_max` (told as refused by `listen`). */
const DROP_PER_SOURCE = 'dropPerSource';

/**
 * The TCP connections closed beyond `http.connections_per_source_max`. The TLS server
 * wraps each connection after this check and tells its closing as a client error; that
 * error is not a handshake that failed. Node.js names the TCP socket under a TLS socket
 * `_parent` (not a public field: were it gone, such a close would be counted twice).
 */
const dropped = new WeakSet<Socket>();
const wasDropped = (socket: unknown): boolean => {
  const parent = (socket as { _parent?: unknown })._parent;
  return parent instanceof Object && dropped.has(parent as Socket);
};

/**
 * Counts each listener's open connections by client address and closes one beyond
 * `max` as soon as it is accepted, before any TLS: the counts live as long as the
 * connections, so they are bounded by `connections_max`.
 */
function capPerSource(server: Server, max: number): void {
  const open = new Map<string, number>();
  server.prependListener('connection', (socket: Socket) => {
    const source = sourceAddress(socket.remoteAddress);
    const n = open.get(source) ?? 0;
    if (n >= max) {
      dropped.add(socket);
      socket.destroy();
      server.emit(DROP_PER_SOURCE);
      return;
    }
    open.set(source, n + 1);
    socket.once('close', () => {
      const left = (open.get(source) ?? 1) - 1;
      if (left === 0) open.delete(source);
      else open.set(source, left);
    });
  });
}

/**
 * The client address a connection is counted under: an IPv4 address seen through a
 * dual-stack socket (`::ffff:10.0.0.7`) is that IPv4 address. A socket already closed
 * has none; such connections share one count.
 */
export function sourceAddress(remote: string | undefined): string {
  if (remote === undefined) return '';
  return remote.toLowerCase().startsWith('::ffff:') && remote.includes('.') ? remote.slice(7) : remote;
}

/**
 * Closes a listener: no new connection is taken, the idle ones are closed, and every
 * answer still being written closes its connection once written, so that a client
 * kept alive cannot go on sending requests to a node that stops. Connections still
 * open after CLOSE_GRACE_MS are cut. Resolves once every connection has ended.
 */
export function closeListener(server: Server, graceMs = CLOSE_GRACE_MS): Promise<void> {
  const state = draining.get(server);
  if (state !== undefined) {
    state.closing = true;
    for (const res of state.open) if (!res.headersSent) res.shouldKeepAlive = false;
  }
  return new Promise<void>((resolve) => {
    const cut = setTimeout(() => server.closeAllConnections(), graceMs);
    server.close(() => {
      clearTimeout(cut);
      resolve();
    });
    server.closeIdleConnections();
  });
}

/**
 * A request Node's HTTP parser refuses (a bad request line, headers too large) never
 * reaches Express; it is answered here with the same `{error, message}` body, and so
 * is an `Expect` header other than 100-continue (Node.js would answer 417 with no body).
 * Each of these, and each connection dropped unanswered, is told to `refused`.
 */
function answerParseErrors(server: Server, refused: OnRefused): void {
  // Node.js closes a connection beyond server.maxConnections as soon as it is accepted.
  server.on('drop', () => refused('connections_max'));
  server.on(DROP_PER_SOURCE, () => refused('connections_per_source'));
  server.on('checkExpectation', (req: IncomingMessage, res: ServerResponse) => {
    refused('expectation_failed');
    const body = JSON.stringify({ error: 'expectation_failed', message: `Expect: ${String(req.headers.expect)} is not supported; only 100-continue is.` });
    res.writeHead(417, { 'Content-Type': JSON_TYPE, 'Content-Length': Buffer.byteLength(body), Connection: 'close' });
    res.end(req.method === 'HEAD' ? undefined : body);
  });
  // A response to HEAD has no body, so the answer needs the refused request's method.
  // The chunk that failed may be the middle of a long request line, so each socket
  // remembers how the request it is reading began: the first bytes after the previous
  // response finished (clients do not pipeline; one that does gets a body it ignores).
  const starts = new WeakMap<Socket, string | null>();
  server.on('secureConnection', (socket: Socket) => {
    starts.set(socket, null);
    socket.on('data', (chunk: Buffer) => {
      if (starts.get(socket) === null) starts.set(socket, chunk.subarray(0, 5).toString('latin1'));
    });
  });
  // A response may finish before its request's body is all in (an early refusal): the
  // rest of the body arrives after, so the next request begins only once both are done.
  server.on('request', (req, res) => {
    const reset = () => starts.set(req.socket, null);
    res.once('finish', reset);
    req.once('end', reset);
  });
  server.on('clientError', (err: Error & { rawPacket?: Buffer }, socket) => {
    if (wasDropped(socket)) return; // closed already, and told (capPerSource)
    // A connection whose TLS handshake never finished (a handshake time-out, bytes
    // that are no ClientHello) has nowhere to write an answer to: ending it would
    // leave it open, holding one of http.connections_max for good. It is dropped.
    // One whose client is already gone (not writable) is dropped too, uncounted.
    if (!starts.has(socket as Socket)) refused('tls_handshake');
    if (!socket.writable || !starts.has(socket as Socket)) {
      socket.destroy();
      return;
    }
    // A request not all in by http.headers_timeout_ms or http.request_timeout_ms (listener.ts).
    const code = (err as { code?: string }).code;
    const late = code === 'ERR_HTTP_REQUEST_TIMEOUT';
    refused(late ? 'request_timeout' : 'malformed_request');
    const body = JSON.stringify(late
      ? { error: 'request_timeout', message: 'The request was not all received in time; the connection is closed.' }
      : code === 'HPE_HEADER_OVERFLOW'
        ? { error: 'malformed_request', message: `The request line and headers are larger than the ${maxHeaderSize} bytes this node reads.` }
        : { error: 'malformed_request', message: 'The request could not be read as HTTP.' });
    const head = (starts.get(socket as Socket) ?? err.rawPacket?.subarray(0, 5).toString('latin1')) === 'HEAD ';
    endLingering(socket as Socket, `HTTP/1.1 ${late ? '408 Request Timeout' : '400 Bad Request'}\r\nContent-Type: ${JSON_TYPE}\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${head ? '' : body}`);
  });
}

/**
 * The address a bound listener answers at, `https://<host>:<port>` (an IPv6 host in
 * brackets). A wildcard bind (0.0.0.0, ::, in a container) is no address a client can
 * use, nor one its certificate names: the address the configuration advertises for
 * this plane is given instead, or else localhost at the port bound.
 */
export function listenerUrl(host: string, s: Server, advertised?: string | null): string {
  const port = (s.address() as AddressInfo).port;
  if (host === '0.0.0.0' || host === '::') return advertised ?? `https://localhost:${port}`;
  return `https://${host.includes(':') ? `[${host}]` : host}:${port}`;
}

/**
 * Binds a listener (refusing unparsable requests with `{error, message}`, and telling
 * `refused` of each connection refused before a request reached the plane); resolves
 * once it listens.
 */
export function listen(server: Server, port: number, host: string, refused: OnRefused): Promise<Server> {
  answerParseErrors(server, refused);
  return new Promise((resolvePromise, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolvePromise(server);
    });
  });
}
