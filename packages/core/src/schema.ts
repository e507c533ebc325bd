/**
 * The field schemas every record of the ledger is built from. Input stays `unknown`
 * until one of these has parsed it; the types are inferred from them.
 *
 * Integer fields accept a safe JSON number or a `bigint` from the lossless codec and
 * refuse anything inexact (1.5, 1e30) with a message that names the rule. Money is
 * always `bigint`; counts and ticks are `number`.
 */
import { z } from 'zod';
import { COUNTER_MAX, DELTA_MAX, DELTA_MIN, ENTRY_MINOR_MAX } from './int128.js';

/** Limits of one intent. The gateway may configure lower ones, never higher. */
export const LIMITS = {
  entriesCountMax: 256,
  evidenceCountMax: 64,
  bindingsCountMax: 32,
  bindingStringLengthMax: 256,
  capabilitiesCountMax: 64,
  idLengthMax: 128,
  commentLengthMax: 1024,
  /**
   * Obligations one party may owe at once. Every outcome lists what the party owes,
   * so this bounds the size of an outcome and of its record.
   */
  obligationsOwedMax: 256,
} as const;

/** The type error of a field: "is required" when it is missing, `must be <phrase>` otherwise. */
export function must(phrase: string) {
  return { error: (iss: { input?: unknown }) => (iss.input === undefined ? 'is required' : `must be ${phrase}`) };
}

/** An exact integer in [lo, hi], returned as `bigint`. */
export function bigIntIn(lo: bigint, hi: bigint, phrase: string) {
  return z
    .union([z.number(), z.bigint()], must(phrase))
    .transform((v, ctx) => {
      if (typeof v === 'number' && !Number.isSafeInteger(v)) {
        ctx.addIssue({ code: 'custom', message: `must be ${phrase}, written as an exact integer` });
        return z.NEVER;
      }
      const n = BigInt(v);
      if (n < lo || n > hi) {
        ctx.addIssue({ code: 'custom', message: `must be ${phrase}` });
        return z.NEVER;
      }
      return n;
    })
    // zod's JSON Schema holds the bounds as doubles (2^127 - 1 reads as 2^127); the exact ones
    // travel as text in `x-exact-range`, which the published document writes as bare integers.
    .meta({ type: 'integer', format: 'int128', minimum: Number(lo), maximum: Number(hi), 'x-exact-range': [String(lo), String(hi)], description: `An integer from ${lo} to ${hi}.` });
}

/** An exact integer in [lo, hi] (both safe), returned as `number`. */
export function intIn(lo: number, hi: number, phrase = `an integer from ${lo} to ${hi}`) {
  return z
    .union([z.number(), z.bigint()], must(phrase))
    .transform((v, ctx) => {
      const n = typeof v === 'bigint' ? Number(v) : v;
      if (!Number.isSafeInteger(n) || n < lo || n > hi) {
        ctx.addIssue({ code: 'custom', message: `must be ${phrase}` });
        return z.NEVER;
      }
      return n;
    })
    .meta({ type: 'integer', minimum: lo, maximum: hi });
}

/** What an id may hold, as the refusals of a bad one say it. */
const idForm = `a letter or digit, then letters, digits and _ . : -, ${LIMITS.idLengthMax} characters at most`;

function idOf(prefix: string, what: string) {
  const re = new RegExp(`^${prefix}[A-Za-z0-9][A-Za-z0-9_.:-]{0,${LIMITS.idLengthMax - prefix.length - 1}}$`);
  return z.string(must(what)).regex(re, `must be ${what} (${prefix}<id>; ${idForm})`);
}

export const TransactionId = idOf('txn_', 'a transaction id');
export const AccountId = idOf('acc_', 'an account id');
export const UsageId = idOf('usage_', 'a usage-balance id');
/** Party ids and policy ids are opaque: letters, digits and `_ . : -`. */
export const PartyId = idOf('', 'a party id');
export const PolicyId = idOf('', 'a policy id');

export const AGENT_URI = /^agent:\/\/([A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*(:[0-9]{1,5})?\/agent\/[A-Za-z0-9._~-]{1,128}$/;
/** `agent://<authority>/agent/<agent_id>`. */
const AGENT_URI_PHRASE = 'must be an agent URI (agent://<authority>/agent/<agent_id>, the agent id 1 to 128 of A-Z a-z 0-9 . _ ~ -)';
export const AgentUri = z.string(must('an agent URI')).max(512, { message: 'must be an agent URI of at most 512 characters', abort: true }).regex(AGENT_URI, AGENT_URI_PHRASE);

/** Three to twelve capitals or digits, starting with a capital: ISO 4217 codes and ledger units. */
export const Currency = z.string(must('a currency code')).regex(/^[A-Z][A-Z0-9]{2,11}$/, 'must be a currency code (e.g. USD)');

export const ACTION_NAME = /^[a-z][a-z0-9_-]*(\.[a-z][a-z0-9_-]*)*$/;
/** A dotted action name, e.g. `purchase.book`. */
export const ActionName = z.string(must('an action name')).max(128).regex(ACTION_NAME, 'must be an action name (dotted lowercase words, e.g. purchase.book)');
/** An action pattern: an action name, `<prefix>.*`, or `*`. */
export const ActionPattern = z
  .string(must('an action pattern'))
  .max(128)
  .regex(/^(\*|[a-z][a-z0-9_-]*(\.[a-z][a-z0-9_-]*)*(\.\*)?)$/, 'must be an action name, a prefix ending in .*, or *');

export const Sha256Hex = z.string(must('a SHA-256 digest')).regex(/^[0-9a-f]{64}$/, 'must be a lowercase-hex SHA-256 digest');

export const Amount = z.strictObject({
  minor: bigIntIn(1n, ENTRY_MINOR_MAX, 'a positive integer below 2^127'),
  currency: Currency,
});
export type Amount = z.output<typeof Amount>;

export const Side = z.enum(['Debit', 'Credit'], must('Debit or Credit'));
export type Side = z.output<typeof Side>;

export const Entry = z.strictObject({ account: AccountId, side: Side, amount: Amount });
export type Entry = z.output<typeof Entry>;

export const SignedAmount = z.strictObject({
  minor: bigIntIn(DELTA_MIN, DELTA_MAX, 'an integer from -2^127 to 2^127-1'),
  currency: Currency,
});
export const UsageMove = z.strictObject({ usage: UsageId, amount: SignedAmount });
export type UsageMove = z.output<typeof UsageMove>;

const BindingKey = /^[a-z][a-z0-9_]{0,63}$/;
/**
 * An integer binding: a safe JSON number, or a bigger integer literal that the
 * lossless codec hands over as `bigint`; held as `bigint` either way. It is one
 * schema, marked `integer`, so that its JSON Schema is one integer rather than a
 * number beside an unrepresentable (match-anything) bigint.
 */
const BindingInteger = z
  .union([z.number().refine(Number.isSafeInteger).transform((n) => BigInt(n)), z.bigint()])
  .meta({ type: 'integer' });
/**
 * An integer binding of a new intent: 128 bits, signed. The log's operations keep the
 * unbounded form above, so that a log written before the bound still replays.
 */
const INTENT_BINDING_RANGE = 'an integer from -2^127 to 2^127-1';
const IntentBindingInteger = bigIntIn(DELTA_MIN, DELTA_MAX, INTENT_BINDING_RANGE);

/** A binding's value; `range` names the bound of `integer`, said of an integer outside it. */
function bindingValue(integer: typeof BindingInteger | typeof IntentBindingInteger, range?: string) {
  const kinds = `a string (at most ${LIMITS.bindingStringLengthMax} characters), an integer or a boolean`;
  const long = (iss: { input?: unknown }) => `must be a string of at most ${LIMITS.bindingStringLengthMax} characters (this one has ${String(iss.input).length})`;
  return z.union([z.string().max(LIMITS.bindingStringLengthMax, { error: long }), z.boolean(), integer], {
    error: (iss) => {
      if (iss.input === undefined) return 'is required';
      const integral = typeof iss.input === 'bigint' || (typeof iss.input === 'number' && Number.isInteger(iss.input));
      // A number read as a double beyond 2^53 (written with a fraction or an exponent) is not exact: say how to write it.
      const inexact = typeof iss.input === 'number' && integral && !Number.isSafeInteger(iss.input);
      return `must be ${range !== undefined && integral ? range : kinds}${range !== undefined && inexact ? ', written as an exact integer' : ''}`;
    },
  });
}
export const BindingValue = bindingValue(BindingInteger);
export type BindingValue = z.output<typeof BindingValue>;
const BINDING_NAME = 'binding names are lowercase words (a-z, 0-9, _)';

function bindingsOf(value: ReturnType<typeof bindingValue>) {
  return z.preprocess(
    (v, ctx) => {
      // A record would drop a "__proto__" key without a word; refuse it like any bad name.
      if (v !== null && typeof v === 'object' && Object.hasOwn(v, '__proto__')) {
        ctx.addIssue({ code: 'custom', message: `"__proto__": ${BINDING_NAME}`, input: v });
      }
      return v;
    },
    z
      .record(z.string().regex(BindingKey, BINDING_NAME), value)
      .refine((b) => Object.keys(b).length <= LIMITS.bindingsCountMax, `at most ${LIMITS.bindingsCountMax} bindings`),
  );
}
export const Bindings = bindingsOf(BindingValue);

export const Action = z.strictObject({ action: ActionName, bindings: Bindings });
export type Action = z.output<typeof Action>;
/** The action of a new intent, as the agent plane takes it: its integer bindings held to 128 bits. */
export const IntentAction = z.strictObject({ action: ActionName, bindings: bindingsOf(bindingValue(IntentBindingInteger, INTENT_BINDING_RANGE)) });

export const Comment = z.string().max(LIMITS.commentLengthMax, `must be at most ${LIMITS.commentLengthMax} characters`);

/** A counter value as stored: 0..2^128-1. */
export const Counter = bigIntIn(0n, COUNTER_MAX, 'an integer from 0 to 2^128-1');
