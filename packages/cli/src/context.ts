/**
 * What every command runs with: the settings, the output, and the exit code it
 * chooses. `act` turns a command function into commander's action.
 */
import type { Command } from 'commander';
import { EXIT, type ExitCode } from './exit.js';
import { Output } from './output.js';
import { Settings, type GlobalOptions } from './settings.js';

export interface Ctx {
  s: Settings;
  out: Output;
  /** the command that runs (where an option's value came from: `getOptionValueSourceWithGlobals`). */
  cmd: Command;
}

/** The exit code of the command that ran (set by `act`). */
export const outcome: { exit: ExitCode } = { exit: EXIT.ok };

type Run<O> = (ctx: Ctx, args: string[], opts: O) => Promise<ExitCode | void>;

export function act<O = Record<string, unknown>>(run: Run<O>): (...a: unknown[]) => Promise<void> {
  return async (...a: unknown[]) => {
    const cmd = a[a.length - 1] as Command;
    const globals = cmd.optsWithGlobals() as GlobalOptions & O;
    const s = new Settings(globals);
    const args = a.slice(0, -2).flatMap((x) => (Array.isArray(x) ? x.map(String) : x === undefined ? [] : [String(x)]));
    const code = await run({ s, out: new Output(s.json), cmd }, args, cmd.opts() as O);
    outcome.exit = code ?? EXIT.ok;
  };
}
