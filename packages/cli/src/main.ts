/**
 * The `apl` process (bin/apl.mjs loads it once the runtime is checked): runs the
 * command line and exits with its code.
 */
import { run } from './program.js';

process.exitCode = await run(process.argv.slice(2));
