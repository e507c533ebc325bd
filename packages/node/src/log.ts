/**
 * Logs: JSON lines (pino), one per request and per state change of the node. The
 * serializers keep secrets out: no attestation, no token, no justification text.
 */
import { pino, type Logger } from 'pino';

export type { Logger };

export function createLogger(level: string, node: string, destination?: pino.DestinationStream): Logger {
  return pino(
    {
      level,
      base: { node },
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }) },
      redact: { paths: ['attestation', 'token', 'authorization', 'justification', '*.attestation', '*.authorization'], remove: true },
    },
    destination,
  );
}
