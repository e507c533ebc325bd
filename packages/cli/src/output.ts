/**
 * What apl prints: tables and aligned fields for people, one JSON document for
 * scripts (`--json`, 128-bit integers as bare numbers), and progress on stderr.
 */
import { stringifyJson } from '@apl/client';

export class Output {
  constructor(readonly json: boolean, private readonly stdout: NodeJS.WritableStream = process.stdout, private readonly stderr: NodeJS.WriteStream = process.stderr) {}

  /** Prints `value` as JSON under --json, else the text `human()` makes. */
  result(value: unknown, human: () => string): void {
    this.stdout.write(this.json ? `${stringifyJson(value, 2)}\n` : `${human()}\n`);
  }

  /** A line for people on stderr (not under --json, where stdout stays one document). */
  note(line: string): void {
    if (!this.json) this.stderr.write(`${line}\n`);
  }

  /** A progress display on stderr: redrawn in place on a terminal, else one line at the end. */
  progress(label: string): Progress {
    return new Progress(this.stderr, label);
  }
}

export class Progress {
  private last = 0;
  private text = '';
  constructor(private readonly stream: NodeJS.WriteStream, private readonly label: string) {}

  update(text: string): void {
    this.text = text;
    if (!this.stream.isTTY) return;
    const now = Date.now();
    if (now - this.last < 100) return;
    this.last = now;
    this.stream.write(`\r${this.label}: ${text}\x1b[K`);
  }

  done(text = this.text): void {
    this.stream.write(`${this.stream.isTTY ? '\r' : ''}${this.label}: ${text}${this.stream.isTTY ? '\x1b[K' : ''}\n`);
  }
}

const cell = (v: unknown): string => (v === null || v === undefined ? '-' : typeof v === 'object' ? stringifyJson(v) : String(v));

/** A table: a header row, then one row per item, columns padded to their widest cell. */
export function table(rows: readonly Record<string, unknown>[], columns: readonly [key: string, header: string][]): string {
  if (rows.length === 0) return '(none)';
  const cells = [columns.map(([, h]) => h), ...rows.map((r) => columns.map(([k]) => cell(r[k])))];
  const widths = columns.map((_, c) => Math.max(...cells.map((row) => row[c]!.length)));
  return cells.map((row) => row.map((v, c) => (c === row.length - 1 ? v : v.padEnd(widths[c]!))).join('  ').trimEnd()).join('\n');
}

/** Aligned `label  value` lines; entries whose value is undefined are left out. */
export function fields(entries: readonly [label: string, value: unknown][]): string {
  const shown = entries.filter(([, v]) => v !== undefined);
  const width = Math.max(...shown.map(([l]) => l.length));
  return shown.map(([l, v]) => `${l.padEnd(width)}  ${cell(v)}`).join('\n');
}

/** Bytes in a unit a person reads. */
export function bytes(n: number): string {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KiB`;
  return `${(n / 1024 / 1024).toFixed(1)} MiB`;
}
