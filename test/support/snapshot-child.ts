/**
 * A process that receives a streamed store, for the crash test of the install: it
 * streams `<source>` into `<target>` chunk by chunk (a pause after each, and a line on
 * stdout), then, unless told to stop before it, installs it, saying so, and waits to
 * be killed.
 *
 *   node snapshot-child.js <source-dir> <target-dir> install|hold
 */
import { LedgerStore, type SnapshotChunk } from '@apl/node';

const [source, target, mode] = process.argv.slice(2);
const from = await LedgerStore.open(source!, { cacheEntriesMax: 10 });
const to = await LedgerStore.open(target!, { cacheEntriesMax: 10 });
const { position, chunks } = await from.openSnapshot();
async function* paced(): AsyncGenerator<SnapshotChunk> {
  for await (const c of chunks) {
    yield c;
    process.stdout.write(`chunk ${c.seq}\n`);
    await new Promise((r) => setTimeout(r, 30));
  }
}
const name = await to.receiveSnapshot({ stateHash: position.stateHash, applied: position.applied }, paced());
process.stdout.write(`received ${name}\n`);
if (mode === 'install') {
  await to.install(name);
  process.stdout.write(`installed ${to.position.applied}\n`);
}
setInterval(() => undefined, 1000);
