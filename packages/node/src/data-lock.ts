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
 * `<data_dir>/lock` that holds nothing.
 */
import { join } from 'node:path';
import { Level } from 'level';
import { ConfigError } from './config.js';

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

  /** Releases the lock; another process may open the data directory after it. */
  release(): Promise<void> {
    return this.db.close();
  }
}
