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
await import('./server.js');
