/**
 * Test support: an HTTPS client that sends a request exactly as given (method, path
 * bytes, headers, body bytes) and never throws on what comes back. The harness's
 * `Client` builds its URL with the WHATWG parser, which normalizes dot segments and
 * re-encodes characters; a fuzzer needs the raw path on the wire, and must survive
 * a body that claims to be JSON and is not.
 */
import { readFileSync } from 'node:fs';
import { Agent, request } from 'node:https';
import { parseJson } from '@apl/core';

export interface RawRequest {
  method: string;
  /** path is sent as written: it may hold any byte from 0x21 to 0xff. */
  path: string;
  headers?: Record<string, string>;
  body?: string | Buffer;
}

export interface RawResponse {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  text: string;
  /** body is the JSON body parsed losslessly; undefined when there is none or it is not JSON. */
  body: unknown;
  /** jsonError says why a body labelled JSON did not parse. */
  jsonError?: string;
}

export class RawClient {
  private readonly agent: Agent;
  private readonly host: string;
  private readonly port: number;
  private readonly timeoutMs: number;

  constructor(base: string, ca: string, opts: { timeoutMs?: number } = {}) {
    const u = new URL(base);
    this.host = u.hostname;
    this.port = Number(u.port);
    this.agent = new Agent({ ca: readFileSync(ca), keepAlive: true, maxSockets: 4 });
    this.timeoutMs = opts.timeoutMs ?? 30_000;
  }

  send(r: RawRequest): Promise<RawResponse> {
    return new Promise((resolve, reject) => {
      const headers: Record<string, string> = { ...r.headers };
      if (r.body !== undefined) headers['content-length'] = String(Buffer.byteLength(r.body));
      const req = request({ host: this.host, port: this.port, method: r.method, path: r.path, headers, agent: this.agent }, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('error', reject);
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          const out: RawResponse = { status: res.statusCode!, headers: res.headers, text, body: undefined };
          if (/^application\/([\w.-]+\+)?json\s*(;|$)/i.test(String(res.headers['content-type'] ?? '')) && text.length > 0) {
            try {
              out.body = parseJson(text);
            } catch (err) {
              out.jsonError = (err as Error).message;
            }
          }
          resolve(out);
        });
      });
      req.setTimeout(this.timeoutMs, () => req.destroy(new Error(`no answer in ${this.timeoutMs} ms`)));
      req.on('error', reject);
      if (r.body !== undefined) req.write(r.body);
      req.end();
    });
  }

  close(): void {
    this.agent.destroy();
  }
}
