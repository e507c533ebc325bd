/**
 * The data directory's lock: one process at a time opens a node's data directory.
 *
 * A second process would do harm before anything refused it. Opening the Raft log
 * zeroes what follows its last whole record (a record the running node is writing
 * looks torn) and makes the next segment; opening the state store removes what it
 * takes for an interrupted install. While another node writes there, each destroys
 * what that node is writing. So the lock is taken before either opens.
 *
 * Node.js has no file lock of its own. LevelDB takes one (`fcntl` on its LOCK file):
 * the kernel releases it when the process ends, however it ends, so a SIGKILL leaves
 * no stale lock to clear by hand, and it holds between containers that share the
 * volume, which a PID file does not. The lock is that of a LevelDB under
 * `<data_dir>/lock`.
 *
 * That LevelDB holds one record: how many times a node has started on the directory.
 * A cluster member names its start to its peers (the peer mesh), so that a later start
 * of the member, here or from a copy of the directory elsewhere, supersedes an earlier
 * one still running: the lock holds on one host only.
 */
import { join } from 'node:path';
import { Level } from 'level';
import { ConfigError } from './config.js';

const STARTS_KEY = 'starts';

export class DataDirLock {
  private constructor(private readonly db: Level<string, string>) {}

  /** Takes the lock of `dataDir`, or throws a ConfigError saying who holds it. */
  static async take(dataDir: string): Promise<DataDirLock> {
    const path = join(dataDir, 'lock');
    const db = new Level<string, string>(path);
    try {
      await db.open();
    } catch (err) {
      if ((err as { cause?: { code?: unknown } }).cause?.code === 'LEVEL_LOCKED') {
        throw new ConfigError(`the data directory ${dataDir} is in use: another process holds its lock (${join(path, 'LOCK')}). Is a node already running on it? Stop that node first, or give this one its own data_dir.`);
      }
      throw err;
    }
    return new DataDirLock(db);
  }

  /**
   * Counts this start of a node on the directory, durably, and says which it is (1 for
   * the first; a directory of an earlier release, which counted none, starts at 1).
   * The count is synced before it is used: a start it could not record does not run.
   */
  async countStart(): Promise<number> {
    const before = await this.db.get(STARTS_KEY);
    const starts = (before === undefined ? 0 : Number(before)) + 1;
    if (!Number.isSafeInteger(starts) || starts < 1) throw new Error(`the start count in the data directory's lock is not a count: ${JSON.stringify(before)}`);
    await this.db.put(STARTS_KEY, String(starts), { sync: true });
    return starts;
  }

  /** Releases the lock; another process may open the data directory after it. */
  release(): Promise<void> {
    return this.db.close();
  }
}
