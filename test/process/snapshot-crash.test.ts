// Proves that installing a streamed store survives SIGKILL at any point: killed in the
// middle of the transfer, or after it was received but before the switch, the
// receiving store reopens exactly as it was and the half-written directory is gone;
// killed after the switch, it reopens as the store it received. The receiver is a
// real process (test/support/snapshot-child.ts), killed with SIGKILL.
import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import t from 'tap';
import { canonicalJson, type Operation } from '@apl/core';
import { EVIDENCE, Harness, intent, OPERATOR } from '@apl/core/testing';
import { applyBatch, LedgerStore } from '@apl/node';
import { REPO } from '../support/process.js';

const CHILD = join(REPO, 'test/dist/support/snapshot-child.js');
const dirs: string[] = [];
t.teardown(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

const entry = (index: number, o: Operation) => ({ index, term: 1, op: { op: o, text: canonicalJson(o) } });

/** A store with `batches` batches of 50 intents after a bootstrap, and a party named `marker`. */
async function makeStore(batches: number, marker: string): Promise<string> {
  const dir = mkdtempSync(join(tmpdir(), 'apl-snapcrash-'));
  dirs.push(dir);
  const store = await LedgerStore.open(dir, { cacheEntriesMax: 1000 });
  let index = 0;
  await applyBatch(store, Harness.bootstrap().log.map((l) => entry(++index, l.op)));
  await applyBatch(store, [entry(++index, { type: 'AddParty', v: 1, by: OPERATOR, id: marker })]);
  for (let b = 0; b < batches; b++) {
    await applyBatch(store, Array.from({ length: 50 }, (_, k) => entry(++index, intent({ transaction: `txn_${marker}_${b}_${k}`, evidence: [EVIDENCE], justification_hash: 'e'.repeat(64) }))));
  }
  await store.close();
  return dir;
}

/** Runs the receiver until it prints a line matching `until`, then SIGKILLs it. */
function runUntil(source: string, target: string, mode: 'install' | 'hold', until: RegExp): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CHILD, source, target, mode], { stdio: ['ignore', 'pipe', 'inherit'] });
    let seen = '';
    createInterface({ input: child.stdout }).on('line', (line) => {
      if (seen === '' && until.test(line)) {
        seen = line;
        child.kill('SIGKILL');
      }
    });
    child.once('exit', (code, signal) => (signal === 'SIGKILL' && seen !== '' ? resolve(seen) : reject(new Error(`the receiver exited (code ${code}, signal ${signal}) before "${until.source}"`))));
  });
}

async function positionOf(dir: string) {
  const s = await LedgerStore.open(dir, { cacheEntriesMax: 10 });
  try {
    return { position: s.position, marker: await s.get('party/party_source'), stores: readdirSync(dir).filter((n) => n.startsWith('store-')).length };
  } finally {
    await s.close();
  }
}

t.test('SIGKILL during a store install never leaves a store between the old and the new', async (t) => {
  const source = await makeStore(40, 'party_source');
  const target = await makeStore(5, 'party_target');
  const sourceAt = (await positionOf(source)).position;
  const before = await positionOf(target);
  t.equal(before.marker, undefined);

  t.match(await runUntil(source, target, 'hold', /^chunk 1$/), /chunk 1/, 'killed in the middle of the transfer');
  let now = await positionOf(target);
  t.same(now.position, before.position, 'the old store reopens as it was');
  t.equal(now.stores, 1, 'the half-written store is removed');

  t.match(await runUntil(source, target, 'hold', /^received /), /received store-\d+/, 'killed after receiving, before the switch');
  now = await positionOf(target);
  t.same(now.position, before.position, 'still the old store');
  t.equal(now.stores, 1);

  t.match(await runUntil(source, target, 'install', /^installed /), /installed \d+/, 'killed after the switch');
  now = await positionOf(target);
  t.same(now.position, sourceAt, 'the received store is the one in use');
  t.same(now.marker, { id: 'party_source' });
  t.equal(now.stores, 1, 'and the old one is gone');
});
