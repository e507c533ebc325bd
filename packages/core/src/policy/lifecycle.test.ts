// Proves the policy lifecycle on the admin plane: draft -> reviewed -> approved ->
// active -> superseded, with four eyes (the reviewer is not the author, the
// approver is neither), each step needing its role, only an approved policy
// activating, the previous one superseded at the activation's tick, a history of
// who did what and when, and every refused step recording nothing.
import t from 'tap';
import type { Policy } from '../state.js';
import { TABLES } from '../store.js';
import type { Applied } from '../apply.js';
import { policyView } from '../admin.js';
import type { Principal } from '../ops.js';
import { APPROVER, AUTHOR, Harness, intent, OPERATOR, PERMIT_ALL, REVIEWER, verdictOf } from '../testing.js';
import { bundleHash } from './bundle.js';

const code = (a: Applied) => (a.result.ok ? 'ok' : a.result.error.error);
const message = (a: Applied) => (a.result.ok ? 'ok' : a.result.error.message);

/** Runs a step that must be refused and record nothing; throws (failing the test) otherwise. */
function refused(h: Harness, type: string, fields: Record<string, unknown>, by: Principal): Applied {
  const before = h.stateHash;
  const a = h.admin(type, fields, by);
  if (a.result.ok) throw new Error(`${type} by ${by.name} was not refused`);
  if (h.stateHash !== before) throw new Error(`the refused ${type} by ${by.name} changed the state`);
  return a;
}

t.test('a policy goes draft, reviewed, approved, active, with four distinct eyes', async (t) => {
  const h = Harness.bootstrap();
  h.tick(3);
  t.equal(code(h.admin('DraftPolicy', { id: 'pol_2', bundle: PERMIT_ALL }, AUTHOR)), 'ok');
  t.equal(code(h.admin('ReviewPolicy', { id: 'pol_2', comment: 'reads well' }, REVIEWER)), 'ok');
  t.equal(code(h.admin('ApprovePolicy', { id: 'pol_2' }, APPROVER)), 'ok');
  const a = h.admin('ActivatePolicy', { id: 'pol_2' }, OPERATOR);
  t.ok(a.result.ok);
  const v = policyView(h.state.policies.get('pol_2')!);
  t.same({ ...v, history: undefined }, {
    id: 'pol_2', state: 'active', bundle_hash: bundleHash(PERMIT_ALL), author: 'alice', reviewer: 'bob', approver: 'carol',
    activated_at_tick: 3, superseded_at_tick: null, history: undefined, bundle: PERMIT_ALL,
  });
  t.same(v.history.map((e) => [e.action, e.by, e.tick, e.comment ?? null]), [
    ['draft', 'alice', 3, null], ['review', 'bob', 3, 'reads well'], ['approve', 'carol', 3, null], ['activate', 'ops', 3, null],
  ]);
  t.same(v.history.map((e) => e.log_index), [...v.history.keys()].map((k) => v.history[0]!.log_index + k), 'each event at its own log index');
  t.equal(h.state.activePolicy, 'pol_2');
});

t.test('activation supersedes the policy in force at the same tick, and is final', async (t) => {
  const h = Harness.bootstrap();
  h.tick(2);
  h.activate('pol_2', PERMIT_ALL);
  const old = h.state.policies.get('pol_1')!;
  t.equal(old.state, 'superseded');
  t.equal(old.superseded_at_tick, 2);
  t.same(old.history.at(-1), { action: 'supersede', by: 'carol', tick: 2, log_index: old.history.at(-1)!.log_index, comment: 'superseded by pol_2' });
  t.equal(message(refused(h, 'ActivatePolicy', { id: 'pol_1' }, APPROVER)), 'Policy pol_1 is superseded; only a policy that is approved can become active.');
  t.equal(h.store.values<Policy>(TABLES.policy.prefix).filter((p) => p.state === 'active').length, 1, 'one policy is in force');
});

t.test('the reviewer is not the author, whatever roles the author holds', async (t) => {
  const h = Harness.bootstrap();
  const both: Principal = { name: 'alice', roles: ['author', 'reviewer', 'approver'] };
  h.admin('DraftPolicy', { id: 'pol_2', bundle: PERMIT_ALL }, both);
  const a = refused(h, 'ReviewPolicy', { id: 'pol_2' }, both);
  t.equal(code(a), 'forbidden');
  t.equal(message(a), 'The reviewer of policy pol_2 must not be its author (alice).');
});

t.test('the approver is neither the author nor the reviewer', async (t) => {
  const h = Harness.bootstrap();
  h.admin('DraftPolicy', { id: 'pol_2', bundle: PERMIT_ALL }, AUTHOR);
  h.admin('ReviewPolicy', { id: 'pol_2' }, REVIEWER);
  for (const name of ['alice', 'bob']) {
    const a = refused(h, 'ApprovePolicy', { id: 'pol_2' }, { name, roles: ['approver'] });
    t.equal(message(a), 'The approver of policy pol_2 must be neither its author (alice) nor its reviewer (bob).');
  }
  t.equal(code(h.admin('ApprovePolicy', { id: 'pol_2' }, APPROVER)), 'ok');
});

t.test('each step needs its role; activation takes an operator or an approver', async (t) => {
  const h = Harness.bootstrap();
  const as = (name: string, role: Principal['roles'][number]): Principal => ({ name, roles: [role] });
  t.equal(message(refused(h, 'DraftPolicy', { id: 'pol_2', bundle: PERMIT_ALL }, as('ops', 'operator'))), 'ops may not do DraftPolicy (it needs the author role).');
  h.admin('DraftPolicy', { id: 'pol_2', bundle: PERMIT_ALL }, AUTHOR);
  t.equal(code(refused(h, 'ReviewPolicy', { id: 'pol_2' }, as('carol', 'approver'))), 'forbidden');
  h.admin('ReviewPolicy', { id: 'pol_2' }, REVIEWER);
  t.equal(code(refused(h, 'ApprovePolicy', { id: 'pol_2' }, as('dave', 'reviewer'))), 'forbidden');
  h.admin('ApprovePolicy', { id: 'pol_2' }, APPROVER);
  t.equal(code(refused(h, 'ActivatePolicy', { id: 'pol_2' }, as('erin', 'reviewer'))), 'forbidden');
  t.equal(code(h.admin('ActivatePolicy', { id: 'pol_2' }, as('frank', 'operator'))), 'ok', 'an operator activates');
  h.admin('DraftPolicy', { id: 'pol_3', bundle: PERMIT_ALL }, AUTHOR);
  h.admin('ReviewPolicy', { id: 'pol_3' }, REVIEWER);
  h.admin('ApprovePolicy', { id: 'pol_3' }, APPROVER);
  t.equal(code(h.admin('ActivatePolicy', { id: 'pol_3' }, APPROVER)), 'ok', 'so does an approver, the same one who approved');
});

t.test('only an approved policy can be activated, and no step can be skipped or repeated', async (t) => {
  const h = Harness.bootstrap();
  h.admin('DraftPolicy', { id: 'pol_2', bundle: PERMIT_ALL }, AUTHOR);
  t.equal(message(refused(h, 'ActivatePolicy', { id: 'pol_2' }, APPROVER)), 'Policy pol_2 is draft; only a policy that is approved can become active.');
  t.equal(message(refused(h, 'ApprovePolicy', { id: 'pol_2' }, APPROVER)), 'Policy pol_2 is draft; only a policy that is reviewed can become approved.');
  h.admin('ReviewPolicy', { id: 'pol_2' }, REVIEWER);
  t.equal(message(refused(h, 'ReviewPolicy', { id: 'pol_2' }, { name: 'dave', roles: ['reviewer'] })), 'Policy pol_2 is reviewed; only a policy that is draft can become reviewed.');
  t.equal(message(refused(h, 'ActivatePolicy', { id: 'pol_2' }, APPROVER)), 'Policy pol_2 is reviewed; only a policy that is approved can become active.');
  const unknown = refused(h, 'ActivatePolicy', { id: 'pol_9' }, APPROVER);
  t.same(unknown.result, { ok: false, error: { error: 'unknown_policy', message: 'No policy pol_9 exists.', id: 'pol_9' } });
  const transition = refused(h, 'ApprovePolicy', { id: 'pol_1' }, APPROVER);
  t.same(transition.result.ok ? null : { state: transition.result.error.state, id: transition.result.error.id }, { state: 'active', id: 'pol_1' });
});

t.test('drafting refuses an invalid bundle and an existing id, recording nothing', async (t) => {
  const h = Harness.bootstrap();
  const bad = refused(h, 'DraftPolicy', { id: 'pol_2', bundle: { rules: [{ id: 'R', modality: 'permission', priority: 1, match: { action: '*' }, basis: 'b', when: [{ left: 'amount', op: 'gt', right: 1 }] }] } }, AUTHOR);
  t.same(bad.result, { ok: false, error: {
    error: 'invalid_policy',
    message: 'Policy pol_2 is not valid: rule R: a condition on amount names its currency',
    issues: [{ path: 'rules.0.when.0.currency', message: 'rule R: a condition on amount names its currency' }],
  } });
  const dup = refused(h, 'DraftPolicy', { id: 'pol_1', bundle: PERMIT_ALL }, AUTHOR);
  t.same(dup.result, { ok: false, error: { error: 'already_exists', message: 'Policy pol_1 already exists.', id: 'pol_1' } });
});

t.test('intents are judged by the policy activated last, from the activation on', async (t) => {
  const h = Harness.bootstrap();
  const deny = { rules: [{ id: 'R-none', modality: 'prohibition', priority: 1, match: { action: '*' }, basis: 'Nothing today' }] };
  h.admin('DraftPolicy', { id: 'pol_2', bundle: deny }, AUTHOR);
  h.admin('ReviewPolicy', { id: 'pol_2' }, REVIEWER);
  h.admin('ApprovePolicy', { id: 'pol_2' }, APPROVER);
  t.equal(verdictOf(h.run(intent({ policy: 'pol_1' }))), 'Permitted', 'an approved policy is not yet in force');
  h.admin('ActivatePolicy', { id: 'pol_2' }, APPROVER);
  t.equal(verdictOf(h.run(intent({ policy: 'pol_1' }))), 'policy_pin_mismatch');
  t.equal(verdictOf(h.run(intent({ policy: 'pol_2' }))), 'ForbiddenRejected');
});
