/**
 * A small reader and writer for data-driven test files in the manner of etcd's
 * `datadriven` package. A file is a sequence of directives:
 *
 *   # comments and blank lines between directives are ignored
 *   command key=value key=value
 *   optional input lines
 *   ----
 *   expected output lines
 *
 * A directive ends at the first blank line after its `----`. Expected output cannot
 * contain a blank line. Running with REWRITE=1 writes the actual outputs back into
 * the file, for a human to review in the diff.
 */
import { readFileSync, writeFileSync } from 'node:fs';

export interface Directive {
  /** line is the 1-based line of the command, for failure messages. */
  line: number;
  command: string;
  args: Map<string, string>;
  input: string;
  expected: string;
  /** The raw lines before `----`, kept verbatim for rewriting. */
  head: string[];
}

export function parseArgs(text: string): { command: string; args: Map<string, string> } {
  const [command = '', ...rest] = text.trim().split(/\s+/);
  const args = new Map<string, string>();
  for (const word of rest) {
    const eq = word.indexOf('=');
    if (eq < 0) args.set(word, '');
    else args.set(word.slice(0, eq), word.slice(eq + 1));
  }
  return { command, args };
}

export function readDirectives(path: string): { directives: Directive[]; preamble: string[][] } {
  const lines = readFileSync(path, 'utf8').split('\n');
  const directives: Directive[] = [];
  const preamble: string[][] = [];
  let i = 0;
  let comments: string[] = [];
  while (i < lines.length) {
    const line = lines[i]!;
    if (line.trim() === '' || line.startsWith('#')) {
      comments.push(line);
      i++;
      continue;
    }
    preamble.push(comments);
    comments = [];
    const start = i;
    const head: string[] = [];
    while (i < lines.length && lines[i] !== '----') head.push(lines[i++]!);
    if (i >= lines.length) throw new Error(`${path}:${start + 1}: directive without ----`);
    i++;
    const out: string[] = [];
    while (i < lines.length && lines[i]!.trim() !== '') out.push(lines[i++]!);
    const { command, args } = parseArgs(head[0]!);
    directives.push({ line: start + 1, command, args, input: head.slice(1).join('\n'), expected: out.join('\n'), head });
  }
  preamble.push(comments);
  return { directives, preamble };
}

/** Writes the file back with actual outputs in place of the expected ones. */
export function rewrite(path: string, parsed: { directives: Directive[]; preamble: string[][] }, actual: string[]): void {
  const parts: string[] = [];
  parsed.directives.forEach((d, k) => {
    parts.push(...parsed.preamble[k]!);
    parts.push(...d.head, '----', ...(actual[k] === '' ? [] : actual[k]!.split('\n')));
  });
  parts.push(...parsed.preamble[parsed.directives.length]!);
  writeFileSync(path, parts.join('\n'));
}
