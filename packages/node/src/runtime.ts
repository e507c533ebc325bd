/**
 * The Node.js versions the server runs on. Node.js 20 reached its end of life on
 * 2026-04-30; the server also needs `JSON.parse` with source-text access (22 and
 * later) to read 128-bit integers exactly. The project pins 24 LTS (see README).
 */
export const SUPPORTED_MAJOR_MIN = 22;

/** Why this runtime cannot run the server, or null when it can. */
export function runtimeRefusal(version: string, hasSourceText: boolean): string | null {
  const major = Number(/^v?(\d+)\./.exec(version)?.[1] ?? NaN);
  if (major >= SUPPORTED_MAJOR_MIN && hasSourceText) return null;
  const why = major >= SUPPORTED_MAJOR_MIN ? 'its JSON.parse gives no source text to revivers' : 'it is not supported';
  return `This is Node.js ${version}, and ${why}. The agent-plane ledger runs on Node.js ${SUPPORTED_MAJOR_MIN} or later; 24 LTS is the one it is tested on.\n` +
    'Run it through npm (npm ci && npm start), which uses the Node.js 24 the project pins in node_modules/.bin;\n' +
    'with options of your own, run that one: node_modules/.bin/node --v8-pool-size=0 packages/node/dist/main.js --config <file.json>;\n' +
    'or install Node.js 24 (nvm install, with the .nvmrc of the repository).';
}

/** Whether JSON.parse hands the reviver each value's source text (`context.source`). */
export function hasJsonSourceText(): boolean {
  let seen: unknown;
  JSON.parse('1', (_k: string, v: unknown, context?: { source?: string }) => {
    seen = context?.source;
    return v;
  });
  return seen === '1';
}
