/**
 * HTTP plumbing shared by both planes: lossless JSON in and out, the body limit, the
 * error handler that turns every failure into `{error, message}`, and one log line
 * and one metric per request.
 */
import { isUtf8 } from 'node:buffer';
import type { ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { NextFunction, Request, RequestHandler, Response } from 'express';
import express from 'express';
import { InexactNumberError, JsonSyntaxError, parseJson, parseWith, stringifyJson } from '@apl/core';
import type { z } from 'zod';
import { ApiError } from './errors.js';
import type { Logger } from './log.js';
import type { Metrics } from './metrics.js';

/** The metrics each request is counted in (a node's, or its agent-plane thread's own). */
export type HttpMetrics = Pick<Metrics, 'httpRequests' | 'httpDuration'>;

/** The Content-Type of every JSON answer. */
export const JSON_TYPE = 'application/json; charset=utf-8';

/**
 * Answers with a JSON body. The headers are written directly rather than through
 * Express's `send`, which parses and formats the Content-Type twice and copies a body
 * of 1,000 characters or more into a Buffer before writing it: every answer of the
 * intent route is that long. There is no ETag (disabled on both planes), so no answer
 * is ever a 304; a HEAD request gets the headers alone.
 */
export function sendJson(res: Response, status: number, body: unknown, headers?: Record<string, string>): void {
  sendText(res, status, stringifyJson(body), JSON_TYPE, headers);
}

/** Answers with a body already serialized, of the given Content-Type (see sendJson). */
export function sendText(res: Response, status: number, text: string, type: string, headers?: Record<string, string>): void {
  res.statusCode = status;
  if (headers !== undefined) for (const name in headers) res.setHeader(name, headers[name]!);
  // A 401 names the scheme that authenticates (RFC 9110, 11.6.1): an attestation or an
  // admin token, each as a bearer token.
  if (status === 401) res.setHeader('WWW-Authenticate', 'Bearer');
  res.setHeader('Content-Type', type);
  res.setHeader('Content-Length', Buffer.byteLength(text, 'utf8'));
  if (res.req.method === 'HEAD') res.end();
  else res.end(text, 'utf8');
}

/** How a streamed answer ended: sent whole, its client gone, or its client not reading. */
export type StreamEnd = 'done' | 'gone' | 'stalled';

/**
 * Writes `lines` as the answer's body, one per line, and ends it. While the send buffer
 * is full it waits for the client to read. It stops reading `lines` (which closes what
 * they are read from, such as a store iterator that would otherwise pin the files it
 * reads) as soon as the client goes away, or when the client has read nothing for
 * `stallMs`: then the connection is closed, so the body ends without its last chunk and
 * no client takes a cut answer for a whole one.
 */
export async function streamLines(res: ServerResponse, lines: AsyncIterable<string>, stallMs: number): Promise<StreamEnd> {
  for await (const line of lines) {
    if (res.destroyed) return 'gone';
    if (res.write(`${line}\n`)) continue;
    const waited = await drained(res, stallMs);
    if (waited === 'stalled') res.destroy();
    if (waited !== 'drain') return waited;
  }
  if (res.destroyed) return 'gone';
  res.end();
  return 'done';
}

/** Waits for the send buffer to empty, the connection to close, or `ms`, whichever is first. */
function drained(res: ServerResponse, ms: number): Promise<'drain' | 'gone' | 'stalled'> {
  if (res.destroyed) return Promise.resolve('gone');
  return new Promise((resolve) => {
    const settle = (why: 'drain' | 'gone' | 'stalled') => {
      clearTimeout(timer);
      res.off('drain', onDrain);
      res.off('close', onClose);
      resolve(why);
    };
    const onDrain = () => settle('drain');
    const onClose = () => settle('gone');
    const timer = setTimeout(() => settle('stalled'), ms);
    res.once('drain', onDrain);
    res.once('close', onClose);
  });
}

/**
 * How long a connection closed after an early answer goes on reading what the client
 * still sends, before it is cut.
 */
export const LINGER_MS = 2_000;

/**
 * Closes the connection after this answer as RFC 9112 (section 9.6) asks of a server
 * that answers before it has read the request: the answer goes out and then the end of
 * the connection, and what the client still sends is read and thrown away until the
 * client closes too, or for LINGER_MS at most. Node.js would destroy the socket as soon
 * as the answer is written; the body still arriving would then be answered with a
 * reset, which can reach the client before it has read the answer, so that it sees a
 * broken pipe instead of the 413.
 */
function closeLingering(req: Request, res: Response): void {
  res.setHeader('Connection', 'close');
  const socket = req.socket;
  // Node.js ends a connection whose answer says `Connection: close` with destroySoon().
  socket.destroySoon = () => endLingering(socket);
}

/**
 * Ends a connection (after `last`, if given) and cuts it LINGER_MS later unless the
 * client has closed it by then: a client that never closes its side would otherwise
 * keep the socket, its descriptor and its place among the listener's connections.
 */
export function endLingering(socket: Socket, last?: string): void {
  if (last === undefined) socket.end();
  else socket.end(last);
  const cut = setTimeout(() => socket.destroy(), LINGER_MS).unref();
  socket.once('close', () => clearTimeout(cut));
}

/** Reads a JSON body losslessly (128-bit integers stay exact), refusing more than `limitBytes`. */
export function jsonBody(limitBytes: number): RequestHandler[] {
  return [
    // A body declared larger than the limit is refused at once, and the connection is
    // closed after the answer: the body reader would first read the body through (to
    // keep the connection), holding the answer until the client had sent it all.
    (req, res, next) => {
      const coding = req.headers['content-encoding'];
      const identity = coding === undefined || coding.toLowerCase() === 'identity';
      if (!identity || !(Number(req.headers['content-length'] ?? 0) > limitBytes)) return next();
      closeLingering(req, res);
      next(tooLarge(limitBytes));
    },
    express.raw({ type: () => true, limit: limitBytes }),
    (req, _res, next) => {
      const raw = req.body as Buffer | undefined;
      if (!raw || raw.length === 0) {
        req.body = undefined;
        return next();
      }
      const type = req.headers['content-type'] ?? '';
      if (!/^application\/json\s*(;|$)/i.test(type)) {
        return next(new ApiError('malformed_request', 'The body must be JSON (Content-Type: application/json).'));
      }
      const charset = CHARSET.exec(type)?.[1];
      if (charset !== undefined && !/^"?utf-?8"?$/i.test(charset)) {
        return next(new ApiError('malformed_request', `The body must be JSON in UTF-8, not ${charset} (Content-Type: application/json; charset=utf-8).`));
      }
      // Decoding replaces bytes that are not UTF-8 with U+FFFD: the text recorded (and
      // the justification's hash) would not be what the caller sent.
      if (!isUtf8(raw)) return next(new ApiError('malformed_request', 'The body is not valid UTF-8.'));
      const text = raw.toString('utf8');
      // JSON text has no byte-order mark (RFC 8259, 8.1); the parser would name an invisible character.
      if (text.startsWith('\uFEFF')) return next(new ApiError('malformed_request', 'The body begins with a byte-order mark (U+FEFF), which JSON text does not have: send it without one.'));
      let body: unknown;
      try {
        body = parseJson(text);
      } catch (err) {
        const why = err instanceof InexactNumberError ? 'The body holds a number the ledger cannot read exactly' : 'The body is not valid JSON';
        return next(new ApiError('malformed_request', `${why}: ${(err as JsonSyntaxError).message}.`));
      }
      const at = MAYBE_BEYOND_DOUBLE.test(text) ? nonFinite(body) : null;
      if (at !== null) {
        return next(new ApiError('malformed_request', 'The body holds a number too large to represent.', { issues: [{ path: at.join('.'), message: 'is too large to represent' }] }));
      }
      req.body = body;
      next();
    },
  ];
}

/**
 * The token of the request's `Authorization: Bearer <token>`, or null when it sends no
 * Authorization header. A header of another form (another scheme, no token, text after
 * the token) is refused with `refuse(why)`, the plane's own 401, saying what is wrong
 * with it rather than that nothing was sent. A request that sends the header twice is
 * refused: Node.js keeps the first, and which one was meant is a guess.
 */
export function bearerToken(req: Request, refuse: (why: string) => ApiError): string | null {
  const sent = req.headersDistinct.authorization;
  if (sent === undefined) return null;
  if (sent.length > 1) throw new ApiError('malformed_request', 'The Authorization header was sent more than once; send it once.');
  const value = sent[0]!.trim();
  const m = /^Bearer\s+(\S+)$/i.exec(value);
  if (m) return m[1]!;
  const scheme = /^(\S+)/.exec(value)?.[1];
  if (scheme === undefined) throw refuse('the Authorization header is empty');
  if (scheme.toLowerCase() !== 'bearer') throw refuse(`the Authorization header's scheme is not Bearer`);
  throw refuse(/^\S+\s*$/.test(value) ? 'the Authorization header has no token after Bearer' : 'the Authorization header has more than one word after Bearer');
}

/**
 * For a route that takes no query parameters: a parameter sent to it is refused, never
 * silently ignored (it may have been meant for another route, or as a filter).
 */
export const noQuery: RequestHandler = (req, _res, next) => {
  if (!req.url.includes('?')) return next();
  const names = Object.keys(req.query as Record<string, unknown>);
  if (names.length === 0) return next();
  next(new ApiError('malformed_request', `${req.method} ${req.path} takes no query parameters; remove ${names.map((n) => JSON.stringify(n)).join(', ')}.`));
};

/**
 * For a route that takes no body (a DELETE, a promotion): a body is refused, not
 * ignored, since the caller meant something by it and the route would act without it.
 */
export const noBody: RequestHandler[] = [
  express.raw({ type: () => true, limit: 4096 }),
  (req, _res, next) => {
    const raw = req.body as Buffer | undefined;
    req.body = undefined;
    if (raw !== undefined && raw.length > 0) return next(new ApiError('malformed_request', `${req.method} ${req.path} takes no body; send it without one.`));
    next();
  },
];

/**
 * The request's query parameters, each given once: a parameter sent twice
 * (`?limit=1&limit=2`) is refused by name, since which one was meant is a guess.
 */
export function queryOf(req: Request, what = 'query'): Record<string, unknown> {
  const query = req.query as Record<string, unknown>;
  const twice = Object.keys(query).filter((name) => Array.isArray(query[name]));
  if (twice.length > 0) {
    throw new ApiError('malformed_request', `The ${what} is not valid.`, { issues: twice.map((name) => ({ path: name, message: 'is given more than once; give it once' })) });
  }
  return { ...query };
}

/** The charset parameter of a Content-Type. */
const CHARSET = /;\s*charset\s*=\s*([^;\s]*)/i;

/**
 * Only a literal with an exponent of three digits or more, or with 309 digits or
 * more, can be beyond a double; a body without one is not walked. (Text such as a
 * hash or a token can match too, so the walk below allocates nothing until it finds.)
 */
const MAYBE_BEYOND_DOUBLE = /[eE][+]?\d{3}|\d{309}/;

/**
 * The path of the first number that parsed to Infinity (`1e400` is valid JSON syntax
 * but no double), or null. Such a value has no canonical form, so it could never be
 * hashed or written to the log.
 */
function nonFinite(value: unknown): string[] | null {
  if (typeof value === 'number') return Number.isFinite(value) ? null : [];
  if (value === null || typeof value !== 'object') return null;
  // Object.keys, not for-in: bodies of many shapes sent V8 into a loop of optimizing a
  // for-in and throwing the code away (hundreds of times a minute under load).
  const keys = Array.isArray(value) ? null : Object.keys(value);
  const n = keys === null ? (value as unknown[]).length : keys.length;
  for (let i = 0; i < n; i++) {
    const found = nonFinite(keys === null ? (value as unknown[])[i] : (value as Record<string, unknown>)[keys[i]!]);
    if (found !== null) {
      found.unshift(keys === null ? String(i) : keys[i]!);
      return found;
    }
  }
  return null;
}

/** Parses a request value with a schema, or throws 400 malformed_request listing each problem. */
export function parseRequest<S extends z.ZodType>(schema: S, value: unknown, what: string): z.output<S> {
  const r = parseWith(schema, value);
  if (!r.ok) throw new ApiError('malformed_request', `The ${what} is not valid.`, { issues: r.issues });
  return r.value;
}

/**
 * A plane's Express app: no `X-Powered-By`, no ETag (so no answer is ever a 304), and
 * every request logged and counted once it is answered.
 */
export function planeApp(plane: 'agent' | 'admin', log: Logger, metrics: HttpMetrics): express.Express {
  const app = express();
  app.disable('x-powered-by');
  app.set('etag', false);
  app.locals.plane = plane;
  // The contract's paths are lower case: /API/V1/INTENTS is no route of it.
  app.set('case sensitive routing', true);
  // Nor is /api/v1/intents/ (Express would take the trailing slash as the same path).
  app.set('strict routing', true);
  app.use(observe(plane, log, metrics));
  app.use((req, _res, next) => {
    // Node's parser reads an HTTP/2.0 or 0.9 request line as if it were 1.x and would
    // answer it in HTTP/1.1: the planes speak HTTP/1.0 and 1.1 only (RFC 9110 §15.6.6).
    if (req.httpVersionMajor !== 1) {
      return next(new ApiError('http_version_not_supported', `HTTP/${req.httpVersion} is not supported here; send HTTP/1.1.`));
    }
    // HTTP/1.1 requires Host (RFC 9112 §3.2); the listener leaves the refusal to us so that it has a body.
    if (req.headers.host === undefined && req.httpVersionMinor >= 1) {
      return next(new ApiError('malformed_request', 'The request has no Host header, which HTTP/1.1 requires.'));
    }
    // ... and exactly one (RFC 9112 §3.2: a server answers 400 to more); Node.js keeps the first.
    let hosts = 0;
    for (let k = 0; k < req.rawHeaders.length; k += 2) if (req.rawHeaders[k]!.length === 4 && req.rawHeaders[k]!.toLowerCase() === 'host') hosts++;
    if (hosts > 1) return next(new ApiError('malformed_request', 'The Host header was sent more than once; send it once.'));
    next();
  });
  return app;
}

/**
 * The status a request is logged and counted with when its connection closed before
 * any answer was begun (the client gave up, or the connection was cut): nginx's
 * "client closed request". Nothing is sent with it.
 */
const CLOSED_BEFORE_ANSWER = 499;

/**
 * Logs and counts every request once, when it closes: after its answer was handed over
 * whole, or when its connection closed first (a feed its consumer left, an export cut
 * off, an intent whose client gave up before the answer). Those are logged with
 * `closed_early: true`, and with the status begun, or 499 when none was.
 */
function observe(plane: 'agent' | 'admin', log: Logger, metrics: HttpMetrics): RequestHandler {
  return (req, res, next) => {
    const start = process.hrtime.bigint();
    // A response is closed after it finished too (Node.js emits 'close' on the next tick).
    res.once('close', () => {
      const route = req.route?.path ? `${req.baseUrl}${req.route.path as string}` : routeOf(req) ?? 'unmatched';
      const seconds = Number(process.hrtime.bigint() - start) / 1e9;
      const early = !res.writableFinished;
      const status = early && !res.headersSent ? CLOSED_BEFORE_ANSWER : res.statusCode;
      metrics.httpRequests.inc({ plane, route, status: String(status) });
      metrics.httpDuration.observe({ plane, route, status: String(status) }, seconds);
      const txn = res.locals.transaction as string | undefined;
      log.info({ event: 'request', plane, method: req.method, route, status, ms: Math.round(seconds * 1e4) / 10, ...(early ? { closed_early: true } : {}), ...(txn ? { transaction: txn } : {}), ...(res.locals.error ? { error: res.locals.error } : {}) }, 'request');
    });
    next();
  };
}

/** The last handler: every error becomes `{error, message}`; nothing internal leaks. */
export function errorHandler(log: Logger): (err: unknown, req: Request, res: Response, next: NextFunction) => void {
  return (err, req, res, _next) => {
    const e = toApiError(err, req);
    if (e.body.error === 'internal_error') log.error({ event: 'internal_error', method: req.method, path: req.path, err: (err as Error)?.stack ?? String(err) }, 'unexpected error');
    res.locals.error = e.body.error;
    // An answer already begun (an export, a feed) cannot become an error answer: its
    // connection is cut, so that the client sees it end short instead of waiting for ever.
    if (res.headersSent) {
      res.destroy();
      return;
    }
    sendJson(res, e.status, e.body);
  };
}

function toApiError(err: unknown, req: Request): ApiError {
  if (err instanceof ApiError) return err;
  const e = err as { type?: string; status?: number };
  if (e?.type === 'entity.too.large') return tooLarge((err as { limit?: unknown }).limit);
  if (e?.type === 'encoding.unsupported') {
    const coding = (err as { encoding?: unknown }).encoding;
    return new ApiError('malformed_request', `The body is sent with ${typeof coding === 'string' ? `Content-Encoding: ${coding}, which` : 'a Content-Encoding'} this node does not read; send the JSON as it is (identity).`);
  }
  // A body whose bytes do not decode as its Content-Encoding says (the decoder's own
  // error, marked 400 by the body reader, which read nothing else).
  const coding = req.headers['content-encoding'];
  if (e?.status === 400 && e.type === undefined && coding !== undefined && coding.toLowerCase() !== 'identity') {
    return new ApiError('malformed_request', `The body does not decode as its Content-Encoding (${coding}) says: ${(err as Error).message}.`);
  }
  // The router decodes path parameters and answers a bad escape (`%ZZ`) with a plain
  // URIError marked 400 but not `expose`: it is the client's input, never a 500.
  if (err instanceof URIError) return new ApiError('malformed_request', 'The request path is not valid percent-encoding.');
  if (e?.status && e.status >= 400 && e.status < 500) return new ApiError('malformed_request', 'The request could not be read.');
  return ApiError.internal();
}

/** 413 `payload_too_large`, naming the limit. */
function tooLarge(limit: unknown): ApiError {
  return new ApiError('payload_too_large', `The body is larger than the ${typeof limit === 'number' ? `${limit} bytes` : 'size'} this node accepts (limits.body_bytes_max).`);
}

/**
 * The last route: 405 with Allow for a path the plane serves with other methods, 404
 * for one it does not serve at all.
 */
export const notFound: RequestHandler = (req, res, next) => {
  const allowed = allowedMethods(req.app, req.path);
  if (allowed.length === 0) {
    const bare = req.path.length > 1 && req.path.endsWith('/') ? req.path.replace(/\/+$/, '') : null;
    const there = bare === null || bare === '' ? [] : allowedMethods(req.app, bare);
    let hint = there.length === 0 ? '' : `; without the trailing slash, ${bare} answers ${there.join(', ')}`;
    // The other plane's route, sent to this one (a URL with the other port).
    const plane = req.app.locals.plane as 'agent' | 'admin' | undefined;
    if (plane === 'agent' && req.path.startsWith('/admin/')) hint = '; this is the agent plane: the admin routes are served on the admin plane (admin_port, 9443 by default)';
    if (plane === 'admin' && req.path.startsWith('/api/')) hint = '; this is the admin plane: the agent routes are served on the agent plane (agent_port, 8443 by default)';
    return next(new ApiError('not_found', `No route ${req.method} ${req.path}${hint}.`));
  }
  res.setHeader('Allow', allowed.join(', '));
  next(new ApiError('method_not_allowed', `${req.path} answers ${allowed.join(', ')}, not ${req.method}.`));
};

/** What Express keeps of a route: its path, its matcher and its methods. */
type RouteLayer = { route?: { path: string; methods: Record<string, boolean> }; match(path: string): unknown };

/**
 * The route a request refused before routing (no credentials, a bad header) was meant
 * for, so that its log line and its count name it rather than `unmatched`.
 */
function routeOf(req: Request): string | null {
  const stack = (req.app as unknown as { router?: { stack?: RouteLayer[] } }).router?.stack ?? [];
  const method = req.method === 'HEAD' ? 'get' : req.method.toLowerCase();
  const matches = (l: RouteLayer) => {
    try {
      return Boolean(l.match(req.path));
    } catch {
      return false; // a path that is not valid percent-encoding names no route
    }
  };
  const layer = stack.find((l) => l.route?.methods[method] === true && matches(l));
  return layer === undefined ? null : `${req.baseUrl}${layer.route!.path}`;
}

/** The methods the app's routes answer at `path` (HEAD wherever GET is), sorted. */
function allowedMethods(app: express.Application, path: string): string[] {
  const stack = (app as unknown as { router?: { stack?: RouteLayer[] } }).router?.stack ?? [];
  const methods = new Set<string>();
  for (const layer of stack) {
    if (!layer.route || !layer.match(path)) continue;
    for (const m of Object.keys(layer.route.methods)) if (m !== '_all') methods.add(m.toUpperCase());
  }
  if (methods.has('GET')) methods.add('HEAD');
  return [...methods].sort();
}

