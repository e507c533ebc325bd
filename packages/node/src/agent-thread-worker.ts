/**
 * The agent plane's thread (see agent-thread.ts): it owns the plane's HTTPS listener
 * and runs its front end (agent-front.ts), counting every request and formatting its
 * request line itself. Each request's call goes to the node's thread; the calls and
 * log lines of one turn of this thread's event loop go together in one message, and
 * the answers come back the same way, so that a burst of requests costs each thread
 * one wake-up, not one per request. The node's thread writes the lines to its own log,
 * so that one writer keeps every line whole.
 *
 * The thread may start before the node has read its settings (main.ts starts it first
 * thing, so that its modules load meanwhile): it binds once they come, in the first
 * message (`start`).
 */
import { readFileSync } from 'node:fs';
import { parentPort } from 'node:worker_threads';
import { Registry } from 'prom-client';
import { agentFrontEnd } from './agent-front.js';
import type { AgentBackend, Answer } from './gateway.js';
import { closeListener, limitedServer, listen, listenerUrl } from './listener.js';
import { createLogger } from './log.js';
import { countRefusals, httpMetrics } from './metrics.js';
import { withServer } from './openapi.js';
import type { AgentThreadData, FromAgentThread, ToAgentThread, AgentCall } from './agent-thread.js';

const port = parentPort!;

/** Calls waiting for their answers, by id; what is not yet posted. */
const waiting = new Map<number, (a: Answer) => void>();
let calls: AgentCall[] = [];
let lines = '';
let flushing = false;
let ids = 0;

function schedule(): void {
  if (flushing) return;
  flushing = true;
  setImmediate(flush);
}

function flush(): void {
  flushing = false;
  if (calls.length === 0 && lines === '') return;
  send({ kind: 'out', calls, lines });
  calls = [];
  lines = '';
}

const registry = new Registry();
const metrics = httpMetrics(registry);

function call(method: AgentCall['method'], arg: AgentCall['arg']): Promise<Answer> {
  const id = ++ids;
  calls.push({ id, method, arg } as AgentCall);
  schedule();
  return new Promise((resolve) => waiting.set(id, resolve));
}

function send(m: FromAgentThread): void {
  port.postMessage(m);
}

const backend: AgentBackend = {
  intent: (c) => call('intent', c),
  read: (c) => call('read', c),
  health: (which) => call('health', which),
};

/** The listener, once the node's thread has sent the settings. */
let server: ReturnType<typeof limitedServer> | null = null;

port.on('message', (m: ToAgentThread) => {
  switch (m.kind) {
    case 'start':
      start(m.data);
      return;
    case 'answers':
      for (const { id, answer } of m.answers) {
        const resolve = waiting.get(id);
        waiting.delete(id);
        resolve?.(answer);
      }
      return;
    case 'metrics':
      registry.getMetricsAsJSON().then((json) => send({ kind: 'metrics', id: m.id, json }), (err: Error) => send({ kind: 'metrics', id: m.id, json: [], error: err.message }));
      return;
    case 'close':
      // No new connection is taken; requests in flight are answered, then the thread says so.
      void (server === null ? Promise.resolve() : closeListener(server)).then(() => {
        flush();
        send({ kind: 'closed' });
      });
      return;
  }
});

/** Binds the listener with the node's settings and says where, or why it could not. */
function start(data: AgentThreadData): void {
  const log = createLogger(data.logLevel, data.nodeId, {
    write(line: string) {
      lines += line;
      schedule();
    },
  });
  const listener = limitedServer({ cert: data.cert, key: data.key, minVersion: 'TLSv1.2' }, data.http);
  server = listener;
  listen(listener, data.port, data.host, countRefusals(metrics, 'agent')).then(
    () => {
      const url = listenerUrl(data.host, listener, data.advertised);
      // Attached in the same turn as the bind completes, before a connection can be accepted.
      listener.on('request', agentFrontEnd({
        backend,
        bodyBytesMax: data.bodyBytesMax,
        entriesPerIntentMax: data.entriesPerIntentMax,
        openapi: withServer(readFileSync(data.openapiFile, 'utf8'), url, { entriesPerIntentMax: data.entriesPerIntentMax }),
        log,
        metrics,
      }));
      send({ kind: 'listening', url });
    },
    (err: NodeJS.ErrnoException & { port?: number; address?: string }) => send({ kind: 'failed', message: err.message, code: err.code ?? null, ...(err.syscall === undefined ? {} : { syscall: err.syscall }), ...(err.port === undefined ? {} : { port: err.port }), ...(err.address === undefined ? {} : { address: err.address }) }),
  );
}
