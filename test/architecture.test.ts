// Proves the architecture holds: the imports are the architecture (DESIGN §2). The
// core, Raft and the SDK import no other package of this project, the command line
// only the SDK and the core, and a wrong-direction import fails to compile; the core and Raft's state machine use no clock, no
// randomness and no I/O outside the modules allowed to (the LevelDB store, the
// simulator's command line, the scenario reader of the tests).
import t from 'tap';
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import ts from 'typescript';

const ROOT = new URL('..', import.meta.url).pathname;

function sources(dir: string): string[] {
  return readdirSync(dir).flatMap((f) => {
    const p = join(dir, f);
    if (statSync(p).isDirectory()) return sources(p);
    return p.endsWith('.ts') && !p.endsWith('.test.ts') && !p.endsWith('.d.ts') ? [p] : [];
  });
}

/** The module specifiers a file imports or re-exports, statically or dynamically. */
function imports(file: string): string[] {
  const text = readFileSync(file, 'utf8');
  const re = /^\s*(?:import|export)\s[^;]*?\sfrom\s*'([^']+)'|^\s*import\s*'([^']+)'|\bimport\(\s*'([^']+)'\s*\)/gms;
  return [...text.matchAll(re)].map((m) => (m[1] ?? m[2] ?? m[3])!).filter((s) => !s.startsWith('.'));
}

/** A package name without its subpath: `paseto/v4/public` is `paseto`, `@apl/core/testing` is `@apl/core`. */
const packageOf = (spec: string) => spec.split('/').slice(0, spec.startsWith('@') ? 2 : 1).join('/');

/** Per package: which modules it may import, and single files allowed one more. */
const RULES: Record<string, { may: (pkg: string) => boolean; exceptions: Record<string, string[]> }> = {
  'packages/core/src': {
    may: (p) => ['zod', 'node:crypto'].includes(p),
    // The reader of the data-driven scenario files; used by tests only, not exported.
    exceptions: { 'packages/core/src/policy/datadriven.ts': ['node:fs'] },
  },
  'packages/raft/src': {
    may: (p) => p === 'node:crypto',
    exceptions: {
      'packages/raft/src/level-store.ts': ['level'],
      'packages/raft/src/wal-store.ts': ['node:fs', 'node:path', 'node:zlib'],
      'packages/raft/src/sim/main.ts': ['node:url'],
      // The assertions shared by the seed-range tests; only the tests import it.
      'packages/raft/src/sim/seed-range.ts': ['tap'],
      // The wire codec: pure encoding (protobufjs reflection over the generated descriptor), no I/O.
      'packages/raft/src/wire/codec.ts': ['protobufjs'],
    },
  },
  'packages/node/src': {
    // The server joins the core and Raft; any library, no other package of ours.
    may: (p) => !p.startsWith('@apl/') || p === '@apl/core' || p === '@apl/raft',
    exceptions: {},
  },
  'packages/client/src': {
    // The SDK installs alone: Node.js itself, no library, nothing of ours.
    may: (p) => p.startsWith('node:'),
    exceptions: {},
  },
  'packages/cli/src': {
    // The command line speaks through the SDK; the pure core verifies exports.
    may: (p) => p.startsWith('node:') || ['commander', 'paseto', '@apl/client', '@apl/core'].includes(p),
    exceptions: {},
  },
};

t.test('each package imports only what its place in the architecture allows', async (t) => {
  let checked = 0;
  for (const [dir, rule] of Object.entries(RULES)) {
    for (const file of sources(join(ROOT, dir))) {
      const rel = relative(ROOT, file);
      for (const spec of imports(file)) {
        checked++;
        const pkg = packageOf(spec);
        if (!rule.may(pkg) && !(rule.exceptions[rel] ?? []).includes(pkg)) t.fail(`${rel} imports ${spec}`);
      }
    }
  }
  t.ok(checked > 50, `${checked} imports checked`);
});

t.test('the core and Raft read no clock and draw no random number', async (t) => {
  const banned = /\bDate\.now\b|\bnew Date\(|\bMath\.random\b|\bsetTimeout\b|\bsetInterval\b|\bsetImmediate\b|\bprocess\.hrtime\b|\bperformance\.now\b|\bcrypto\.getRandomValues\b|\brandomBytes\b/;
  for (const dir of ['packages/core/src', 'packages/raft/src']) {
    for (const file of sources(join(ROOT, dir))) {
      const rel = relative(ROOT, file);
      if (rel === 'packages/raft/src/sim/main.ts') continue; // the command line times its own run
      readFileSync(file, 'utf8').split('\n').forEach((line, i) => {
        if (!line.trim().startsWith('//') && !line.trim().startsWith('*') && banned.test(line)) t.fail(`${rel}:${i + 1}: ${line.trim()}`);
      });
    }
  }
  t.pass('no clock, no randomness');
});

t.test('a wrong-direction import fails to compile', async (t) => {
  // One real compile per package boundary; the resolution test below covers every pair.
  for (const [pkg, forbidden] of [['core', '@apl/raft'], ['core', '@apl/node'], ['raft', '@apl/core'], ['client', '@apl/core'], ['cli', '@apl/node']] as const) {
    const dir = mkdtempSync(join(ROOT, `packages/${pkg}/.boundary-`));
    try {
      mkdirSync(join(dir, 'src'));
      writeFileSync(join(dir, 'src/wrong.ts'), `import * as forbidden from '${forbidden}';\nexport const x = forbidden;\n`);
      writeFileSync(join(dir, 'tsconfig.json'), JSON.stringify({
        extends: '../tsconfig.json',
        compilerOptions: { rootDir: 'src', composite: false, noEmit: true, incremental: false },
        include: ['src'],
      }));
      let output = '';
      try {
        execFileSync(join(ROOT, 'node_modules/.bin/tsc'), ['-p', dir], { encoding: 'utf8', stdio: 'pipe' });
      } catch (err) {
        output = String((err as { stdout?: string }).stdout);
      }
      t.match(output, /tsconfig\.boundary\.ts/, `packages/${pkg} importing ${forbidden} does not compile`);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }
});

t.test('every forbidden package name resolves to the boundary file', async (t) => {
  const forbidden: Record<string, string[]> = {
    core: ['@apl/raft', '@apl/node', '@apl/client', '@apl/cli'],
    raft: ['@apl/core', '@apl/node', '@apl/client', '@apl/cli'],
    client: ['@apl/core', '@apl/raft', '@apl/node', '@apl/cli'],
    cli: ['@apl/node', '@apl/raft'],
  };
  for (const [pkg, names] of Object.entries(forbidden)) {
    const config = ts.getParsedCommandLineOfConfigFile(join(ROOT, 'packages', pkg, 'tsconfig.json'), {}, { ...ts.sys, onUnRecoverableConfigFileDiagnostic: () => {} })!;
    const from = join(ROOT, 'packages', pkg, 'src/index.ts');
    for (const name of names) {
      const r = ts.resolveModuleName(name, from, config.options, ts.sys);
      t.equal(relative(ROOT, r.resolvedModule?.resolvedFileName ?? '(unresolved)'), 'tsconfig.boundary.ts', `packages/${pkg} importing ${name}`);
    }
  }
});
