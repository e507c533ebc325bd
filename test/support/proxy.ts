/**
 * Test support: an HTTPS server on a free port of 127.0.0.1 that stands in front of
 * a live node (or in place of one). A handler sees each request and decides: answer
 * it itself (a stub: 421 not_primary, 503 commit_unavailable), or forward it to the
 * node and pass on, change or swallow the node's answer. Every request it received
 * is kept, in order, for the test to count.
 */
import { readFileSync } from 'node:fs';
import { createServer, request, Agent, type Server } from 'node:https';
import type { AddressInfo } from 'node:net';
import type { IncomingHttpHeaders } from 'node:http';
import { join } from 'node:path';
import { testCerts } from './node.js';

export interface Seen {
  method: string;
  path: string;
  headers: IncomingHttpHeaders;
  body: string;
}

export interface Reply {
  status: number;
  headers: Record<string, string>;
  body: string;
}

/** The handler: `forward()` sends the request to the target and resolves with its answer. */
export type Handler = (req: Seen, forward: () => Promise<Reply>) => Promise<Reply>;

export interface Proxy {
  url: string;
  seen: Seen[];
  close(): Promise<void>;
}

/** A JSON error answer, as a node would give it. */
export const errorReply = (status: number, body: Record<string, unknown>): Reply => ({
  status, headers: { 'content-type': 'application/json; charset=utf-8' }, body: JSON.stringify(body),
});

/** Starts the proxy; `target` is the node's base URL (unused by a handler that never forwards). */
export async function startProxy(target: string | null, handler: Handler): Promise<Proxy> {
  const certs = testCerts();
  const agent = new Agent({ ca: readFileSync(certs.ca), keepAlive: true });
  const seen: Seen[] = [];
  const server: Server = createServer({ cert: readFileSync(join(certs.dir, 'n2.pem')), key: readFileSync(join(certs.dir, 'n2-key.pem')) }, (req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const s: Seen = { method: req.method!, path: req.url!, headers: req.headers, body: Buffer.concat(chunks).toString('utf8') };
      seen.push(s);
      const forward = () => new Promise<Reply>((resolve, reject) => {
        if (target === null) return reject(new Error('this proxy has no target'));
        const headers = { ...req.headers };
        delete headers.host;
        const up = request(`${target}${s.path}`, { method: s.method, headers, agent }, (r) => {
          const out: Buffer[] = [];
          r.on('data', (c: Buffer) => out.push(c));
          r.on('end', () => {
            const h: Record<string, string> = {};
            for (const [k, v] of Object.entries(r.headers)) if (typeof v === 'string' && !['connection', 'keep-alive', 'transfer-encoding', 'content-length'].includes(k)) h[k] = v;
            resolve({ status: r.statusCode!, headers: h, body: Buffer.concat(out).toString('utf8') });
          });
        });
        up.on('error', reject);
        up.end(s.body);
      });
      handler(s, forward).then((reply) => {
        res.writeHead(reply.status, reply.headers);
        res.end(reply.body);
      }, (err: Error) => {
        res.writeHead(502, { 'content-type': 'text/plain' });
        res.end(`proxy: ${err.message}`);
      });
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as AddressInfo;
  return {
    url: `https://127.0.0.1:${port}`,
    seen,
    close: async () => {
      agent.destroy();
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}
