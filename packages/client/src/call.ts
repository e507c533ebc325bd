/**
 * One request and its answer as a value or an error: the JSON body decoded with the
 * response schema's plan, or the error body as the class of its code.
 */
import { ApiError, UnexpectedResponseError, type ErrorBodyOf } from './errors.js';
import { ERROR_CLASSES } from './generated/contract.js';
import { decodeWith, parseJson, stringifyJson, type Plan } from './json.js';
import type { Answer, Transport } from './transport.js';

export interface CallOptions {
  /** token goes in `Authorization: Bearer`. */
  token?: string | undefined;
  body?: unknown;
  /** plan decodes the 128-bit integers of the success body. */
  plan?: Plan | undefined;
  /** text: the success body is text, returned as it is. */
  text?: boolean;
  /** idempotent: the request may be sent to another replica when one gives no answer (transport.ts). */
  idempotent?: boolean;
  /** sent is called each time the request is written to a connection (transport.ts). */
  sent?: () => void;
}

export interface Called<T> {
  value: T;
  answer: Answer;
}

const isJson = (a: Answer) => /^application\/json\s*(;|$)/i.test(String(a.headers['content-type'] ?? ''));

/** The error an answer carries, as the class of its code. */
export function errorOf(a: Answer): Error {
  if (!isJson(a)) return new UnexpectedResponseError(a.status, a.text, `${a.url} answered ${a.status} without a JSON error body: ${a.text.slice(0, 200)}`);
  let body: unknown;
  try {
    body = parseJson(a.text);
  } catch {
    return new UnexpectedResponseError(a.status, a.text, `${a.url} answered ${a.status} with a body that is not JSON`);
  }
  const b = body as { error?: unknown; message?: unknown };
  if (typeof b?.error !== 'string' || typeof b.message !== 'string') {
    return new UnexpectedResponseError(a.status, a.text, `${a.url} answered ${a.status} with a body that is not an error body`);
  }
  // The body is the code's: the class is looked up by the code it holds.
  const Class = (ERROR_CLASSES as unknown as Record<string, (new (status: number, body: ErrorBodyOf<string>) => ApiError) | undefined>)[b.error];
  const err = new (Class ?? ApiError)(a.status, body as ErrorBodyOf<string>);
  // Retry-After in seconds (RFC 9110 allows a date too; the node sends seconds).
  const after = a.headers['retry-after'];
  if (typeof after === 'string' && /^\d+$/.test(after.trim())) err.retryAfterSeconds = Number(after.trim());
  return err;
}

/** Sends a request; resolves with the decoded 2xx body, or rejects with the error of the answer. */
export async function call<T>(t: Transport, method: string, path: string, o: CallOptions = {}): Promise<Called<T>> {
  const headers: Record<string, string> = {};
  if (o.token !== undefined) headers.authorization = `Bearer ${o.token}`;
  if (o.text) headers.accept = 'text/plain';
  const answer = await t.send(method, path, { headers, ...(o.body === undefined ? {} : { body: stringifyJson(o.body) }), ...(o.idempotent ? { idempotent: true } : {}), ...(o.sent ? { sent: o.sent } : {}) });
  if (answer.status < 200 || answer.status > 299) throw errorOf(answer);
  if (o.text) return { value: answer.text as T, answer };
  if (!isJson(answer)) throw new UnexpectedResponseError(answer.status, answer.text, `${answer.url}${path} answered ${answer.status} without a JSON body`);
  let parsed: unknown;
  try {
    parsed = parseJson(answer.text);
  } catch {
    throw new UnexpectedResponseError(answer.status, answer.text, `${answer.url}${path} answered ${answer.status} with a body that is not JSON`);
  }
  return { value: decodeWith<T>(parsed, o.plan), answer };
}

/** A path segment, percent-encoded. */
export const seg = (s: string) => encodeURIComponent(s);

/** A query string of the defined values, or ''. */
export function query(q: Record<string, string | number | undefined>): string {
  const entries = Object.entries(q).filter((e): e is [string, string | number] => e[1] !== undefined);
  return entries.length === 0 ? '' : `?${new URLSearchParams(entries.map(([k, v]): [string, string] => [k, String(v)])).toString()}`;
}
