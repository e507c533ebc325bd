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

// tap records which modules every process of a test file loads, through a hook it puts
// in NODE_OPTIONS for each child (@tapjs/processinfo, by way of process-on-spawn). The
// hook reads every module each child loads, about 0.6 s more for a node process to
// start; it is what gathers a child's coverage. A test file whose coverage is not
// recorded (scripts/coverage-map.mjs) has no use for it: its children start without it.
if (process.env._TAPJS_PROCESSINFO_COVERAGE_ === '0') {
  const spawning = globalThis[Symbol.for('process-on-spawn@*:singletonId')];
  spawning?.listeners.push((child) => {
    const env = Object.fromEntries(Object.entries(child.env).filter(([k]) => !k.startsWith('_TAPJS_PROCESSINFO_')));
    const options = (env.NODE_OPTIONS ?? '').split(/\s+/).filter((o) => o !== '' && !o.includes('@tapjs/processinfo'));
    if (options.length === 0) delete env.NODE_OPTIONS;
    else env.NODE_OPTIONS = options.join(' ');
    child.env = env;
  });
}
