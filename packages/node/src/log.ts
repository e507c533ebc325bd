/**
 * Logs: JSON lines (pino), one per request and per state change of the node. The
 * serializers keep secrets out: no attestation, no token, no justification text.
 *
 * Lines go to stdout without blocking: a line is written at once when no write is
 * under way, and lines logged meanwhile go out together in the next write, on
 * libuv's pool rather than the thread that runs Raft and `apply` (a write per line
 * was 7 % of that thread under load). pino flushes what is left when the process
 * exits; a SIGKILL may lose the last lines, never a record: the journal is the record.
 * A stdout that stops draining holds up to LOG_BUFFER_BYTES_MAX, then lines are dropped.
 */
import { pino, type Logger } from 'pino';

export type { Logger };

/** Lines waiting for a stdout that does not drain are held up to this; beyond it they are dropped, not the process. */
const LOG_BUFFER_BYTES_MAX = 16 << 20;

export function createLogger(level: string, node: string, destination?: pino.DestinationStream): Logger {
  return pino(
    {
      level,
      base: { node },
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }) },
      redact: { paths: ['attestation', 'token', 'authorization', 'justification', '*.attestation', '*.authorization'], remove: true },
    },
    destination ?? pino.destination({ dest: 1, sync: false, maxLength: LOG_BUFFER_BYTES_MAX }),
  );
}
