/**
 * HTTPS to one plane of a group of replicas: keep-alive connections, the CA to
 * trust, a time-out per request, and the answer 421 `not_primary` followed.
 *
 * A replica that cannot take a write answers 421 with `primary_client_addr`, the
 * primary's address on the same plane (or null when it knows none). The transport
 * then sends the same request there, if that address is one of the configured
 * ones, or else to the next configured address not yet tried; each address is tried
 * at most once per request. The address that answered is used first from then on.
 * Only configured addresses are followed: an answer cannot send the client's
 * credentials to a host it was not given. A replica that refuses the connection
 * (nothing was sent) is passed over for the next untried address in the same way,
 * and so is one that gives no answer in time (or cuts it off) to a request that may
 * be sent twice: a read, or a write marked `idempotent` (an intent, whose transaction
 * id makes a second send a replay). So is a replica that answers 422 `gateway_error`:
 * the request is certainly not in the log, and the replica cannot take it (it was
 * removed from the cluster, is stopping, cannot write, or its primary's queue is
 * full), so another may; when every address has answered so, the last answer is the
 * caller's.
 */
import { Agent, request } from 'node:https';
import type { IncomingHttpHeaders, IncomingMessage } from 'node:http';
import { TransportError } from './errors.js';
import { parseJson } from './json.js';

export interface TransportOptions {
  /** urls are the base URLs of the plane on each replica (`https://host:port`), tried in order. */
  urls: readonly string[];
  /** ca is the PEM of the certificate authorities to trust; the system's when absent. */
  ca?: string | Buffer | readonly (string | Buffer)[];
  /**
   * timeoutMs bounds each request, from sending to the last byte (default 30000). A
   * stream (the log export, the feed) is bounded until its answer begins, then by its
   * silences: no byte for that long ends it.
   */
  timeoutMs?: number;
  /** socketsMax bounds the open connections per replica (default 16). */
  socketsMax?: number;
  /** cert and key: a client certificate (PEM) and its key, for an admin plane that requires one (the node's admin_client_certs). */
  cert?: string | Buffer;
  key?: string | Buffer;
}

export interface Answer {
  status: number;
  headers: IncomingHttpHeaders;
  text: string;
  /** url is the base URL of the replica that answered. */
  url: string;
}

export interface Outgoing {
  headers?: Record<string, string>;
  /** body is sent as given, with Content-Type application/json. */
  body?: string;
  /** signal aborts the request, and the answer's stream with it. */
  signal?: AbortSignal;
  /**
   * idempotent: sending it twice does what sending it once does, so a replica that
   * does not answer in time is passed over for another. GET and HEAD always are.
   */
  idempotent?: boolean;
  /** sent is called each time the request has been written to a connection: a send to another replica, or after a 421, counts again. */
  sent?: () => void;
}

/** Codes of a request that may have reached a replica that then gave no whole answer. */
const NO_ANSWER = new Set(['ETIMEDOUT', 'ECONNRESET', 'EPIPE']);

const TIMEOUT_MS_DEFAULT = 30_000;

/**
 * Whether an answer says the request is certainly not in the log and this replica
 * cannot take it: 422 `gateway_error`.
 */
export function isUntaken(answer: Answer): boolean {
  if (answer.status !== 422) return false;
  try {
    return (parseJson(answer.text) as { error?: unknown }).error === 'gateway_error';
  } catch {
    return false;
  }
}

/** A streamed answer read whole (an error answer to the export or the feed), as `send` answers. */
export async function answerOf(res: IncomingMessage, url: string): Promise<Answer> {
  const chunks: Buffer[] = [];
  for await (const c of res) chunks.push(c as Buffer);
  return { status: res.statusCode ?? 0, headers: res.headers, text: Buffer.concat(chunks).toString('utf8'), url };
}

/** A base URL without a trailing slash; throws on anything but https. */
function baseUrl(u: string): string {
  const url = new URL(u);
  if (url.protocol !== 'https:') throw new TypeError(`${u}: the ledger is reached over https only`);
  return `${url.origin}${url.pathname.replace(/\/+$/, '')}`;
}

export class Transport {
  readonly urls: readonly string[];
  private readonly agent: Agent;
  private readonly timeoutMs: number;
  /** current is the index of the address that answered last. */
  private current = 0;

  constructor(o: TransportOptions) {
    if (o.urls.length === 0) throw new TypeError('at least one address is needed');
    this.urls = o.urls.map(baseUrl);
    this.timeoutMs = o.timeoutMs ?? TIMEOUT_MS_DEFAULT;
    const ca = o.ca === undefined ? undefined : Array.isArray(o.ca) ? [...o.ca] : (o.ca as string | Buffer);
    if ((o.cert === undefined) !== (o.key === undefined)) throw new TypeError('a client certificate needs its key, and a key its certificate: give cert and key together');
    this.agent = new Agent({ keepAlive: true, maxSockets: o.socketsMax ?? 16, ...(ca === undefined ? {} : { ca }), ...(o.cert === undefined ? {} : { cert: o.cert, key: o.key }) });
  }

  /** The address requests go to first. */
  get url(): string {
    return this.urls[this.current]!;
  }

  /** Sends a request and reads the whole answer, following 421 and 422 `gateway_error` across the configured addresses. */
  async send(method: string, path: string, out: Outgoing = {}): Promise<Answer> {
    const tried = new Set<number>();
    // untaken is the last 422 `gateway_error`: the answer if the addresses after it refuse the connection.
    let untaken: Answer | null = null;
    let i = this.current;
    for (;;) {
      tried.add(i);
      let answer: Answer;
      try {
        answer = await this.once(this.urls[i]!, method, path, out);
      } catch (err) {
        // Refused before anything was sent, or no answer to what may safely be sent
        // again: another replica may be up.
        const untried = this.untried(tried);
        const code = (err as TransportError).code;
        const again = code === 'ECONNREFUSED' || (NO_ANSWER.has(code) && (out.idempotent === true || method === 'GET' || method === 'HEAD'));
        if (again && untried >= 0) i = untried;
        // An earlier replica's refusal stands for this one only if nothing reached it:
        // a request sent without an answer may have been recorded there.
        else if (untaken !== null && code === 'ECONNREFUSED') return untaken;
        else throw err;
        continue;
      }
      let next: number | null = null;
      if (answer.status === 421) next = this.nextAfter421(answer, tried);
      else if (isUntaken(answer)) {
        untaken = answer;
        next = this.untried(tried);
      }
      if (next === null || next < 0) {
        if (answer.status !== 421) this.current = i;
        return answer;
      }
      i = next;
    }
  }

  /**
   * Sends a request and hands back the answer's stream unread (for the log export),
   * no 421 following. Without `url`, a replica that refuses the connection, or does not
   * begin an answer to a read within the time-out, is passed over for the next
   * configured one, as `send` does. A stream silent for the time-out once begun is
   * ended with a TransportError (ETIMEDOUT).
   */
  async open(method: string, path: string, out: Outgoing = {}, url?: string): Promise<IncomingMessage> {
    if (url !== undefined) return this.openAt(url, method, path, out);
    const tried = new Set<number>();
    let i = this.current;
    for (;;) {
      tried.add(i);
      try {
        const res = await this.openAt(this.urls[i]!, method, path, out);
        this.current = i;
        return res;
      } catch (err) {
        // Refused, or no answer begun within the time-out to a read: another replica may
        // be up. (Once the answer has begun, its lines are the caller's: not passed over.)
        const untried = this.untried(tried);
        const code = (err as TransportError).code;
        const again = code === 'ECONNREFUSED' || (NO_ANSWER.has(code) && (method === 'GET' || method === 'HEAD'));
        if (!again || untried < 0) throw err;
        i = untried;
      }
    }
  }

  private openAt(url: string, method: string, path: string, out: Outgoing): Promise<IncomingMessage> {
    return new Promise((resolve, reject) => {
      const req = this.start(url, method, path, out, reject);
      req.on('response', (res) => {
        // From here the request's timer measures the stream's silences.
        // The reader may set the socket's time-out of its own (the feed's idleTimeoutMs).
        req.setTimeout(this.timeoutMs, () => res.destroy(new TransportError(url, 'ETIMEDOUT', `the answer was silent for ${req.socket?.timeout ?? this.timeoutMs} ms`)));
        resolve(res);
      });
    });
  }

  /** Closes the idle connections; the transport may still be used afterwards. */
  close(): void {
    this.agent.destroy();
  }

  /** The first configured address not yet tried for this request, or -1. */
  private untried(tried: Set<number>): number {
    return this.urls.findIndex((_, k) => !tried.has(k));
  }

  /** Where a 421 sends the request next: the primary it names if configured, else an untried address, else null. */
  private nextAfter421(answer: Answer, tried: Set<number>): number | null {
    let named: string | null = null;
    try {
      const body = parseJson(answer.text) as { primary_client_addr?: unknown };
      if (typeof body.primary_client_addr === 'string') named = baseUrl(body.primary_client_addr);
    } catch {
      named = null; // an unreadable body names no primary
    }
    const j = named === null ? -1 : this.urls.indexOf(named);
    if (j >= 0 && !tried.has(j)) return j;
    const untried = this.untried(tried);
    return untried >= 0 ? untried : null;
  }

  private once(url: string, method: string, path: string, out: Outgoing, retried = false): Promise<Answer> {
    return new Promise((resolve, reject) => {
      // Settled once: what the request's end stirs up after (the reset its destruction
      // causes) is not acted on.
      let settled = false;
      const settle = <T>(f: (v: T) => void) => (v: T) => {
        if (settled) return;
        settled = true;
        clearTimeout(deadline);
        f(v);
      };
      // The whole answer within the time-out, not only no silence that long: a server
      // that trickles bytes does not hold the call for ever.
      const deadline = setTimeout(() => {
        settle(reject)(new TransportError(url, 'ETIMEDOUT', `no whole answer in ${this.timeoutMs} ms`));
        req.destroy();
      }, this.timeoutMs);
      const req = this.start(url, method, path, out, (err) => {
        // A kept-alive connection the server closed while idle fails the first write
        // on it; the request never reached the server, so it is sent again, once.
        if (!settled && !retried && req.reusedSocket && (err as TransportError).code === 'ECONNRESET') {
          settled = true;
          clearTimeout(deadline);
          this.once(url, method, path, out, true).then(resolve, reject);
        } else settle(reject)(err);
      });
      if (out.sent !== undefined) req.once('finish', out.sent);
      req.on('response', (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('error', (err) => settle(reject)(new TransportError(url, 'ECONNRESET', `the answer was cut off: ${err.message}`, { cause: err })));
        res.on('end', () => settle(resolve)({ status: res.statusCode ?? 0, headers: res.headers, text: Buffer.concat(chunks).toString('utf8'), url }));
      });
    });
  }

  private start(url: string, method: string, path: string, out: Outgoing, fail: (err: Error) => void) {
    const headers: Record<string, string> = { accept: 'application/json', ...out.headers };
    if (out.body !== undefined) {
      headers['content-type'] = 'application/json';
      headers['content-length'] = String(Buffer.byteLength(out.body));
    }
    const req = request(`${url}${path}`, { method, agent: this.agent, headers, ...(out.signal ? { signal: out.signal } : {}) });
    req.setTimeout(this.timeoutMs, () => req.destroy(Object.assign(new Error(`no answer in ${this.timeoutMs} ms`), { code: 'ETIMEDOUT' })));
    req.on('error', (err: NodeJS.ErrnoException) => {
      fail(err instanceof TransportError ? err : new TransportError(url, err.code ?? 'EUNKNOWN', err.message, { cause: err }));
    });
    if (out.body !== undefined) req.write(out.body);
    req.end();
    return req;
  }
}
