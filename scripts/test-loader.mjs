// How tap runs the TypeScript tests: Node.js itself strips the types (tap's
// TAP_TYPE_STRIP_ONLY, set in .taprc, skips its ts-node loader), and this hook maps an
// import written for the compiled output (`./replica.js`) to the source beside it
// (`./replica.ts`) when there is no such JavaScript file. ts-node compiled every file
// each test process loaded, about a second and a half per test file; Node.js's own
// stripping costs next to nothing, and coverage is recorded on the code as written.
// (`--experimental-transform-types`, also in .taprc, covers the constructor parameter
// properties, which stripping alone refuses.)
import { registerHooks } from 'node:module';

registerHooks({
  resolve(specifier, context, nextResolve) {
    try {
      return nextResolve(specifier, context);
    } catch (err) {
      const relative = specifier.startsWith('./') || specifier.startsWith('../');
      if (err?.code !== 'ERR_MODULE_NOT_FOUND' || !relative || !specifier.endsWith('.js')) throw err;
      return nextResolve(`${specifier.slice(0, -3)}.ts`, context);
    }
  },
});
