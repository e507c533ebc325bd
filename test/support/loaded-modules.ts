/**
 * Loaded with `node --import` into a script under test: appends the URL of every
 * module the script resolves, one per line, to the file named by TEST_LOADED_MODULES.
 * The command-line tests use it to show that a refused option loads nothing heavy.
 */
import { appendFileSync } from 'node:fs';
import { registerHooks } from 'node:module';

const out = process.env.TEST_LOADED_MODULES;
if (out !== undefined) {
  registerHooks({
    resolve(specifier, context, next) {
      const resolved = next(specifier, context);
      appendFileSync(out, `${resolved.url}\n`);
      return resolved;
    },
  });
}
