#!/usr/bin/env node
// The apl command. A checkout that was not built yet says how to build it; the entry
// point it loads (dist/main.js) checks the runtime before it loads anything else, so
// that an old Node.js gets a message saying what to run instead.
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

// paseto signs with Web Crypto's Ed25519, whose getPublicKey Node.js 24 still calls
// experimental; that note is not for the people who run apl.
const printers = process.listeners('warning');
process.removeAllListeners('warning');
process.on('warning', (w) => {
  if (w.name !== 'ExperimentalWarning') for (const p of printers) p(w);
});
const main = new URL('../dist/main.js', import.meta.url);
if (!existsSync(fileURLToPath(main))) {
  process.stderr.write('apl: it is not built yet: run npm run build (or npm start, which builds first).\n');
  process.exit(2);
}
await import(main.href);
