/**
 * The agent plane's front end alone, for `npm run bench -- frontend`: the node's own
 * front end (agent-front.ts: Express, the request line and metrics of every request,
 * the body read and parsed losslessly, the envelope, path, query and Authorization
 * header held to their schemas, the answer written) on the node's own HTTPS listener.
 * In place of the node's state it has a backend that answers each call with the answer
 * the node gave to a request of the same kind, read from the file it is started with.
 * What this process spends per request is what a front end on a thread of its own could
 * take off the thread that runs Raft and `apply`, at most.
 *
 *   node frontend-server.js <answers.json> <cert.pem> <key.pem>
 *
 * It logs `{"event":"frontend_started","port":N}` once it listens on 127.0.0.1.
 */
import { readFileSync } from 'node:fs';
import { ConfigSchema, Metrics, agentFrontEnd, createLogger, limitedServer, type AgentBackend, type Answer } from '@apl/node';
import { FRONTEND_KINDS, type FrontendKind } from './frontend-kinds.js';

const [answersFile, certFile, keyFile] = process.argv.slice(2);
if (!answersFile || !certFile || !keyFile) {
  process.stderr.write('usage: node frontend-server.js <answers.json> <cert.pem> <key.pem>\n');
  process.exit(2);
}
const given = JSON.parse(readFileSync(answersFile, 'utf8')) as Record<string, string>;
const answers = new Map<FrontendKind, Answer>();
for (const kind of FRONTEND_KINDS) {
  if (given[kind] === undefined) throw new Error(`${answersFile} has no answer for ${kind}`);
  const read = kind === 'transaction' || kind === 'balance';
  answers.set(kind, { status: 200, text: given[kind], ...(read ? { headers: { Consistency: 'linearizable' } } : {}) });
}

/** Answers as the node answered a call of the same kind (support/workload.ts's mix). */
const backend: AgentBackend = {
  async intent(call) {
    if (!('envelope' in call)) throw new Error(`an envelope the schema refused: ${JSON.stringify(call.issues)}`);
    const env = call.envelope;
    switch (env.action.action) {
      case 'purchase.book':
        return answers.get(env.entries.some((e) => BigInt(e.amount.minor) > 500_000n) ? 'forbidden' : 'purchase')!;
      case 'receipt.attach':
        return answers.get('receipt')!;
      case 'usage.record':
        return answers.get('usage')!;
      default:
        return answers.get('denied')!;
    }
  },
  async read(call) {
    if (call.route !== 'transaction' && call.route !== 'balance') throw new Error(`a read the mix does not make: ${call.route}`);
    return answers.get(call.route)!;
  },
  async health() {
    return { status: 200, text: '{"status":"ok"}' };
  },
};

const config = ConfigSchema.parse({});
const log = createLogger('info', 'frontend');
const server = limitedServer({ cert: readFileSync(certFile), key: readFileSync(keyFile), minVersion: 'TLSv1.2' }, config.http);
server.on('request', agentFrontEnd({
  backend, log, metrics: new Metrics(),
  bodyBytesMax: config.limits.body_bytes_max,
  entriesPerIntentMax: config.limits.entries_per_intent_max,
  openapi: '{}',
}));
server.listen(0, '127.0.0.1', () => {
  const address = server.address();
  log.info({ event: 'frontend_started', port: typeof address === 'object' && address !== null ? address.port : null }, 'front end listening');
});
process.on('SIGTERM', () => server.close(() => process.exit(0)));
