/**
 * A benchmark's report: the lines it prints, kept for a markdown file, and its figures
 * as JSON, written to `<out>/<name>-<label>.{md,json}` (and to `--json`'s file when
 * given). Loaded before the options are checked: it uses Node.js's own modules only.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';

/** The options of a benchmark that writes a report (ScriptArgs' form). */
export const REPORT_ARGS = {
  out: { type: 'string', default: 'bench-results' },
  label: { type: 'string', default: new Date().toISOString().replace(/[:.]/g, '-') },
  json: { type: 'string' },
} as const;

export class Report {
  private readonly lines: string[] = [];

  constructor(private readonly name: string) {}

  /** Prints a line and keeps it for the markdown file. */
  readonly print = (line: string): void => {
    this.lines.push(line);
    console.log(line);
  };

  /** Writes the lines printed and `figures`, and says where. */
  write(opts: { out: string; label: string; json?: string | undefined }, figures: unknown): void {
    const out = resolve(opts.out);
    const base = join(out, `${this.name}-${opts.label}`);
    const json = `${JSON.stringify(figures, null, 2)}\n`;
    mkdirSync(out, { recursive: true });
    writeFileSync(`${base}.json`, json);
    writeFileSync(`${base}.md`, `${this.lines.join('\n')}\n`);
    console.log(`\nwritten: ${base}.{md,json}`);
    if (opts.json) writeFileSync(opts.json, json);
  }
}
