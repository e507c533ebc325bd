/**
 * Loaded into a benchmark's server with `--import` (`npm run bench -- intents
 * --alloc-profile`): V8's sampling heap profiler, counting what is allocated whether it
 * is collected or kept, so that the profile shows where the allocation (and so the
 * collector's work) comes from. The first SIGUSR2 starts sampling; the second stops it
 * and writes the profile into BENCH_ALLOC_DIR as `alloc-<pid>.heapprofile` (written to a
 * temporary name, then renamed, so that a reader never sees half of it).
 */
import { renameSync, writeFileSync } from 'node:fs';
import { Session } from 'node:inspector/promises';
import { join } from 'node:path';

const dir = process.env.BENCH_ALLOC_DIR;
if (dir !== undefined) {
  const session = new Session();
  session.connect();
  let sampling = false;
  process.on('SIGUSR2', () => {
    sampling = !sampling;
    void (sampling ? start() : stop()).catch((err: Error) => console.error(`allocation sampler: ${err.message}`));
  });
  const start = () => session.post('HeapProfiler.startSampling', {
    // One sample per 16 KiB allocated on average (V8's default is 32 KiB).
    samplingInterval: 16_384,
    includeObjectsCollectedByMajorGC: true,
    includeObjectsCollectedByMinorGC: true,
  });
  const stop = async () => {
    const { profile } = await session.post('HeapProfiler.stopSampling');
    const file = join(dir, `alloc-${process.pid}.heapprofile`);
    writeFileSync(`${file}.part`, JSON.stringify(profile));
    renameSync(`${file}.part`, file);
  };
}
