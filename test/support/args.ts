/**
 * The command line of a benchmark or of the chaos run: `--help` prints its usage and
 * options and exits 0; an unknown option, or a value that is not what the option
 * takes, prints why and the usage and exits 2, before anything is started.
 */
import { existsSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { parseArgs, type ParseArgsOptionsConfig } from 'node:util';

type Values<O extends ParseArgsOptionsConfig> = ReturnType<typeof parseArgs<{ options: O; strict: true }>>['values'];

export class ScriptArgs<O extends ParseArgsOptionsConfig> {
  readonly values: Values<O>;

  constructor(readonly usage: string, options: O, argv: string[] = process.argv.slice(2)) {
    if (argv.includes('--help') || argv.includes('-h')) {
      console.log(`${usage}\n\noptions:\n${describe(options)}`);
      process.exit(0);
    }
    try {
      this.values = parseArgs({ args: argv, options, strict: true }).values as Values<O>;
    } catch (err) {
      this.refuse((err as Error).message);
    }
    // Where the results go is checked now, not once a run of minutes has ended.
    const v = this.values as Record<string, unknown>;
    if (typeof v.label === 'string' && /[/\\]/.test(v.label)) this.refuse(`--label ${v.label}: expected a part of a file name, without /`);
    if (typeof v.json === 'string' && !existsSync(dirname(resolve(v.json)))) this.refuse(`--json ${v.json}: the directory ${dirname(resolve(v.json))} does not exist`);
  }

  /** A whole number at least `min` given as `--name`, or the refusal. */
  int(name: keyof O & string, min = 0): number {
    const raw = this.raw(name);
    const n = Number(raw);
    if (typeof raw !== 'string' || raw.trim() === '' || !Number.isInteger(n) || n < min) this.refuse(`--${name} ${String(raw)}: expected a whole number of at least ${min}`);
    return n;
  }

  /** A number above 0 given as `--name`, or undefined when it was not given. */
  positive(name: keyof O & string): number | undefined {
    const raw = this.raw(name);
    if (raw === undefined) return undefined;
    const n = Number(raw);
    if (typeof raw !== 'string' || raw.trim() === '' || !(n > 0) || !Number.isFinite(n)) this.refuse(`--${name} ${String(raw)}: expected a number above 0`);
    return n;
  }

  /** A comma-separated list of whole numbers at least `min` given as `--name`. */
  ints(name: keyof O & string, min = 1): number[] {
    const raw = this.raw(name);
    const list = typeof raw === 'string' ? raw.split(',').map((s) => (s.trim() === '' ? NaN : Number(s))) : [];
    if (list.length === 0 || list.some((n) => !Number.isInteger(n) || n < min)) this.refuse(`--${name} ${String(raw)}: expected whole numbers of at least ${min}, separated by commas`);
    return list;
  }

  private raw(name: string): unknown {
    return (this.values as Record<string, unknown>)[name];
  }

  refuse(why: string): never {
    console.error(`${why}\n\n${this.usage}\n(--help lists the options)`);
    process.exit(2);
  }
}

function describe(options: ParseArgsOptionsConfig): string {
  const rows = Object.entries(options).map(([name, o]) => [
    `--${name}${o.type === 'string' ? (o.multiple ? ' <value> (repeatable)' : ' <value>') : ''}`,
    o.default === undefined || o.default === false ? '' : `default ${Array.isArray(o.default) ? o.default.join(' ') : String(o.default)}`,
  ] as const);
  const width = Math.max(...rows.map(([flag]) => flag.length));
  return rows.map(([flag, given]) => `  ${flag.padEnd(width)}  ${given}`.trimEnd()).join('\n');
}
