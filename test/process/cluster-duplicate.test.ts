// Proves, with three node processes, that two processes never go on as one member: a
// member's data directory copied while it was stopped, then started twice (the
// member, and the copy elsewhere, here on other ports: its own directory's lock does
// not reach the copy), gives two processes of the same start. The first call that
// shows both to a peer decides: the one of the earlier tag stops with exit status 2
// and a line that says why and what to do, the other goes on, and the cluster takes
// intents throughout.
import { cpSync, rmSync } from 'node:fs';
import t from 'tap';
import { AGENT_A, bootstrap, envelope } from '../support/node.js';
import { freePort, startCluster } from '../support/cluster.js';
import type { NodeProcess } from '../support/process.js';

t.setTimeout(120_000);

t.test('a copy of a member started beside it: one of the two stops, saying why; the cluster goes on', async (t) => {
  const c = await startCluster();
  t.teardown(() => c.close());
  const leader = await c.leader();
  await bootstrap(c.handle(leader));
  const dup = c.members.map((m) => m.id).find((id) => id !== leader)!;

  await c.stop(dup);
  const copy = `${c.dirs[dup]!}-copy`;
  cpSync(c.dirs[dup]!, copy, { recursive: true });
  t.teardown(() => rmSync(copy, { recursive: true, force: true }));
  const original = await c.start(dup);
  t.teardown(() => original.kill());
  const att = await c.issuer.sign(AGENT_A);
  t.equal((await c.handle(leader).api('POST', '/api/v1/intents', { body: envelope(att, { transaction: 'txn_dup_before' }) })).status, 200);

  // The copy: the same member, the same start count, its own ports and directory.
  const ports = { agent: await freePort(), admin: await freePort(), peer: await freePort() };
  const second = await c.start(dup, { APL_DATA_DIR: copy, APL_AGENT_PORT: String(ports.agent), APL_ADMIN_PORT: String(ports.admin), APL_PEER_PORT: String(ports.peer) }).then(
    (p) => ({ p, refused: null }),
    (err: Error) => ({ p: null, refused: err.message }));
  const processes: Record<string, NodeProcess | null> = { original, copy: second.p };
  t.teardown(() => second.p?.kill());

  // The copy hears from no one (its peers call the member's configured address) and
  // campaigns within an election timeout: its first call shows a peer both processes.
  const ended = second.refused !== null
    ? { which: 'copy', code: Number(/\(code (\d+)/.exec(second.refused)?.[1] ?? NaN), output: second.refused }
    : await Promise.race([
      original.exited.then((e) => ({ which: 'original', code: e.code, output: original.output() })),
      second.p!.exited.then((e) => ({ which: 'copy', code: e.code, output: second.p!.output() })),
      new Promise<{ which: string; code: null; output: string }>((resolve) => {
        const timer = setTimeout(() => resolve({ which: 'none', code: null, output: `original: ${original.output().slice(-600)}\ncopy: ${second.p!.output().slice(-600)}` }), 30_000);
        t.teardown(() => clearTimeout(timer));
      }),
    ]);
  t.not(ended.which, 'none', `one of the two stops: ${ended.output.slice(-800)}`);
  t.equal(ended.code, 2, 'with exit status 2');
  const other = ended.which === 'original' ? processes.copy : processes.original;
  t.ok(other?.alive(), `the other goes on (${ended.which} stopped)`);
  t.match(ended.output, new RegExp(`member ${dup} stops: n\\d has heard from a later start of ${dup} than this one \\(start 2 of [^)]+\\): `
    + `start 2 of ${dup} has called n\\d from 127\\.0\\.0\\.1:\\d+, and this process is start 2 \\(both start 2: the tag [0-9a-f]{16} orders after this process's [0-9a-f]{16}\\)\\. `
    + `Two processes must never run as one member\\.`));
  t.match(ended.output, `if this data directory was put back from an older copy, it must not rejoin as ${dup}: remove it (DELETE /admin/v1/cluster/members/${dup} at the primary)`);
  t.notMatch(ended.output, /\n\s+at /, 'no stack trace');

  // Whichever went on, the primary and the third member still make a quorum.
  t.equal((await c.handle(leader).api('POST', '/api/v1/intents', { body: envelope(att, { transaction: 'txn_dup_after' }) })).status, 200, 'the cluster takes intents');
});
