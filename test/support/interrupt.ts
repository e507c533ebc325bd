/**
 * Test support: a benchmark stopped by Ctrl-C in the middle of a level, as a person
 * stops one. It is started with `args`, waited for until its table's head is printed
 * (the measured levels begin just after), left to run a second, and sent SIGINT.
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { performance } from 'node:perf_hooks';
import { killOnExit } from './cleanup.js';

export interface Interrupted {
  /** what it printed before it ended */
  stdout: string;
  /** whether its table's head was printed before the signal */
  began: boolean;
  /** the signal it ended by (null: it exited with a code) */
  signal: NodeJS.Signals | null;
  /** seconds from the signal to its exit */
  seconds: number;
}

export async function interruptBench(script: string, args: string[]): Promise<Interrupted> {
  // stderr is not read: a pipe nobody reads would stop a benchmark that fills it.
  const child = spawn(process.execPath, [script, ...args], { stdio: ['ignore', 'pipe', 'ignore'] });
  killOnExit(child);
  let stdout = '';
  child.stdout.setEncoding('utf8').on('data', (c: string) => (stdout += c));
  const exited = once(child, 'exit') as Promise<[number | null, NodeJS.Signals | null]>;
  for (let waited = 0; !/^\|---/m.test(stdout) && waited < 600; waited++) await new Promise((r) => setTimeout(r, 100));
  const began = /^\|---/m.test(stdout);
  await new Promise((r) => setTimeout(r, 1000));
  const signalled = performance.now();
  child.kill('SIGINT');
  const [, signal] = await exited;
  return { stdout, began, signal, seconds: (performance.now() - signalled) / 1000 };
}
