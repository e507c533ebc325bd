/**
 * The `apl` process (bin/apl.mjs loads it once the runtime is checked): runs the
 * command line and exits with its code. Started directly (node dist/main.js), it
 * checks the runtime itself: on an old Node.js every command that reads an answer
 * would otherwise fail with a stack trace.
 */
import { hasJsonSourceText } from '@apl/client';
import { run } from './program.js';

if (!hasJsonSourceText()) {
  process.stderr.write(`apl: this is Node.js ${process.version}, which cannot read 128-bit JSON integers exactly; apl needs Node.js 22 or later.\n` +
    '  From the repository, run it through npm (npx apl ..., or npm run apl -- ...), which uses the pinned Node.js 24.\n');
  process.exitCode = 2;
} else {
  process.exitCode = await run(process.argv.slice(2));
}
