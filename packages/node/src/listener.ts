/**
 * A listener's HTTPS server with the limits that keep one client from starving the
 * others (config `http`): the TLS handshake and the request headers must be in within
 * `headers_timeout_ms` (a slow-loris connection that trickles its headers is closed),
 * the whole request within `request_timeout_ms`, an idle keep-alive connection is
 * closed after `keep_alive_timeout_ms`, and at most `connections_max` connections are
 * open at once (Node.js closes one beyond it as soon as it is accepted).
 */
import { createServer, type Server, type ServerOptions } from 'node:https';
import type { Config } from './config.js';

/** How often Node.js checks open requests against the timeouts, at most; at least 4 checks per headers timeout. */
const CHECK_INTERVAL_MAX_MS = 1000;

export function limitedServer(tls: ServerOptions, h: Config['http']): Server {
  const server = createServer({
    ...tls,
    handshakeTimeout: h.headers_timeout_ms,
    headersTimeout: h.headers_timeout_ms,
    requestTimeout: h.request_timeout_ms,
    keepAliveTimeout: h.keep_alive_timeout_ms,
    connectionsCheckingInterval: Math.max(10, Math.min(CHECK_INTERVAL_MAX_MS, Math.floor(h.headers_timeout_ms / 4))),
  });
  server.maxConnections = h.connections_max;
  return server;
}
