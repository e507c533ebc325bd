/**
 * Test support: what a test or a benchmark process started or made is undone when it
 * exits, normally or by a signal (SIGALRM when a test file times out, SIGTERM, SIGINT
 * and a person's Ctrl-C to a benchmark): child processes still running are killed and
 * temporary directories removed, so that no server outlives the run that started it.
 */
import type { ChildProcess } from 'node:child_process';
import { rmSync } from 'node:fs';
import { onExit } from 'signal-exit';

const running = new Set<ChildProcess>();
const temporary = new Set<string>();
onExit(() => {
  for (const c of running) c.kill('SIGKILL');
  for (const dir of temporary) rmSync(dir, { recursive: true, force: true });
});

/** Kills `child` when this process exits or is stopped by a signal, if it still runs. */
export function killOnExit(child: ChildProcess): void {
  running.add(child);
  child.once('exit', () => running.delete(child));
}

/** Removes `dir` when this process exits or is stopped by a signal; answers `dir`. */
export function removeOnExit(dir: string): string {
  temporary.add(dir);
  return dir;
}
