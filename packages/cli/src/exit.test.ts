// Proves what apl makes of each failure: the exit code scripts test, and advice
// that names the next step, for the node's error codes and for apl's own failures.
import t from 'tap';
import { ERROR_CLASSES, NoAttestationError, TransportError, UnexpectedResponseError, UnreadableAttestationError, type ErrorCode } from '@apl/client';
import { EXIT, MismatchError, UsageError, advising, failure } from './exit.js';

const ctx = { caFile: '/ca.pem', tokensFile: '/tokens.json' };
const api = (code: ErrorCode, status: number, extra: Record<string, unknown> = {}) => new ERROR_CLASSES[code](status, { error: code, message: `m ${code}`, ...extra } as never);

t.test('the node\'s refusals exit 4 with advice; 503 and 421 exit 5', async (t) => {
  const cases: [ErrorCode, number, RegExp | null][] = [
    ['unauthorized', 401, /\/tokens\.json/], ['forbidden', 403, /--as <name>/], ['unknown_agent', 401, /apl admin agent bind/],
    ['attestation', 403, /apl agent attest/], ['capability_mapping', 422, /--cap/], ['no_active_policy', 409, /apl dev init/],
    ['unknown_policy', 404, /apl admin policy list/], ['already_exists', 409, /^It exists already; nothing was changed\.$/], ['invalid_transition', 409, /apl admin policy show/],
    ['unknown_account', 404, /Check the id \(an agent's read answers this too/], ['substrate_rejected', 422, /Nothing was recorded/], ['payload_too_large', 413, null],
  ];
  for (const [code, status, hint] of cases) {
    const f = failure(api(code, status), ctx);
    t.equal(f.exit, EXIT.rejected, code);
    if (hint) t.match(f.hint, hint, code);
    else t.equal(f.hint, null, code);
  }
  const stale = api('stale_policy', 409, { pinned: 'a', active: 'b' });
  stale.attempts = 3;
  t.match(failure(stale, ctx).hint, /each of 3 attempt/);
  t.match(failure(api('malformed_request', 400, { issues: [{ path: 'entries.0', message: 'is wrong' }, { path: '', message: 'is required' }] }), ctx).hint, 'entries.0: is wrong\n(body): is required');
  t.equal(failure(api('malformed_request', 400), ctx).hint, null);
  t.same([failure(api('commit_unavailable', 503), ctx).exit, failure(api('not_primary', 421), ctx).exit], [EXIT.unavailable, EXIT.unavailable]);
  t.match(failure(api('not_primary', 421), ctx).hint, /every replica/);
  const unconfirmed = api('commit_unavailable', 503);
  unconfirmed.transaction = 'txn_x1';
  t.equal(failure(unconfirmed, ctx).hint, 'The commit could not be confirmed and the intent may have landed: submit again with --transaction txn_x1, or read it with apl agent tx txn_x1.');
  t.match(failure(api('commit_unavailable', 503), ctx).hint, /^The replica could not confirm it in time, or cannot serve now/, 'a read\'s or an admin write\'s: no intent advice');
  t.notMatch(failure(api('commit_unavailable', 503), ctx).hint, /--transaction/);
  const fourEyes = failure(new ERROR_CLASSES.forbidden(403, { error: 'forbidden', message: 'The reviewer of policy pol_1 must not be its author (dana).' } as never), ctx);
  t.match(fourEyes.hint, /^Four eyes: another principal must take this step/, 'the principal has the role; another must act');
  // The command that shows what exists: one that there is, for each kind.
  const exists = (message: string, id: string) => failure(new ERROR_CLASSES.already_exists(409, { error: 'already_exists', message, id } as never), ctx).hint;
  t.equal(exists('Account acc_cli already exists.', 'acc_cli'), 'It exists already; nothing was changed. apl admin account show acc_cli shows it.');
  t.equal(exists('Usage balance usage_cli already exists.', 'usage_cli'), 'It exists already; nothing was changed. apl admin usage show usage_cli shows it.');
  t.match(exists('Party p already exists.', 'p'), /apl admin party list shows it/);
  t.match(exists('Trust root i already exists.', 'i'), /apl admin trust-root list shows it/);
  t.match(exists('Agent binding agent://a.example/agent/x already exists.', 'agent://a.example/agent/x'), /apl admin agent list shows it/);
  t.match(exists('Policy pol_1 already exists.', 'pol_1'), /apl admin policy show pol_1 shows it/);
});

t.test('a command\'s own advice replaces the general one for the codes it names, and only those', async (t) => {
  const hints = { invalid_transition: 'apl cluster status shows the voters' };
  const advised = await advising(hints, () => Promise.reject(api('invalid_transition', 409, { id: 'n4' }))).catch((e: unknown) => e);
  t.match(failure(advised, ctx), { exit: EXIT.rejected, code: 'invalid_transition', message: 'm invalid_transition', hint: hints.invalid_transition, status: 409, body: { id: 'n4' } });
  const other = await advising(hints, () => Promise.reject(api('forbidden', 403))).catch((e: unknown) => e);
  t.match(failure(other, ctx).hint, /--as <name>/, 'a code it does not name keeps the general advice');
  const chosen = { invalid_transition: (e: { message: string }) => (/never reused/.test(e.message) ? 'use a new id' : null) };
  const reused = await advising(chosen, () => Promise.reject(api('invalid_transition', 409, { message: 'n3 was removed from the cluster and ids are never reused' }))).catch((e: unknown) => e);
  t.equal(failure(reused, ctx).hint, 'use a new id', 'advice chosen by the refusal');
  const general = await advising(chosen, () => Promise.reject(api('invalid_transition', 409))).catch((e: unknown) => e);
  t.match(failure(general, ctx).hint, /apl admin policy show/, 'none chosen: the general advice');
  const unavailable = await advising({ not_primary: 'x' }, () => Promise.reject(api('not_primary', 421))).catch((e: unknown) => e);
  t.equal(failure(unavailable, ctx).exit, EXIT.unavailable, 'the exit code stays the refusal\'s');
  t.equal(await advising(hints, () => Promise.resolve(7)), 7);
});

t.test('no answer exits 5, a local problem 2, a failed verification 6, a bug 1', async (t) => {
  t.match(failure(new TransportError('https://x', 'ECONNREFUSED', 'refused'), ctx), { exit: EXIT.unavailable, hint: /npm start/ });
  t.match(failure(new TransportError('https://x', 'DEPTH_ZERO_SELF_SIGNED_CERT', 'tls'), ctx), { exit: EXIT.unavailable, hint: /not trusted with \/ca\.pem/ });
  t.match(failure(new TransportError('https://x', 'UNABLE_TO_VERIFY_LEAF_SIGNATURE', 'tls'), { ...ctx, caFile: null }).hint, /the system's CAs/);
  t.match(failure(new TransportError('https://x', 'ETIMEDOUT', 'slow'), ctx).hint, /readyz/);
  t.match(failure(new TransportError('https://x', 'EHOSTUNREACH', 'no route'), ctx).hint, /Check the address/);
  t.match(failure(new UnexpectedResponseError(200, 'x', 'not json'), ctx), { exit: EXIT.unavailable, code: 'unexpected_response' });
  t.match(failure(new NoAttestationError('Reading'), ctx), { exit: EXIT.usage, code: 'no_attestation', message: 'Reading needs an attestation, and none was given (nothing was sent).', hint: /APL_ATTESTATION/ });
  t.match(failure(new UnreadableAttestationError(), ctx), { exit: EXIT.usage, code: 'unreadable_attestation', message: /nothing was sent/, hint: /--agent/ });
  t.match(failure(new UsageError('bad', 'do this'), ctx), { exit: EXIT.usage, hint: 'do this' });
  t.match(failure(new UsageError('bad'), ctx), { exit: EXIT.usage, hint: null });
  t.match(failure(new MismatchError('differs'), ctx), { exit: EXIT.mismatch, message: 'differs' });
  t.match(failure(new TypeError('oops'), ctx), { exit: EXIT.failure, code: 'internal', hint: /a bug/ });
  t.match(failure('thrown text', ctx), { exit: EXIT.failure, message: 'thrown text' });
});
