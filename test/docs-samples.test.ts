// Proves that the SDK's samples in the documents compile as written: every fenced
// `ts` block at the start of a line in docs/client.md and docs/feed.md is checked by
// the TypeScript compiler, strict, against the SDK's published types, as a reader
// who pastes it into a module of their own would.
import t from 'tap';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import ts from 'typescript';
import { REPO } from './support/process.js';

/** The top-level ```ts blocks of a Markdown text (an indented one is a fragment of a list). */
export function tsBlocks(markdown: string): string[] {
  return [...markdown.matchAll(/^```ts\n([^]*?)^```$/gm)].map((m) => m[1]!);
}

t.test('every top-level TypeScript sample of the SDK documents compiles', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'apl-samples-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const files: string[] = [];
  for (const doc of ['docs/client.md', 'docs/feed.md']) {
    const blocks = tsBlocks(readFileSync(join(REPO, doc), 'utf8'));
    t.ok(blocks.length >= 1, `${doc} has a sample`);
    blocks.forEach((code, k) => {
      // `export {}` makes each a module of its own, as a pasted file is.
      const file = join(dir, `${doc.replace(/\W/g, '_')}_${k}.ts`);
      writeFileSync(file, `${code}\nexport {};\n`);
      files.push(file);
    });
  }
  const program = ts.createProgram(files, {
    strict: true, noEmit: true, target: ts.ScriptTarget.ES2022, module: ts.ModuleKind.ESNext,
    moduleResolution: ts.ModuleResolutionKind.Bundler, skipLibCheck: true,
    typeRoots: [join(REPO, 'node_modules/@types')], types: ['node'],
    paths: { '@apl/client': [join(REPO, 'packages/client/dist/index.d.ts')] },
  });
  const diagnostics = ts.getPreEmitDiagnostics(program).map((d) => {
    const where = d.file ? `${d.file.fileName.slice(dir.length + 1)}:${d.file.getLineAndCharacterOfPosition(d.start ?? 0).line + 1}` : '';
    return `${where} ${ts.flattenDiagnosticMessageText(d.messageText, '\n')}`;
  });
  t.same(diagnostics, [], 'no compiler error');
});
