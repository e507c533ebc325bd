/**
 * Logs: JSON lines (pino), one per request and per state change of the node. No line
 * carries an attestation, a token or a justification text: the lines are built without
 * them, and `withoutSecrets` drops those keys from any object logged all the same.
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
      formatters: { level: (label) => ({ level: label }), log: withoutSecrets },
    },
    destination ?? pino.destination({ dest: 1, sync: false, maxLength: LOG_BUFFER_BYTES_MAX }),
  );
}

/**
 * Writes lines formatted elsewhere (the agent plane's thread) to the logger's own
 * destination, so that every line of the node has one writer and stays whole.
 */
export function lineWriter(log: Logger): (lines: string) => void {
  const destination = (log as unknown as Record<symbol, pino.DestinationStream>)[pino.symbols.streamSym]!;
  return (lines) => destination.write(lines);
}

/** Keys never logged at the top of a line's object. */
const SECRET_KEYS = new Set(['attestation', 'token', 'authorization', 'justification']);
/** Keys never logged one level down (a request's headers, an envelope). */
const NESTED_SECRET_KEYS = ['attestation', 'authorization'] as const;

/**
 * `obj` without its secrets: at the top, any key of SECRET_KEYS; in an object one
 * level down, any key of NESTED_SECRET_KEYS. The object logged is left as it is: a
 * line that holds a secret is written from a copy, and one that holds none (every line
 * the node logs) is written from the object itself, with nothing allocated to check it.
 * (pino's own `redact` option did the same, but parsed its paths and cloned for every
 * line: a tenth of what the node allocated under load.)
 */
export function withoutSecrets(obj: Record<string, unknown>): Record<string, unknown> {
  let drop: string[] | null = null;
  let inner: Record<string, unknown> | null = null;
  for (const k in obj) {
    if (!Object.hasOwn(obj, k)) continue;
    if (SECRET_KEYS.has(k)) {
      (drop ??= []).push(k);
      continue;
    }
    const v = obj[k];
    if (v === null || typeof v !== 'object' || Array.isArray(v)) continue;
    if (NESTED_SECRET_KEYS.some((n) => Object.hasOwn(v, n))) (inner ??= Object.create(null) as Record<string, unknown>)[k] = copyWithout(v, NESTED_SECRET_KEYS, {});
  }
  return drop === null && inner === null ? obj : copyWithout(obj, drop ?? [], inner ?? {});
}

/**
 * A copy of `o` without `keys` and with `replaced` in place of what it held, with its
 * prototype and every other own property (an Error keeps its message and stack, which
 * are not enumerable).
 */
function copyWithout(o: object, keys: readonly string[], replaced: Record<string, unknown>): Record<string, unknown> {
  // null prototypes: a key named __proto__ is a key like any other here.
  const props = Object.assign(Object.create(null) as Record<string, PropertyDescriptor>, Object.getOwnPropertyDescriptors(o));
  for (const k of keys) delete props[k];
  // An accessor is copied as the value it gives for `o` (V8's `stack` is one, and its
  // getter gives nothing for another object).
  for (const k in props) if (props[k]!.get) props[k] = { value: (o as Record<string, unknown>)[k], enumerable: props[k]!.enumerable ?? false, writable: true, configurable: true };
  for (const [k, value] of Object.entries(replaced)) props[k] = { value, enumerable: true, writable: true, configurable: true };
  return Object.create(Object.getPrototypeOf(o) as object | null, props) as Record<string, unknown>;
}
