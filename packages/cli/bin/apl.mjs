#!/usr/bin/env node
// The apl command. It checks the runtime before loading anything, so that an old
// Node.js gets a message saying what to run instead, and that a checkout that was
// not built yet says how to build it.
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

let sourceText = false;
JSON.parse('1', (_k, v, context) => {
  sourceText = context?.source === '1';
  return v;
});
if (!sourceText || typeof JSON.rawJSON !== 'function') {
  process.stderr.write(`apl: this is Node.js ${process.version}, which cannot read 128-bit JSON integers exactly; apl needs Node.js 22 or later.\n` +
    '  From the repository, run it through npm (npx apl ..., or npm run apl -- ...), which uses the pinned Node.js 24.\n');
  process.exit(2);
}
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
