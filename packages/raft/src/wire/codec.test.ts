// Proves that what a peer decodes is what was sent: every message type round-trips with
// arbitrary field values (uint64s up to 2^53 - 1, empty and non-empty data, optional
// snapshot and context), a 64-bit value beyond 2^53 is refused rather than rounded, a
// message of another cluster or a malformed buffer is refused, snapshot metadata of a
// sender that predates the removed ids reads as none removed, and the committed
// descriptor is the one proto/raft.proto generates.
import { execFileSync } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import fc from 'fast-check';
import Long from 'long';
import t from 'tap';
import { MESSAGE_TYPES, type Entry, type Message } from '../types.js';
import { decodeSnapshotMeta, encodeSnapshotMeta, messageCodec, WireError, wireTypes } from './codec.js';

const REPO = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..', '..');
const codec = messageCodec('apl-test');

const u64 = fc.oneof(fc.constantFrom(0, 1, 2 ** 32 - 1, 2 ** 32, 2 ** 53 - 1), fc.nat(), fc.maxSafeNat());
const id = fc.string({ minLength: 1, maxLength: 12 });
const bytes = fc.uint8Array({ maxLength: 64 }).map((b) => new Uint8Array(b));
const entry: fc.Arbitrary<Entry> = fc.record(
  {
    index: u64.filter((n) => n >= 1),
    term: u64.filter((n) => n >= 1),
    data: bytes,
    type: fc.constant('conf' as const),
  },
  { requiredKeys: ['index', 'term', 'data'] },
);
// A configuration as confState() makes it: sorted, disjoint, contexts only for members,
// and removed ids (none, or some) that are no member's.
const conf = fc.uniqueArray(id, { minLength: 1, maxLength: 9 }).chain((all) => {
  const ids = all.slice(0, 6);
  return fc.record({
    voters: fc.constant(ids.slice(0, Math.ceil(ids.length / 2)).sort()),
    learners: fc.constant(ids.slice(Math.ceil(ids.length / 2)).sort()),
    context: fc.constant(Object.fromEntries(ids.sort().map((x) => [x, `ctx-${x}`]))),
    removed: fc.constant(all.slice(6).sort()),
  });
});
const message: fc.Arbitrary<Message> = fc
  .record(
    {
      type: fc.constantFrom(...MESSAGE_TYPES),
      from: id,
      to: id,
      term: u64,
      logTerm: u64,
      index: u64,
      entries: fc.array(entry, { maxLength: 4 }),
      commit: u64,
      reject: fc.boolean(),
      rejectHint: u64,
      snapshot: fc.record({
        meta: fc.record({ index: u64, term: u64, conf }),
        data: bytes,
      }),
      context: bytes,
    },
    { requiredKeys: ['type', 'from', 'to', 'term', 'logTerm', 'index', 'entries', 'commit', 'reject', 'rejectHint'] },
  )
  .map((m) => m as Message);

t.test('every message type round-trips, field for field', async (t) => {
  fc.assert(
    fc.property(message, (m) => {
      t.same(codec.decode(codec.encode(m)), m);
    }),
    { numRuns: 2000 },
  );
  for (const type of MESSAGE_TYPES) {
    const m: Message = { ...base(), type };
    t.same(codec.decode(codec.encode(m)), m, `${type} round-trips`);
  }
});

t.test('an empty context and an empty snapshot are kept apart from absent ones', async (t) => {
  const empty: Message = { ...base(), context: new Uint8Array(), snapshot: { meta: { index: 0, term: 0, conf: { voters: [], learners: [], context: {}, removed: [] } }, data: new Uint8Array() } };
  const decoded = codec.decode(codec.encode(empty));
  t.ok(decoded.context instanceof Uint8Array && decoded.context.length === 0, 'empty context stays present');
  t.same(decoded.snapshot, empty.snapshot);
  const absent = codec.decode(codec.encode(base()));
  t.notOk('context' in absent, 'absent context stays absent');
  t.notOk('snapshot' in absent, 'absent snapshot stays absent');
});

t.test('a 64-bit value beyond 2^53 is refused on both sides, never rounded', async (t) => {
  for (const field of ['term', 'logTerm', 'index', 'commit', 'rejectHint'] as const) {
    t.throws(() => codec.encode({ ...base(), [field]: 2 ** 53 }), { code: 'unsafe_integer' }, `encode refuses ${field} 2^53`);
  }
  t.throws(() => codec.encode({ ...base(), term: -1 }), { code: 'unsafe_integer' });
  t.throws(() => codec.encode({ ...base(), index: 1.5 }), { code: 'unsafe_integer' });
  for (const big of ['9007199254740992', '18446744073709551615']) {
    const wire = wireTypes.message.encode({ clusterId: 'apl-test', type: 0, from: 'a', to: 'b', term: Long.fromString(big, true) }).finish();
    t.throws(() => codec.decode(wire), { code: 'unsafe_integer', message: new RegExp(big) }, `decode refuses ${big}`);
    const entryWire = wireTypes.message.encode({
      clusterId: 'apl-test', type: 0, from: 'a', to: 'b', entries: [{ index: Long.fromString(big, true), term: 1 }],
    }).finish();
    t.throws(() => codec.decode(entryWire), { code: 'unsafe_integer' }, `decode refuses an entry index of ${big}`);
  }
  const edge = wireTypes.message.encode({ clusterId: 'apl-test', type: 0, from: 'a', to: 'b', commit: Long.fromString('9007199254740991', true) }).finish();
  t.equal(codec.decode(edge).commit, 2 ** 53 - 1, '2^53 - 1 is the largest value accepted');
});

t.test('a message of another cluster is refused', async (t) => {
  const other = messageCodec('another-cluster');
  t.throws(() => codec.decode(other.encode(base())), { code: 'foreign_cluster' });
  const none = wireTypes.message.encode({ type: 0, from: 'a', to: 'b' }).finish();
  t.throws(() => codec.decode(none), { code: 'foreign_cluster' }, 'a message without a cluster id is foreign too');
  t.throws(() => messageCodec(''), /must not be empty/);
});

t.test('malformed input is refused with a WireError', async (t) => {
  const cases: [string, Uint8Array][] = [
    ['truncated inside an entry', truncated(codec.encode({ ...base(), entries: [{ index: 1, term: 1, data: new Uint8Array(10) }] }))],
    ['garbage', new Uint8Array([0xff, 0xff, 0xff, 0xff, 0xff, 0xff])],
    ['unknown type', wireTypes.message.encode({ clusterId: 'apl-test', type: 99, from: 'a', to: 'b' }).finish()],
    ['no sender', wireTypes.message.encode({ clusterId: 'apl-test', type: 0, to: 'b' }).finish()],
    ['entry index 0', wireTypes.message.encode({ clusterId: 'apl-test', type: 0, from: 'a', to: 'b', entries: [{ index: 0, term: 1 }] }).finish()],
    ['snapshot without metadata', wireTypes.message.encode({ clusterId: 'apl-test', type: 8, from: 'a', to: 'b', snapshot: { data: new Uint8Array(1) } }).finish()],
  ];
  for (const [name, wire] of cases) {
    t.equal(refusal(() => codec.decode(wire)), 'malformed', name);
  }
  t.throws(() => codec.encode({ ...base(), type: 'nope' as Message['type'] }), { code: 'malformed' });
});

t.test('snapshot metadata round-trips on its own', async (t) => {
  const meta = { index: 2 ** 53 - 1, term: 7, conf: { voters: ['n1', 'n2', 'n3'], learners: ['n4'], context: { n1: 'a', n4: 'd' }, removed: ['n0', 'n5'] } };
  t.same(decodeSnapshotMeta(encodeSnapshotMeta(meta)), meta, 'the removed ids travel with the configuration');
  // A member id is any non-empty string, `__proto__` too: it stays a key of its own.
  const odd = { index: 1, term: 1, conf: { voters: ['__proto__', 'constructor'], learners: [], context: Object.fromEntries([['__proto__', 'a'], ['constructor', 'b']]), removed: [] } };
  const back = decodeSnapshotMeta(encodeSnapshotMeta(odd));
  t.same(Object.entries(back.conf.context), [['__proto__', 'a'], ['constructor', 'b']]);
  t.throws(() => decodeSnapshotMeta(new Uint8Array([0xff])), { code: 'malformed' });
});

t.test('snapshot metadata of a sender that predates removed ids (no field 6) reads as none removed', async (t) => {
  // What such a sender wrote: index, term, voters, learners and context only.
  const old = wireTypes.snapshotMeta.encode({ index: 9, term: 2, voters: ['n1', 'n2'], learners: ['n4'], context: { n4: 'd' } }).finish();
  t.same(decodeSnapshotMeta(old), { index: 9, term: 2, conf: { voters: ['n1', 'n2'], learners: ['n4'], context: { n4: 'd' }, removed: [] } });
  const refused = wireTypes.snapshotMeta.encode({ index: 9, term: 2, voters: ['n1'], removed: [''] }).finish();
  t.throws(() => decodeSnapshotMeta(refused), { code: 'malformed' }, 'a removed id must name a member that was');
});

t.test('the committed descriptors are what the .proto files generate', async (t) => {
  const run = () => execFileSync(process.execPath, [join(REPO, 'scripts', 'proto.mjs'), '--check'], { encoding: 'utf8', stdio: 'pipe' });
  t.doesNotThrow(run, 'npm run proto would change nothing');
});

function truncated(wire: Uint8Array): Uint8Array {
  return wire.subarray(0, wire.length - 3);
}

function refusal(fn: () => unknown): string {
  try {
    fn();
    return 'accepted';
  } catch (err) {
    return err instanceof WireError ? err.code : `not a WireError: ${String(err)}`;
  }
}

function base(): Message {
  return { type: 'app', from: 'a', to: 'b', term: 1, logTerm: 0, index: 0, entries: [], commit: 0, reject: false, rejectHint: 0 };
}
