/**
 * The server process: `npm start` (a standalone node with development defaults) or
 * `node --v8-pool-size=0 packages/node/dist/main.js --config deploy/n1.json`.
 *
 * The runtime is checked before anything else is loaded, so an unsupported Node.js
 * gets a message saying what to run instead rather than a failure deep in a module.
 */
import { hasJsonSourceText, runtimeRefusal } from './runtime.js';

const refusal = runtimeRefusal(process.version, hasJsonSourceText());
if (refusal !== null) {
  process.stderr.write(`${refusal}\n`);
  process.exit(2);
}
// The agent plane's thread and the state store's start on another CPU while this one
// loads the server's modules, so that a node is up sooner (docs/operations.md). A
// request for the usage starts no node, and they would only slow it.
if (!process.argv.slice(2).includes('--help')) {
  (await import('./agent-thread.js')).AgentThread.startEarly();
  (await import('./level-thread.js')).ThreadedLevel.startEarly();
}
await import('./server.js');
