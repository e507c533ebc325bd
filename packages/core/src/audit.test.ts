// Proves the export verifier: a faithful export verifies to the ledger's digest and
// state hash, and a tampered result, a broken link, a reordered or a dropped record,
// a missing or mistyped field, an empty line or a carriage return is caught at its line.
import t from 'tap';
import { canonicalJson } from './canonical.js';
import { parseJson } from './json.js';
import { ExportVerifier, verifyExport } from './audit.js';
import { MemoryStore } from './memory-store.js';
import { Harness, intent, EVIDENCE } from './testing.js';

function exported(): { h: Harness; lines: string[] } {
  const h = Harness.bootstrap();
  h.run(intent({ transaction: 'txn_a1', consume_usage: { usage: 'usage_llm_a', amount: { minor: 18446744073709551621n, currency: 'USD' } } }));
  h.run(intent({ transaction: 'txn_a2', policy: 'pol_stale' }));
  h.tick(2);
  h.run(intent({ transaction: 'txn_a3', evidence: [EVIDENCE] }));
  const replay = new MemoryStore();
  const lines: string[] = [];
  for (const { index, op } of h.log) {
    const a = replay.apply(index, op);
    if (a.entry_hash !== null) lines.push(canonicalJson({ index, op, result: a.result, entry_hash: a.entry_hash }));
  }
  return { h, lines };
}

t.test('a faithful export verifies to the ledger digest and state hash', async (t) => {
  const { h, lines } = exported();
  t.same(verifyExport(`${lines.join('\n')}\n`), { ok: true, records: lines.length, applied: h.store.meta.applied, digest: h.head, state_hash: h.stateHash });
  t.equal(lines.length, h.log.length - 1, 'the stale-pin intent took no effect and is not exported');
});

t.test('tampering is caught at its line', async (t) => {
  const { lines } = exported();
  const last = lines.length;
  const tampered = [...lines];
  tampered[last - 1] = tampered[last - 1]!.replace('"verdict":"Permitted"', '"verdict":"ForbiddenRejected"');
  t.match(verifyExport(tampered.join('\n')), { ok: false, line: last, reason: /recorded result/ });
  const link = [...lines];
  link[2] = link[2]!.replace(/"entry_hash":"[0-9a-f]{64}"/, `"entry_hash":"${'0'.repeat(64)}"`);
  t.match(verifyExport(link.join('\n')), { ok: false, line: 3, reason: /chain breaks/ });
  const swapped = [...lines];
  [swapped[3], swapped[4]] = [swapped[4]!, swapped[3]!];
  t.match(verifyExport(swapped.join('\n')), { ok: false, line: 4 }, 'the first swapped record breaks the chain');
  const dropped = lines.filter((_, i) => i !== 5);
  t.match(verifyExport(dropped.join('\n')), { ok: false, line: 6 });
  t.match(verifyExport('{"index":1'), { ok: false, line: 1, reason: /not JSON/ });
});

t.test('the streaming verifier reaches the same verdict line by line, and stays failed after a failure', async (t) => {
  const { lines } = exported();
  const v = new ExportVerifier();
  for (const l of lines) t.same(v.push(l), { ok: true });
  t.same(v.result(), verifyExport(lines.join('\n')));
  const bad = new ExportVerifier();
  bad.push(lines[0]!);
  const failed = bad.push(lines[2]!);
  t.match(failed, { ok: false, line: 2, reason: /index \d+ does not follow|chain breaks|recorded result/ });
  t.same(bad.push(lines[1]!), failed, 'a later line cannot repair the chain');
  t.same(bad.result(), failed);
});

t.test('a line that is not the canonical JSON of its record is refused at its line, though it parses to the same record', async (t) => {
  const { lines } = exported();
  const spaced = [...lines];
  spaced[2] = spaced[2]!.replace('"index":', '"index": ');
  t.match(verifyExport(spaced.join('\n')), { ok: false, line: 3, reason: /^not canonical JSON: it differs from the canonical encoding of its record at character \d+$/ });
  const reordered = [...lines];
  const r = JSON.parse(reordered[1]!) as Record<string, unknown>;
  reordered[1] = JSON.stringify({ op: r.op, index: r.index, result: r.result, entry_hash: r.entry_hash });
  t.match(verifyExport(reordered.join('\n')), { ok: false, line: 2, reason: /^not canonical JSON/ }, 'keys out of order');
  const trailing = [...lines];
  trailing[0] = `${trailing[0]} `;
  t.match(verifyExport(trailing.join('\n')), { ok: false, line: 1, reason: /^not canonical JSON/ }, 'a trailing space');
  t.match(verifyExport(lines.join('\n')), { ok: true }, 'the faithful lines still verify');
});

t.test('a line with a field besides entry_hash, index, op and result is refused, in canonical form too', async (t) => {
  const { lines } = exported();
  const withExtra = [...lines];
  const r = JSON.parse(withExtra[2]!) as Record<string, unknown>;
  withExtra[2] = canonicalJson({ ...r, zzz: 1 });
  t.match(verifyExport(withExtra.join('\n')), { ok: false, line: 3, reason: /^not a record: "zzz" is not a field of a record/ });
  const two = [...lines];
  two[0] = canonicalJson({ ...(JSON.parse(two[0]!) as Record<string, unknown>), a: true, note: 'x' });
  t.match(verifyExport(two.join('\n')), { ok: false, line: 1, reason: /^not a record: "a", "note" are not fields/ });
  t.match(verifyExport(`${lines[0]}\n[1,2]`), { ok: false, line: 2, reason: /^not a record: a line is an object/ });
  t.match(verifyExport('7'), { ok: false, line: 1, reason: /^not a record/ });
  t.match(verifyExport(lines.join('\n')), { ok: true }, 'the faithful lines still verify');
});

t.test('a record missing a field, or with one of the wrong kind, is refused naming the field, not crashed on', async (t) => {
  const { lines } = exported();
  const at2 = (change: (r: Record<string, unknown>) => void) => {
    const r = parseJson(lines[1]!) as Record<string, unknown>;
    change(r);
    return verifyExport([lines[0], canonicalJson(r), ...lines.slice(2)].join('\n'));
  };
  for (const field of ['entry_hash', 'index', 'op', 'result']) {
    t.same(at2((r) => delete r[field]), { ok: false, line: 2, reason: `not a record: "${field}" is missing` }, `without ${field}`);
  }
  t.same(verifyExport(`${lines[0]}\n{}`), { ok: false, line: 2, reason: 'not a record: "entry_hash", "index", "op", "result" are missing' });
  t.same(at2((r) => (r.entry_hash = null)), { ok: false, line: 2, reason: 'not a record: "entry_hash" is null, not a hash' });
  const notIndex = (shown: string) => ({ ok: false, line: 2, reason: `not a record: "index" is ${shown}, not a log index (an integer from 1 to 9007199254740991)` });
  t.same(at2((r) => (r.index = String(r.index))), notIndex('"2"'), 'an index as a string is named as one, not as out of order');
  t.same(at2((r) => (r.index = 90071992547409930n)), notIndex('90071992547409930'));
  t.same(at2((r) => (r.index = null)), notIndex('null'));
  t.same(at2((r) => (r.index = 'x'.repeat(100))), notIndex(`"${'x'.repeat(39)}...`), 'a long value is cut');
  t.same(at2((r) => (r.index = 1)), { ok: false, line: 2, reason: 'index 1 does not follow 1' });
  t.same(at2((r) => ((r.op as Record<string, unknown>).zzz = 1)), { ok: false, line: 2, reason: 'not an operation: unknown field "zzz"' });
});

t.test('one file, one verdict: an empty line or a carriage return is refused; only the last line feed may be left off', async (t) => {
  const { lines } = exported();
  t.match(verifyExport(lines.join('\n')), { ok: true, records: lines.length });
  t.match(verifyExport(`${lines.join('\n')}\n`), { ok: true, records: lines.length });
  t.same(verifyExport(`${lines[0]}\n\n${lines.slice(1).join('\n')}\n`), { ok: false, line: 2, reason: 'an empty line: an export has one record on every line' });
  t.same(verifyExport(`${lines.join('\n')}\n\n`), { ok: false, line: lines.length + 1, reason: 'an empty line: an export has one record on every line' });
  t.same(verifyExport(`${lines.join('\r\n')}\r\n`), { ok: false, line: 1, reason: "the line ends with a carriage return: an export's lines end with a line feed alone" });
  t.same(verifyExport(''), { ok: true, records: 0, applied: 0, digest: new MemoryStore().meta.head, state_hash: new MemoryStore().meta.stateHash }, 'an empty log');
});
