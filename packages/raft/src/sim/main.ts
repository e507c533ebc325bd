// The simulator's command line.
//
//   npm run sim -- --seeds N [--from S]   run seeds S..S+N-1 (S defaults to 1); print failing seeds
//   npm run sim -- --seed S [--trace]     replay one seed; print its trace hash (and the trace)
//   npm run sim -- --mutants [--seeds N]  the mutation table: how many of N seeds (default 300) catch each broken variant
//   npm run sim                           print the usage
//
// Options: --no-faults (no network faults, crashes or restarts), --ticks T (fault phase length).
// Exit status 1 when any seed fails.
import { pathToFileURL } from 'node:url';
import { MUTANTS, type Mutant } from './mutants.js';
import { runSimulation, zeroCounts, type SimCounts, type SimOptions, type SimResult } from './simulation.js';

interface Args {
  seed: number | null;
  seeds: number;
  from: number;
  trace: boolean;
  faults: boolean;
  ticks: number | undefined;
  mutants: boolean;
}

class UsageError extends Error {}

const USAGE = 'usage: sim --seeds N [--from S] | --seed S [--trace] | --mutants [--seeds N]  [--no-faults] [--ticks T]';

function parse(argv: string[]): Args {
  const args: Args = { seed: null, seeds: 100, from: 1, trace: false, faults: true, ticks: undefined, mutants: false };
  for (let k = 0; k < argv.length; k++) {
    const a = argv[k];
    const value = (): number => {
      const v = Number(argv[++k]);
      if (!Number.isSafeInteger(v) || v < 0) throw new UsageError(`${a} needs a non-negative integer`);
      return v;
    };
    if (a === '--seed') args.seed = value();
    else if (a === '--seeds') {
      args.seeds = value();
      if (args.seeds === 0) throw new UsageError('--seeds needs at least 1: a run of no seeds proves nothing');
    }
    else if (a === '--from') args.from = value();
    else if (a === '--ticks') args.ticks = value();
    else if (a === '--trace') args.trace = true;
    else if (a === '--no-faults') args.faults = false;
    else if (a === '--mutants') args.mutants = true;
    else throw new UsageError(`unknown argument ${a}`);
  }
  return args;
}

function options(a: Args, seed: number): SimOptions {
  const o: SimOptions = { seed, faults: a.faults };
  if (a.ticks !== undefined) o.faultTicks = a.ticks;
  return o;
}

export function describeResult(r: SimResult): string {
  const v = r.violation === null ? 'ok' : `FAIL at t=${r.violation.time} ${r.violation.message}`;
  const spares = r.ids > r.nodes ? ` and ${r.ids - r.nodes} spares` : '';
  return `seed ${r.seed}: ${v} (nodes ${r.nodes}${spares}, events ${r.events}, commit ${r.commit}, acked ${r.acked}, crashes ${r.crashes}, max term ${r.maxTerm}, leader ${r.leaderTicks} and commit ${r.recoveryTicks} ticks after healing)`;
}

/** runSeeds runs the seeds [from, from + count) and collects the runs that failed. */
export function runSeeds(
  from: number,
  count: number,
  optionsOf: (seed: number) => Parameters<typeof runSimulation>[0] = (seed) => ({ seed }),
  onFailure: (r: SimResult) => void = () => {},
): { failed: SimResult[]; events: number; counts: SimCounts } {
  const failed: SimResult[] = [];
  let events = 0;
  const counts = zeroCounts();
  for (let s = from; s < from + count; s++) {
    const r = runSimulation(optionsOf(s));
    events += r.events;
    for (const k of Object.keys(counts) as (keyof SimCounts)[]) counts[k] += r.counts[k];
    if (!r.ok) {
      failed.push(r);
      onFailure(r);
    }
  }
  return { failed, events, counts };
}

/** runCli runs the simulator as the command line would, printing through `print`; returns the exit status. */
export function runCli(argv: string[], print: (line: string) => void): number {
  if (argv.length === 0 || argv.includes('--help') || argv.includes('-h')) {
    print(USAGE);
    return 0;
  }
  let a: Args;
  try {
    a = parse(argv);
  } catch (err) {
    if (!(err instanceof UsageError)) throw err;
    print(`sim: ${err.message}\n${USAGE}`);
    return 2;
  }
  if (a.seed !== null) {
    const o = options(a, a.seed);
    if (a.trace) o.onTrace = print;
    const r = runSimulation(o);
    print(describeResult(r));
    print(`trace sha256 ${r.traceHash}`);
    return r.ok ? 0 : 1;
  }
  if (a.mutants) return mutationTable(argv.includes('--seeds') ? a.seeds : 300, a.from, print);
  const started = process.hrtime.bigint();
  const { failed, events, counts } = runSeeds(a.from, a.seeds, (s) => options(a, s), (r) => print(describeResult(r)));
  const secs = Number(process.hrtime.bigint() - started) / 1e9;
  const list = failed.length === 0 ? '' : `; failing seeds: ${failed.map((r) => r.seed).join(' ')}`;
  print(`sim: ${a.seeds} seeds from ${a.from}, ${a.seeds - failed.length} passed, ${failed.length} failed, ${events} events, ${secs.toFixed(1)}s${list}`);
  print(`sim: summed over the seeds: ${Object.entries(counts).map(([k, v]) => `${k} ${v}`).join(', ')}`);
  return failed.length === 0 ? 0 : 1;
}

/** Caught is how many of the seeds catch the mutant, and by which checkers. */
export function catches(m: Mutant, from: number, count: number): { caught: number; by: Record<string, number> } {
  const by: Record<string, number> = {};
  let caught = 0;
  for (const { checker } of caughtSeeds(m, from, count)) {
    caught++;
    by[checker] = (by[checker] ?? 0) + 1;
  }
  return { caught, by };
}

/** The seeds from `from` (within `count`), in order, whose run of `m` a checker fails, with that checker. */
function* caughtSeeds(m: Mutant, from: number, count: number): Generator<{ seed: number; checker: string }> {
  for (let seed = from; seed < from + count; seed++) {
    const r = runSimulation({ seed, ...m.options });
    if (!r.ok) yield { seed, checker: r.violation!.checker };
  }
}

/**
 * The first seed from `from` (within `count`) whose run one of the checkers expected to
 * catch `m` fails, and the seeds before it that another checker failed; null when no
 * seed of the range is caught by an expected checker. The same verdict as `catches`
 * over the range, without running the seeds after the first catch.
 */
export function firstCatch(m: Mutant, from: number, count: number): { seed: number; checker: string; before: Record<string, number> } | null {
  const before: Record<string, number> = {};
  for (const { seed, checker } of caughtSeeds(m, from, count)) {
    if (m.checkers.includes(checker)) return { seed, checker, before };
    before[checker] = (before[checker] ?? 0) + 1;
  }
  return null;
}

function mutationTable(count: number, from: number, print: (line: string) => void): number {
  print(`| broken variant | seeds that catch it (of ${count}) | by |`);
  print('|---|---:|---|');
  let missed = 0;
  for (const m of MUTANTS) {
    const { caught, by } = catches(m, from, count);
    if (caught === 0) missed++;
    print(`| ${m.name} | ${caught} | ${Object.entries(by).map(([k, v]) => `${k} ${v}`).join(', ')} |`);
  }
  return missed === 0 ? 0 : 1;
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  process.exitCode = runCli(process.argv.slice(2), (line) => console.log(line));
}
