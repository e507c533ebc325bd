/**
 * A worker thread started before the node knows what it will serve, so that it starts
 * and loads its modules on another CPU while the node's thread loads its own (main.ts
 * starts the agent plane's and the state store's this way). The first to ask takes it,
 * with what ended it meanwhile, if anything; until then it does not keep the process
 * alive, so a start refused for its configuration exits as before.
 */
import type { Worker } from 'node:worker_threads';

/** A worker as taken: `failed` says what ended it before it was taken (its error, or its exit), or null. */
export interface Taken {
  worker: Worker;
  failed: Error | null;
}

export class SpareWorker {
  private slot: Taken | null = null;

  /** `make` starts the worker; `exited` words its exit for whoever takes it. */
  constructor(private readonly make: () => Worker, private readonly exited: (code: number) => Error) {}

  /** Starts the worker, unless one is waiting already. */
  start(): void {
    if (this.slot !== null) return;
    const slot: Taken = { worker: this.make(), failed: null };
    slot.worker.unref();
    // Recorded for the taker: an error with no listener would end the process.
    slot.worker.on('error', (err) => (slot.failed ??= err));
    slot.worker.on('exit', (code) => (slot.failed ??= this.exited(code)));
    this.slot = slot;
  }

  /** The waiting worker, once; null if none was started (or it was taken). */
  take(): Taken | null {
    const slot = this.slot;
    this.slot = null;
    return slot;
  }

  /** Ends the waiting worker, if any: nothing will take it. */
  discard(): void {
    void this.take()?.worker.terminate();
  }
}
