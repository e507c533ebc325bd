/**
 * The `apl` process (bin/apl.mjs loads it, or node dist/main.js starts it): checks the
 * runtime before it loads anything, then runs the command line and exits with its code.
 * On an old Node.js every command that reads an answer would otherwise fail with a
 * stack trace.
 */
let sourceText = false;
JSON.parse('1', (_k, v: unknown, context?: { source?: string }) => {
  sourceText = context?.source === '1';
  return v;
});
if (!sourceText || typeof (JSON as { rawJSON?: unknown }).rawJSON !== 'function') {
  process.stderr.write(`apl: this is Node.js ${process.version}, which cannot read 128-bit JSON integers exactly; apl needs Node.js 22 or later.\n` +
    '  From the repository, run it through npm (npx apl ..., or npm run apl -- ...), which uses the pinned Node.js 24.\n');
  process.exitCode = 2;
} else {
  // A reader that stops early (`apl ... | head`) closes the pipe: apl stops there, as
  // the tools it is piped with do, rather than dying of the write's EPIPE.
  for (const out of [process.stdout, process.stderr]) {
    out.on('error', (err: NodeJS.ErrnoException) => {
      if (err.code !== 'EPIPE') throw err;
      process.exit(process.exitCode ?? 0);
    });
  }
  const { run } = await import('./program.js');
  process.exitCode = await run(process.argv.slice(2));
}
